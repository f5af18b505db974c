#!/usr/bin/env python3
"""Interleaved comparison of data-parallel training on this machine: tandem's
`bench scaling` (capacity, one device, mirrored 2 x 1 thread) and PyTorch 1.13
DDP with gloo (2 processes x 1 thread), same model, recipe and global batch.
Usage (repository root, after building): /usr/bin/python3 bench/compare_ddp.py [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="cnn")
    a = p.parse_args()
    samples = {}
    for r in range(a.rounds):
        # Two devices, as DDP's two processes (the default is one per core).
        out = subprocess.run([a.tandem, "bench", "scaling", "--model", a.model, "--repeats", "1",
                              "--max-devices", "2", "--json"],
                             check=True, capture_output=True, text=True).stdout
        for row in json.loads(out)["results"]:
            samples.setdefault(row["variant"], []).append(row)
        ddp = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "pytorch_ddp.py"), "--model", a.model,
                              "--port", str(29500 + r)], check=True, capture_output=True, text=True).stdout
        samples.setdefault("pytorch DDP gloo 2 processes x 1 thread", []).append(
            {"examples_per_second_median": json.loads(ddp.strip().splitlines()[-1])["examples_per_second"]})
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    med = {k: statistics.median(x["examples_per_second_median"] for x in v) for k, v in samples.items()}
    capacity = next(v for k, v in med.items() if k.startswith("capacity"))
    ddp = med["pytorch DDP gloo 2 processes x 1 thread"]
    print(f"{'variant':42} {'ex/s':>8} {'min':>8} {'max':>8} {'of capacity':>12} {'vs DDP':>7}  exposed comm")
    for k, v in samples.items():
        vals = [x["examples_per_second_median"] for x in v]
        exposed = statistics.median(x.get("exposed_communication_fraction", 0) for x in v)
        print(f"{k:42} {med[k]:8.0f} {min(vals):8.0f} {max(vals):8.0f} {100 * med[k] / capacity:11.1f}% "
              f"{med[k] / ddp:6.2f}x  {100 * exposed:.2f}%")


if __name__ == "__main__":
    main()
