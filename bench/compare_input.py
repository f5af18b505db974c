#!/usr/bin/env python3
"""Interleaved comparison of the trainer's input settings on `tandem train`
(cnn, 2 mirrored devices by default): batches built on the main thread or by
the data pipeline (--prefetch, --input-parallel), with and without
--augment. Each round runs every variant once; reports the median
examples/second of training (summary.json) with min and max, and the median
input share of the step (the monitor's input_fraction).
Usage (repository root, after building):
  /usr/bin/python3 bench/compare_input.py [--rounds 5] [--examples 16384]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

VARIANTS = [
    ("main thread", []),
    ("prefetch 2", ["--prefetch", "2"]),
    ("main thread, augment flip,crop:2", ["--augment", "flip,crop:2"]),
    ("prefetch 2, augment", ["--augment", "flip,crop:2", "--prefetch", "2"]),
    ("prefetch auto, parallel auto, augment",
     ["--augment", "flip,crop:2", "--prefetch", "auto", "--input-parallel", "auto"]),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="cnn")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--examples", type=int, default=16384)
    a = p.parse_args()
    speed = {name: [] for name, _ in VARIANTS}
    input_share = {name: [] for name, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for i, (name, flags) in enumerate(VARIANTS):
                out = os.path.join(tmp, f"r{r}v{i}")
                strategy = ["--strategy", "mirrored", "--devices", str(a.devices)] if a.devices > 1 else []
                subprocess.run([a.tandem, "train", "--model", a.model, "--epochs", "1", "--train-examples",
                                str(a.examples), "--test-examples", "1000", "--quiet", "--output", out]
                               + strategy + flags, check=True)
                with open(os.path.join(out, "summary.json")) as f:
                    s = json.load(f)
                speed[name].append(s["history"][0]["examples_per_second"])
                input_share[name].append(s["monitor"]["input_fraction"])
            print(f"round {r + 1}/{a.rounds} done", flush=True)
    base = statistics.median(speed[VARIANTS[0][0]])
    print(f"{'variant':40} {'ex/s':>8} {'min':>8} {'max':>8} {'vs first':>9} {'input share':>12}")
    for name, _ in VARIANTS:
        v = speed[name]
        m = statistics.median(v)
        print(f"{name:40} {m:8.0f} {min(v):8.0f} {max(v):8.0f} {m / base:9.3f} "
              f"{100 * statistics.median(input_share[name]):11.1f}%")


if __name__ == "__main__":
    main()
