#!/usr/bin/env python3
"""tandem against PyTorch (Debian's 1.13 and a venv's 2.x) and TensorFlow 2
(a venv's, --tensorflow) on gpt and resnet, interleaved: every repeat runs
each variant once in each framework, in turn, so that machine noise hits
them alike. Prints a markdown table of medians with min-max and the ratio of
tandem to each peer. Pin the whole run (taskset) so that every framework
gets the same cores.

    python3 compare.py --tandem ../../build/tandem --models gpt,resnet \
        --precisions float32,bf16 --threads 1,2 --repeats 3 [--steps 6] \
        [--torch2 /work/venv-peers/bin/python] [--no-torch113] \
        [--tensorflow /work/venv-peers/bin/python]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PYTORCHES = {"torch 1.13": "/usr/bin/python3", "torch 2": "/work/venv-peers/bin/python"}
BATCH = {"gpt": 32, "resnet": 128}
POLICY = {"float32": "float32", "bf16": "mixed_bfloat16"}


def run_tandem(tandem, model, precision, threads, steps, warmup):
    out = subprocess.run(
        [tandem, "bench", "train", "--models", model, "--precisions", POLICY[precision],
         "--threads", str(threads), "--batch-size", str(BATCH[model]), "--steps", str(steps),
         "--warmup", str(warmup), "--repeats", "1", "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"][0]["examples_per_second_median"]


HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = {"pytorch": os.path.join(HERE, "bench_models.py"),
           "tensorflow": os.path.join(HERE, "..", "tensorflow", "bench_models.py")}


def run_peer(python, script, model, precision, threads, steps, warmup):
    out = subprocess.run(
        [python, script, "--model", model, "--precision", precision, "--threads",
         str(threads), "--batch-size", str(BATCH[model]), "--steps", str(steps), "--warmup",
         str(warmup), "--json"],
        check=True, capture_output=True, text=True).stdout
    # The timed steps' examples over their total time, as tandem bench train
    # measures (not the median of per-step rates, which runs higher).
    return json.loads(out.strip().splitlines()[-1])["examples_per_s"]["over_steps"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", required=True)
    p.add_argument("--models", default="gpt,resnet")
    p.add_argument("--precisions", default="float32,bf16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--torch2", default=PYTORCHES["torch 2"], help="a python with PyTorch 2")
    p.add_argument("--no-torch113", action="store_true",
                   help="leave out Debian's PyTorch 1.13 (python3-torch not installed)")
    p.add_argument("--tensorflow", metavar="PYTHON",
                   help="a python with TensorFlow 2: add it (bench/tensorflow/bench_models.py)")
    a = p.parse_args()
    PYTORCHES["torch 2"] = a.torch2
    if a.no_torch113:
        del PYTORCHES["torch 1.13"]
    peers = {name: (python, SCRIPTS["pytorch"]) for name, python in PYTORCHES.items()}
    if a.tensorflow:
        peers["tensorflow 2"] = (a.tensorflow, SCRIPTS["tensorflow"])
    variants = [(m, pr, int(t)) for m in a.models.split(",") for pr in a.precisions.split(",")
                for t in a.threads.split(",")]
    samples = {}
    for r in range(a.repeats):
        for v in variants:
            runs = {"tandem": lambda: run_tandem(a.tandem, *v, a.steps, a.warmup)}
            for name, (python, script) in peers.items():
                runs[name] = lambda python=python, script=script: run_peer(
                    python, script, *v, a.steps, a.warmup)
            for name, fn in runs.items():
                value = fn()
                samples.setdefault((v, name), []).append(value)
                print(f"repeat {r + 1}: {v} {name}: {value:.1f} ex/s", file=sys.stderr)
    names = ["tandem"] + list(peers)
    print("| model | precision | threads | " + " | ".join(f"{n} ex/s" for n in names) + " | " +
          " | ".join(f"tandem / {n}" for n in peers) + " |")
    print("|---|---|---|" + "---|" * (len(names) + len(peers)))
    for v in variants:
        cells, medians = [], {}
        for n in names:
            s = samples[(v, n)]
            medians[n] = statistics.median(s)
            cells.append(f"{medians[n]:.1f} ({min(s):.1f}-{max(s):.1f})")
        ratios = [f"{medians['tandem'] / medians[n]:.2f}x" for n in peers]
        print(f"| {v[0]} | {v[1]} | {v[2]} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
