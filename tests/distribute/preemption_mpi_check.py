#!/usr/bin/env python3
"""Preemption of a job across MPI processes, end to end through `tandem
train` under mpirun (CTest distribute.preemption.mpi): a signal to mpirun
stops every rank at the same step, the chief writes a checkpoint inside the
first epoch, and the job resumed under mpirun finishes the run. SIGTERM
(what a scheduler sends; mpirun passes it to every rank and kills them 1 s
later) for multi-worker on 2 processes; SIGUSR1 (which mpirun forwards
without killing) for the parameter-server strategy on 1 server + 2
workers.

    python3 preemption_mpi_check.py --tandem build/tandem --mpirun mpirun --work /tmp/x
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time

STEPS_PER_EPOCH = 60000 // 64
COMMON = ["--model", "mlp", "--test-examples", "256", "--batch-size", "64", "--epochs", "2",
          "--seed", "3", "--threads", "1", "--allow-oversubscription", "--no-tensorboard"]


def steps_logged(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return sum(1 for line in f if '"type":"step"' in line)
    except OSError:
        return 0


def checkpoint_step(run_dir):
    """global_step from checkpoint.tckpt's metadata: the magic TNDMCKPT, a
    u32 version, a u64 header length, then the JSON header."""
    with open(os.path.join(run_dir, "checkpoint.tckpt"), "rb") as f:
        data = f.read(1 << 20)
    if data[:8] != b"TNDMCKPT":
        raise ValueError("not a tandem checkpoint")
    (n,) = struct.unpack("<Q", data[12:20])
    header = json.loads(data[20:20 + n])
    return int(header["metadata"]["global_step"])


class Check:
    def __init__(self, args):
        self.args = args
        self.failures = []

    def expect(self, label, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + detail), flush=True)
        if not ok:
            self.failures.append(label)

    def command(self, np, extra):
        # Not --mca odls_base_sigkill_timeout: with it set (30) Open MPI 4.1's
        # mpirun sent no SIGTERM to the ranks at all (seen on Debian 12).
        return (shlex.split(self.args.mpirun) +
                ["--allow-run-as-root", "--oversubscribe", "-np", str(np), self.args.tandem,
                 "train"] + COMMON + extra)

    def preempted_and_resumed(self, label, np, strategy, sig, message):
        run_dir = os.path.join(self.args.work, label)
        shutil.rmtree(run_dir, ignore_errors=True)
        extra = strategy + ["--output", run_dir]
        # The output goes to a file: a pipe nobody reads while the job runs
        # would stall mpirun's event loop, and with it the signal.
        log = os.path.join(self.args.work, label + ".log")
        with open(log, "w") as out:
            job = subprocess.Popen(self.command(np, extra + ["--quiet"]), stdout=out,
                                   stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while steps_logged(run_dir) < 30 and time.time() < deadline and job.poll() is None:
            time.sleep(0.05)
        if job.poll() is not None:
            self.expect(f"{label}: running when signalled", False, open(log).read()[-2000:])
            return
        job.send_signal(sig)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            self.expect(f"{label}: the job ends within 60 s of the signal", False,
                        open(log).read()[-2000:])
            return
        with open(log) as f:
            output = f.read()
        self.expect(f"{label}: every rank says why it stops", output.count(message) >= np,
                    output[-2000:])
        self.expect(f"{label}: the chief says where the checkpoint is",
                    "checkpoint saved to" in output, output[-2000:])
        try:
            step = checkpoint_step(run_dir)
        except (OSError, KeyError, ValueError) as e:
            self.expect(f"{label}: a checkpoint was written", False, str(e))
            return
        self.expect(f"{label}: the checkpoint is inside the first epoch",
                    0 < step < STEPS_PER_EPOCH, f"global step {step}")
        resumed = subprocess.run(self.command(np, extra + ["--resume", "--quiet"]),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
        self.expect(f"{label}: the resumed job succeeds", resumed.returncode == 0,
                    resumed.stdout[-2000:])
        if resumed.returncode == 0:
            with open(os.path.join(run_dir, "summary.json")) as f:
                summary = json.load(f)
            self.expect(f"{label}: the resumed job trains both epochs",
                        summary["epochs"] == 2 and not summary["interrupted"], str(summary["epochs"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    check = Check(args)
    check.preempted_and_resumed("multi_worker", 2, ["--strategy", "multi-worker"], signal.SIGTERM,
                                "terminated (SIGTERM), saving a checkpoint")
    check.preempted_and_resumed("parameter_server", 3,
                                ["--strategy", "parameter-server", "--max-staleness", "0"],
                                signal.SIGUSR1, "SIGUSR1, saving a checkpoint")
    if check.failures:
        print(f"{len(check.failures)} check(s) failed: " + ", ".join(check.failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
