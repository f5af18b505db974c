#!/usr/bin/env python3
"""Where a training step's device time goes, from an Nsight Compute run.

Reads the CSV that `ncu --csv --page raw --metrics gpu__time_duration.sum`
printed for a `tandem bench train` run of warm-up and timed steps, keeps the
kernels of one step (those after the first step's optimizer kernels, up to
and including the second step's), and prints per kernel name: launches,
device time, share of the step. The step boundary is the optimizer's own
kernel (--boundary, a substring of its name), which runs once per parameter
at the end of each step.
    python3 scripts/gpu-kernel-table.py NCU.csv [--boundary sgd_kernel] [--json]
"""
import argparse
import collections
import csv
import json
import sys


def read_kernels(path):
    """(name, nanoseconds) per launch, in launch order."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...) found")
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    try:
        name_at = header.index("Kernel Name")
        time_at = header.index("gpu__time_duration.sum")
    except ValueError:
        sys.exit(f"{path}: the CSV has no 'Kernel Name' or 'gpu__time_duration.sum' column")
    unit = rows[1][time_at] if len(rows) > 1 else "nsecond"
    factor = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit)
    kernels = []
    for row in rows[1 if factor is None else 2:]:
        if len(row) <= max(name_at, time_at):
            continue
        try:
            kernels.append((row[name_at], float(row[time_at].replace(",", "")) * (factor or 1.0)))
        except ValueError:
            continue
    return kernels


def one_step(kernels, boundary):
    """The launches of the second step: after the first run of boundary
    kernels, through the end of the second run."""
    runs, inside = [], False
    for i, (name, _) in enumerate(kernels):
        hit = boundary in name
        if hit and not inside:
            runs.append([i, i])
        if hit:
            runs[-1][1] = i
        inside = hit
    if len(runs) < 2:
        sys.exit(f"fewer than two runs of '{boundary}' kernels: cannot find one whole step "
                 f"({len(kernels)} launches)")
    return kernels[runs[0][1] + 1:runs[1][1] + 1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--boundary", default="sgd_kernel")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rows", type=int, default=40)
    a = p.parse_args()
    step = one_step(read_kernels(a.csv), a.boundary)
    total = sum(t for _, t in step)
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for name, t in step:
        by_name[name][0] += 1
        by_name[name][1] += t
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    if a.json:
        print(json.dumps({"launches": len(step), "device_ms": total / 1e6,
                          "kernels": [{"name": n, "launches": c, "ms": t / 1e6}
                                      for n, (c, t) in ranked]}))
        return
    print(f"one step: {len(step)} launches, {total / 1e6:.2f} ms of device time")
    print(f"{'ms':>9} {'share':>6} {'launches':>8}  kernel")
    for name, (count, t) in ranked[:a.rows]:
        print(f"{t / 1e6:9.3f} {100 * t / total:5.1f}% {count:8d}  {name[:110]}")


if __name__ == "__main__":
    main()
