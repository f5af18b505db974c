#!/usr/bin/env python3
"""What the monitor costs: `tandem train` on cnn with 2 mirrored devices, with
the monitor (metrics.jsonl every step, memory snapshots, busy fractions,
findings; trace off) and with --no-monitor, interleaved in pairs (the order
alternates), on the same slice of Fashion-MNIST. Prints each variant's median
examples/second (training time only, from summary.json) with min-max, and the
median of the per-pair ratios.
Usage (repository root, after building): python3 bench/monitor_overhead.py [--rounds 10]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile


def run(tandem, out, monitor, a):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [tandem, "train", "--model", a.model, "--strategy", "mirrored", "--devices", "2",
           "--epochs", "1", "--train-examples", str(a.examples), "--test-examples", "500",
           "--quiet", "--output", out]
    if not monitor:
        cmd.append("--no-monitor")
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["examples_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--model", default="cnn")
    p.add_argument("--examples", type=int, default=19200, help="training examples per run (150 steps)")
    a = p.parse_args()
    on, off, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            pair = {m: run(a.tandem, os.path.join(tmp, "on" if m else "off"), m, a) for m in order}
            on.append(pair[True])
            off.append(pair[False])
            ratios.append(pair[True] / pair[False])
            print(f"round {r + 1}/{a.rounds}: monitor {pair[True]:.0f} ex/s, --no-monitor "
                  f"{pair[False]:.0f} ex/s", flush=True)
    for name, v in (("monitor on (trace off)", on), ("--no-monitor", off)):
        print(f"{name:24} median {statistics.median(v):7.0f} ex/s  min {min(v):7.0f}  max {max(v):7.0f}")
    print(f"per-pair ratio on/off: median {statistics.median(ratios):.4f}  min {min(ratios):.4f}  "
          f"max {max(ratios):.4f}  -> overhead {100 * (1 - statistics.median(ratios)):.2f}%")


if __name__ == "__main__":
    main()
