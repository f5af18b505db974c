#!/usr/bin/env python3
"""What elastic training costs (tandem launch --elastic):

1. The in-memory state copy: the same job (2 workers, multi-worker) with
   a copy every step (--elastic-copy-every 1) and only at the epoch's
   start (--elastic-copy-every 1000000), interleaved in pairs (the order
   alternates); each run's fit wall time from summary.json. One copy's
   time is the pair's difference over the steps; its cost at K = 50 is
   that over 50 steps' time.
2. A membership change: 3 workers, worker 2 killed right after step 60
   (TANDEM_TEST_KILL_AT_STEP; copies every 50 steps, so 10 steps are taken
   again); from the run's metrics.jsonl: the seconds from the last step
   before the loss to going on (detection, agreement, rebuilding, the state
   shared), the steps rolled back, and the time lost with them (the seconds
   plus the rolled-back steps at the run's median step time).

Usage (repository root, after building):
    python3 bench/elastic_cost.py [--models mlp cnn] [--rounds 5] [--changes 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile


def train_command(a, model, out, extra):
    return [a.tandem, "train", "--model", model, "--strategy", "multi-worker", "--epochs", "1",
            "--train-examples", str(a.examples), "--test-examples", "256", "--batch-size", "96",
            "--threads", "1", "--allow-oversubscription", "--quiet", "--output", out, *extra]


def launch(a, workers, command, env=None):
    subprocess.run([a.tandem, "launch", "--elastic", "--nproc-per-node", str(workers), "--",
                    *command], check=True, env=dict(os.environ, **(env or {})),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def copy_cost(a, model, tmp):
    # A copy every step against one per epoch: the difference over the
    # steps is one copy's time, which K = 50 spreads over 50 steps (a
    # difference of 2% in one fit would be lost in the runs' noise).
    steps = a.examples // 96
    seconds = {1: [], 1000000: []}
    for r in range(a.rounds):
        order = [1, 1000000] if r % 2 == 0 else [1000000, 1]
        for every in order:
            out = os.path.join(tmp, f"copy-{every}")
            shutil.rmtree(out, ignore_errors=True)
            launch(a, 2, train_command(a, model, out, ["--no-monitor", "--elastic-copy-every",
                                                       str(every)]))
            with open(os.path.join(out, "summary.json")) as f:
                seconds[every].append(json.load(f)["wall_seconds"])
    for every, values in seconds.items():
        print(f"  {model}: --elastic-copy-every {every}: fit {statistics.median(values):.3f} s "
              f"(min {min(values):.3f}, max {max(values):.3f})")
    per_copy = [(one - rare) / steps for one, rare in zip(seconds[1], seconds[1000000])]
    step = statistics.median(seconds[1000000]) / steps
    copy = statistics.median(per_copy)
    print(f"  {model}: one copy {1000 * copy:.2f} ms (pairs {1000 * min(per_copy):.2f}-"
          f"{1000 * max(per_copy):.2f}), a step {1000 * step:.1f} ms: at "
          f"--elastic-copy-every 50 the copies cost {100 * copy / (50 * step):.2f}% of the steps")


def change_cost(a, model, tmp):
    for r in range(a.changes):
        out = os.path.join(tmp, f"change-{r}")
        shutil.rmtree(out, ignore_errors=True)
        launch(a, 3, train_command(a, model, out, ["--elastic-copy-every", "50"]),
               env={"TANDEM_TEST_KILL_AT_STEP": "2:60"})
        with open(os.path.join(out, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        change = next(line for line in lines if line.get("type") == "membership")
        steps = [line["step_seconds"] for line in lines if line.get("type") == "step"]
        step = statistics.median(steps)
        lost = change["seconds"] + change["rolled_back_steps"] * step
        print(f"  {model}: change {r + 1}: {change['seconds']:.3f} s to go on, "
              f"{change['rolled_back_steps']} steps taken again at {1000 * step:.1f} ms: "
              f"{lost:.3f} s lost")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--changes", type=int, default=3)
    p.add_argument("--examples", type=int, default=9600, help="training examples (100 steps)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models:
            print(f"{model}: the state copy (2 workers)")
            copy_cost(a, model, tmp)
            print(f"{model}: a lost worker (3 workers)")
            change_cost(a, model, tmp)


if __name__ == "__main__":
    main()
