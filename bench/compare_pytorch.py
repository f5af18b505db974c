#!/usr/bin/env python3
"""Interleaved training-throughput comparison: tandem vs PyTorch 1.13 (Debian's
python3-torch, same oneDNN 2.6) on the reference models and recipe.

Each round runs one sample of every variant for every framework, so machine
noise hits all of them alike; the table reports medians with min and max.
PyTorch's f32 Linear layers go through the system BLAS, which on a plain
Debian install is the reference BLAS. The script measures PyTorch with each
BLAS that is installed (reference: libblas3; OpenBLAS: libopenblas0-openmp),
chosen through LD_LIBRARY_PATH, and compares tandem with the best of them.

Usage (from the repository root, after building):
  /usr/bin/python3 bench/compare_pytorch.py [--rounds 5] [--threads 1,2] [--models cnn,mlp]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BLAS_DIRS = {"pytorch-refblas": "/usr/lib/x86_64-linux-gnu/blas",
             "pytorch-openblas": "/usr/lib/x86_64-linux-gnu/openblas-openmp"}


def run_tandem(binary, model, dtype, threads, steps):
    policy = {"f32": "float32", "bf16": "mixed_bfloat16"}[dtype]
    out = subprocess.run([binary, "bench", "train", "--models", model, "--precisions", policy,
                          "--threads", str(threads), "--steps", str(steps), "--repeats", "1",
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"][0]["examples_per_second_median"]


def run_torch(model, dtype, threads, steps, blas_dir=None):
    env = dict(os.environ)
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir
    out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "pytorch_baseline.py"),
                          "--models", model, "--dtypes", dtype, "--threads", str(threads),
                          "--steps", str(steps)], check=True, capture_output=True, text=True,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["examples_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--models", default="cnn,mlp")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    frameworks = ["tandem"] + [f for f, d in BLAS_DIRS.items()
                               if os.path.exists(os.path.join(d, "libblas.so.3"))]
    if len(frameworks) == 1:
        frameworks.append("pytorch")
    variants = [(m, d, int(t)) for m in a.models.split(",") for d in a.dtypes.split(",")
                for t in a.threads.split(",")]
    samples = {(f, v): [] for f in frameworks for v in variants}
    for r in range(a.rounds):
        for v in variants:
            for f in frameworks:
                if f == "tandem":
                    eps = run_tandem(a.tandem, *v, a.steps)
                else:
                    eps = run_torch(*v, a.steps, BLAS_DIRS.get(f))
                samples[(f, v)].append(eps)
                print(f"round {r + 1}: {f:17} {v[0]} {v[1]:4} {v[2]} thr: {eps:9.0f} ex/s",
                      file=sys.stderr, flush=True)
    print(f"{'model':5} {'dtype':5} {'thr':>3} " +
          " ".join(f"{f + ' median [min-max]':>34}" for f in frameworks) + "  tandem/best-pytorch")
    for v in variants:
        cells = []
        for f in frameworks:
            s = samples[(f, v)]
            cells.append(f"{statistics.median(s):10.0f} [{min(s):9.0f}-{max(s):9.0f}]")
        best_torch = max(statistics.median(samples[(f, v)]) for f in frameworks[1:])
        ratio = statistics.median(samples[("tandem", v)]) / best_torch
        print(f"{v[0]:5} {v[1]:5} {v[2]:>3} " + " ".join(f"{c:>34}" for c in cells) + f"  {ratio:5.2f}x")


if __name__ == "__main__":
    main()
