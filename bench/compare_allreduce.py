#!/usr/bin/env python3
"""Interleaved all-reduce comparison on one machine: tandem's in-process
all-reduce between 2 threads vs OpenMPI's own MPI_Allreduce between 2
processes (`tandem bench allreduce --backend mpi` under mpirun, which calls
MPI_Allreduce in place with no extra checks). Each round runs both once over
every size; the table gives median bus bandwidth over the rounds, their ratio,
and the in-process fraction of the memory-traffic bound.

Usage (repository root, after building): python3 bench/compare_allreduce.py [--rounds 5]
"""
import argparse
import json
import statistics
import subprocess


def run(cmd):
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-bytes", default="4")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--factor", default="4")
    a = p.parse_args()
    sizes = ["--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--factor", a.factor, "--repeats", "3", "--json"]
    bound = run([a.tandem, "bench", "memory", "--repeats", "3", "--json"])["results"][-1]["gbps_median"]
    inproc, mpi = {}, {}
    for _ in range(a.rounds):
        for row in run([a.tandem, "bench", "allreduce", "--backend", "inprocess", "--ranks", "2",
                        "--bound-gbps", str(bound)] + sizes)["results"]:
            inproc.setdefault(row["bytes"], []).append(row)
        for row in run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", a.tandem, "bench",
                        "allreduce", "--backend", "mpi"] + sizes)["results"]:
            mpi.setdefault(row["bytes"], []).append(row)
    print(f"read2_write2 memory bandwidth: {bound:.1f} GB/s; {a.rounds} interleaved rounds, medians")
    print(f"{'bytes':>10} {'inproc us':>10} {'busbw':>8} {'bound%':>7} {'MPI us':>10} {'busbw':>8} {'ratio':>7}")
    for size in sorted(inproc):
        t_in = statistics.median(r["time_us"] for r in inproc[size])
        b_in = statistics.median(r["busbw_gbps"] for r in inproc[size])
        frac = statistics.median(r["bound_fraction"] for r in inproc[size])
        t_mpi = statistics.median(r["time_us"] for r in mpi[size])
        b_mpi = statistics.median(r["busbw_gbps"] for r in mpi[size])
        ok = all(r["correct"] for r in inproc[size] + mpi[size])
        print(f"{size:>10} {t_in:>10.2f} {b_in:>8.3f} {100 * frac:>6.1f}% {t_mpi:>10.2f} {b_mpi:>8.3f} "
              f"{b_in / b_mpi:>6.2f}x{'' if ok else '  WRONG'}")


if __name__ == "__main__":
    main()
