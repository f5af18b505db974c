#!/usr/bin/env python3
"""Examples/s of tandem train variants that differ by flags, interleaved.

Each round runs every variant once (the order reverses every round) and
reads the monitor's steady-state examples/s (which leaves out the first
steps); prints the median and range per variant and its ratio to the first.

    python3 bench/compare_flags.py --rounds 5 \\
        --common "--model cnn --strategy mirrored --devices 2 --threads 1 --epochs 1 \\
                  --train-examples 8192 --test-examples 100" \\
        --variant "off=--noise-scale-every 0" --variant "every 10=--noise-scale-every 10" \\
        --variant "every step=--noise-scale-every 1"
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tandem", default="build/tandem")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--common", required=True, help="flags every variant gets")
    parser.add_argument("--variant", action="append", required=True, help="NAME=FLAGS")
    args = parser.parse_args()
    variants = [v.split("=", 1) for v in args.variant]
    speed = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            for name, flags in order:
                out = os.path.join(work, f"run{r}")
                cmd = [args.tandem, "train", *shlex.split(args.common), *shlex.split(flags),
                       "--quiet", "--no-tensorboard", "--output", out]
                subprocess.run(cmd, check=True)
                with open(os.path.join(out, "summary.json")) as f:
                    speed[name].append(json.load(f)["monitor"]["examples_per_second"])
                subprocess.run(["rm", "-rf", out], check=True)
                print(f"round {r + 1} {name}: {speed[name][-1]:.1f} ex/s", file=sys.stderr, flush=True)
    base = statistics.median(speed[variants[0][0]])
    print(f"| variant | examples/s median [min-max] | vs {variants[0][0]} |")
    print("|---|---|---|")
    for name, _ in variants:
        m = statistics.median(speed[name])
        print(f"| {name} | {m:.1f} [{min(speed[name]):.1f}-{max(speed[name]):.1f}] | {m / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
