#!/usr/bin/env python3
"""`tandem tune search` over the ranks of an MPI job, end to end (CTest
tune.search.mpi, and multi_host.tune_search across the test hosts):

- a 3-trial ASHA grid under `mpirun -np 2 ... --parallel 1` trains the
  same rungs as in one process (3 trials to epoch 1, the best to epoch 3:
  5 epochs), with trials on both ranks (each trial's log.txt says where);
- resuming the finished search trains nothing;
- a bad flag stops the search on every rank with the trial's error.

    python3 search_mpi_check.py --tandem build/tandem --mpirun mpirun --work /tmp/x
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

SPACE = """[search]
sampler = "grid"
min_epochs = 1
max_epochs = 3
[space]
lr = { choice = [0.02, 0.1, 0.3] }
"""
DATA = ["--model", "mlp", "--train-examples", "1024", "--test-examples", "256"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", required=True)
    p.add_argument("--mpirun", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    space = os.path.join(args.work, "space.toml")
    with open(space, "w") as f:
        f.write(SPACE)
    out = os.path.join(args.work, "out")
    launcher = shlex.split(args.mpirun) + ["--allow-run-as-root", "--oversubscribe", "-np", "2",
                                           args.tandem, "tune", "search", "--space", space,
                                           "--parallel", "1"]
    failures = []

    def run(extra):
        p = subprocess.Popen(launcher + extra + DATA, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            text, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            text, _ = p.communicate()
            return None, text
        return p.returncode, text

    def expect(label, ok, detail=""):
        print(f"{'ok    ' if ok else 'FAILED'} {label}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(label)

    code, text = run(["--output", out])
    epochs = finished = 0
    if code == 0:
        with open(os.path.join(out, "search.json")) as f:
            for trial in json.load(f)["trials"]:
                epochs += len(trial["curve"])
                finished += len(trial["results"]) == 2
    ranks = set()
    for log in glob.glob(os.path.join(out, "trial-*", "log.txt")):
        with open(log) as f:
            ranks.update(line.split()[2] for line in f if line.startswith("# rank "))
    expect("3-trial ASHA grid over 2 ranks: 5 epochs, 1 trial to the top rung, trials on both",
           code == 0 and epochs == 5 and finished == 1 and ranks == {"0", "1"},
           f"exit {code}, {epochs} epochs, {finished} finished, ranks {sorted(ranks)}" +
           ("" if code == 0 else "\n" + text[-2000:]))
    code, text = run(["--output", out, "--resume"])
    expect("resuming the finished search trains nothing", code == 0 and "(rung" not in text,
           "" if code == 0 else text[-2000:])
    code, text = run(["--output", os.path.join(args.work, "bad"), "--optimizer", "nonesuch"])
    expect("a bad train flag stops the search with the trial's error",
           code not in (0, None) and "nonesuch" in text, text[-1500:] if code == 0 else "")
    if failures:
        print(f"{len(failures)} failed: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
