#!/usr/bin/env python3
"""Where a step's time goes, op by op, from a run's Chrome trace: each
backward op's span (autograd records one per op while a trace window is
open), the gradient sums and accumulations, and the step phases (forward,
backward, optimizer, input), in milliseconds per step.

    tandem train --model resnet --precision mixed_bfloat16 --threads 1 --epochs 1 \\
        --steps-per-epoch 6 --train-examples 2048 --batch-size 128 --trace-steps 3:5 --output runs/rt
    python3 bench/op_table.py runs/rt/trace.json --steps 3

Forward ops have no spans of their own (an op is recorded after it ran);
ONEDNN_VERBOSE=1 times oneDNN's primitives in both directions.
"""
import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="trace.json of a run with --trace-steps")
    p.add_argument("--steps", type=int, required=True, help="steps in the trace window")
    p.add_argument("--thread", default="", help="only this track (e.g. 'replica 0')")
    args = p.parse_args()
    trace = json.load(open(args.trace))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") != "X" or (args.thread and names.get(e.get("tid")) != args.thread):
            continue
        key = (e.get("cat", ""), e["name"])
        total[key] += e["dur"]
        count[key] += 1
    print("| category | name | ms per step | calls per step |\n|---|---|---|---|")
    for (category, name), us in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"| {category} | {name} | {us / args.steps / 1000:.1f} | {count[(category, name)] / args.steps:g} |")


if __name__ == "__main__":
    main()
