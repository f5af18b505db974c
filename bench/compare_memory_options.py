#!/usr/bin/env python3
"""Speed and memory of the memory options on one workload, interleaved.

Trains the same model for a few steps with each variant in turn (plain
mirrored, ZeRO-1, ZeRO-2, activation recomputation, gradient accumulation),
round after round, and prints per variant the median examples/s with its
range (the monitor's steady-state figure, which leaves out the first
steps), and each device's measured peak and activation peak.

    python3 bench/compare_memory_options.py --tandem build/tandem --kjv data/kjv

Defaults: gpt (default size) on the KJV corpus, global batch 32, 2 mirrored
devices x 1 thread, 8 steps per run, 3 rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

VARIANTS = {
    "mirrored": [],
    "ZeRO-1": ["--zero", "1"],
    "ZeRO-2": ["--zero", "2"],
    "recompute": ["--recompute"],
    "accumulate 2": ["--accumulate", "2"],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tandem", default="build/tandem")
    parser.add_argument("--kjv", default="data/kjv")
    parser.add_argument("--model", default="gpt")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = args.variants.split(",")
    speed = {n: [] for n in names}
    memory = {}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            order = names if r % 2 == 0 else list(reversed(names))
            for name in order:
                out = os.path.join(work, f"{r}-{name.replace(' ', '_')}")
                cmd = [args.tandem, "train", "--model", args.model, "--batch-size", str(args.batch),
                       "--epochs", "1", "--steps-per-epoch", str(args.steps),
                       "--precision", args.precision, "--strategy", "mirrored", "--devices", "2",
                       "--threads", "1", "--quiet", "--no-tensorboard", "--output", out]
                if args.model == "gpt":
                    cmd += ["--data", os.path.join(args.kjv, "train.toml"), "--optimizer", "adamw",
                            "--metrics", "bits_per_byte"]
                else:
                    cmd += ["--train-examples", str(args.batch * args.steps), "--test-examples", "100"]
                subprocess.run(cmd + VARIANTS[name], check=True)
                with open(os.path.join(out, "summary.json")) as f:
                    s = json.load(f)
                speed[name].append(s["monitor"]["examples_per_second"])
                devices = s["memory_plan"]["devices"]
                memory[name] = (max(d["measured_peak_bytes"] for d in devices),
                                max(d["measured_bytes"]["activations"] for d in devices),
                                max(d["measured_bytes"]["gradients"] for d in devices),
                                max(d["measured_bytes"]["optimizer_state"] for d in devices))
                print(f"round {r + 1} {name}: {speed[name][-1]:.1f} ex/s", file=sys.stderr, flush=True)
    base = statistics.median(speed[names[0]])
    print(f"| variant | examples/s median [min-max] | vs {names[0]} | peak per device | activations "
          "| gradients | optimizer state |")
    print("|---|---|---|---|---|---|---|")
    mib = lambda b: f"{b / 2**20:.1f} MiB"
    for n in names:
        m = statistics.median(speed[n])
        peak, act, grad, opt = memory[n]
        print(f"| {n} | {m:.1f} [{min(speed[n]):.1f}-{max(speed[n]):.1f}] | {m / base:.2f}x | "
              f"{mib(peak)} | {mib(act)} | {mib(grad)} | {mib(opt)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
