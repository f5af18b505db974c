#!/usr/bin/env python3
"""The parameter-server strategy across MPI processes, end to end through
`tandem train` under mpirun (CTest distribute.parameter_server.mpi):

- synchronous rounds (--max-staleness 0) on 1 server + 2 worker processes
  give the parameters of mirrored training on 2 devices (max relative error
  <= 1e-5, SGD and Adam, mixed_float16 with its loss scaling, a ResNet
  with batch norm), and the same training accuracy (the
  workers' metric sums come back with their gradients); the same with the
  variables sharded over 2 and 3 server ranks (--ps 2, --ps 3; Adam,
  gradient clipping by the global norm, batch norm);
- a checkpoint of shard ranks holds their optimizer state: stopped after an
  epoch and resumed in mirrored (and the other way) ends where mirrored
  training without the stop ends;
- asynchronous training completes on 1 server + 3 workers, and on 2 shard
  ranks + 3 workers;
- a worker killed (SIGKILL) mid-epoch under `mpirun --enable-recovery`: the
  run completes every epoch on the others and names the lost worker; a
  worker stopped (SIGSTOP, --peer-timeout 3) likewise, and the job ends
  (the server kills the stopped process, which mpirun would wait for);
- a checkpoint of a run across processes resumes across processes and into
  mirrored training;
- the server killed (SIGKILL) or stopped (SIGSTOP, with --peer-timeout 3):
  every worker ends with an error naming the server, the job within 30 s;
  the same for shard rank 1 of 2;
- --ps 3 with 3 processes (no worker left) and --devices 2 under mpirun
  are refused with one clear line.

    python3 ps_mpi_check.py --tandem build/tandem --mpirun mpirun --work /tmp/x
    python3 ps_mpi_check.py ... --mpirun 'sh scripts/netns-hosts.sh mpirun'  # across test hosts
"""
import argparse
import json
import os
import shlex
import shutil
import sys

from job_checks import JobChecks, max_relative_error

TOLERANCE = 1e-5
LIMIT = 30  # seconds for a job whose server is gone

COMMON = ["--model", "mlp", "--train-examples", "1536", "--test-examples", "256",
          "--batch-size", "96", "--seed", "3", "--threads", "1", "--allow-oversubscription",
          "--quiet"]


class Check(JobChecks):
    def __init__(self, args):
        super().__init__(args.tandem, args.work)
        self.args = args

    def mpirun(self, np, extra, env=None, recovery=False):
        command = shlex.split(self.args.mpirun) + ["--allow-run-as-root", "--oversubscribe", "-np",
                                                   str(np)]
        if recovery:
            command.append("--enable-recovery")
        for key, value in (env or {}).items():
            command += ["-x", f"{key}={value}"]
        return command + [self.args.tandem, "train", "--strategy", "parameter-server"] + extra

    def summary(self, path):
        with open(os.path.join(path, "summary.json")) as f:
            return json.load(f)

    def synchronous_equals_mirrored(self, optimizer, precision="float32", model=None, shards=1,
                                    extra=()):
        label = (f"{optimizer}-{precision}" + ("-" + model[1] if model else "") +
                 f"-ps{shards}" + "".join(extra))
        ps, mirrored = self.directory(f"ps-{label}"), self.directory(f"mirrored-{label}")
        settings = COMMON + ["--epochs", "1", "--optimizer", optimizer, "--precision", precision,
                             "--lr", "0.001" if optimizer == "adam" else "0.05"] + list(extra)
        if model:  # instead of COMMON's mlp
            settings = settings[2:] + model
        code, out, _ = self.run(self.mpirun(shards + 2, settings + [
            "--ps", str(shards), "--max-staleness", "0", "--output", ps]))
        if code != 0:
            return self.expect(f"S=0 {label} under mpirun", False, out[-2000:])
        code, out, _ = self.run([self.args.tandem, "train", "--strategy", "mirrored", "--devices",
                                 "2"] + settings + ["--output", mirrored])
        if code != 0:
            return self.expect(f"mirrored {label}", False, out[-2000:])
        error = max_relative_error(self.parameters(ps), self.parameters(mirrored))
        accuracies = (self.summary(ps)["train_accuracy"], self.summary(mirrored)["train_accuracy"])
        self.expect(f"S=0 {label}: {shards} server rank(s) + 2 worker processes = mirrored on "
                    "2 devices",
                    error <= TOLERANCE and abs(accuracies[0] - accuracies[1]) < 1e-9,
                    f"max relative error {error:.1e}, train accuracy {accuracies[0]:.4f} / "
                    f"{accuracies[1]:.4f}")

    def asynchronous(self, shards=1):
        out_dir = self.directory(f"async-ps{shards}")
        code, out, _ = self.run(self.mpirun(shards + 3, COMMON + [
            "--epochs", "2", "--ps", str(shards), "--output", out_dir]))
        ok = code == 0 and len(self.summary(out_dir)["history"]) == 2
        self.expect(f"asynchronous, {shards} server rank(s) + 3 worker processes, 2 epochs", ok,
                    "" if ok else out[-2000:])

    def shard_state_in_checkpoints(self):
        # Both runs stop after the first of 2 epochs and resume in the
        # other strategy; each must end where mirrored without a stop ends.
        settings = COMMON + ["--epochs", "2", "--optimizer", "adam", "--lr", "0.001"]
        sharded = self.mpirun(4, settings + ["--ps", "2", "--max-staleness", "0"])
        mirrored = [self.args.tandem, "train", "--strategy", "mirrored", "--devices", "2"] + settings
        straight, ps_first, mirrored_first = (self.directory(n) for n in (
            "straight", "ps-then-mirrored", "mirrored-then-ps"))
        runs = [mirrored + ["--output", straight],
                sharded + ["--stop-after-epochs", "1", "--output", ps_first],
                mirrored + ["--resume", "--output", ps_first],
                mirrored + ["--stop-after-epochs", "1", "--output", mirrored_first],
                sharded + ["--resume", "--output", mirrored_first]]
        for command in runs:
            code, out, _ = self.run(command)
            if code != 0:
                return self.expect("shard ranks' optimizer state in checkpoints", False,
                                   out[-2000:])
        reference = self.parameters(straight)
        errors = [max_relative_error(self.parameters(d), reference)
                  for d in (ps_first, mirrored_first)]
        self.expect("Adam's state through 2 shard ranks' checkpoints, both ways = mirrored "
                    "without a stop", max(errors) <= TOLERANCE,
                    f"max relative errors {errors[0]:.1e} / {errors[1]:.1e}")

    def worker_lost(self, how):
        out_dir = self.directory(f"worker-{how}")
        spec, extra = ("2:5", []) if how == "killed" else ("2:5:stop", ["--peer-timeout", "3"])
        code, out, seconds = self.run(
            self.mpirun(4, COMMON + ["--epochs", "2", "--output", out_dir] + extra,
                        env={"TANDEM_TEST_KILL_AFTER_WORK": spec}, recovery=True),
            timeout=LIMIT + 60)
        epochs = []
        if os.path.exists(os.path.join(out_dir, "summary.json")):
            epochs = self.summary(out_dir)["history"]
        reason = "closed the connection" if how == "killed" else "sent nothing for 3 s"
        named = ("worker 1 (rank 2" in out and reason in out and
                 "goes on with 2 worker(s)" in out)
        self.expect(f"a {how} worker: the others finish every epoch and the run names it",
                    code == 0 and len(epochs) == 2 and named,
                    f"exit {code}, {len(epochs)} epochs, {seconds:.1f} s" +
                    ("" if named else "\n" + out[-2000:]))

    def checkpoints(self):
        out_dir = self.directory("resumed")
        first = self.run(self.mpirun(3, COMMON + ["--epochs", "1", "--output", out_dir]))
        again = self.run(self.mpirun(3, COMMON + ["--epochs", "2", "--resume", "--output",
                                                  out_dir]))
        copy = self.directory("resumed-into-mirrored")
        shutil.copytree(out_dir, copy)
        mirrored = self.run([self.args.tandem, "train", "--strategy", "mirrored", "--devices",
                             "2"] + COMMON + ["--epochs", "3", "--resume", "--output", copy])
        ok = (first[0] == 0 and again[0] == 0 and mirrored[0] == 0 and
              len(self.summary(out_dir)["history"]) == 2 and
              len(self.summary(copy)["history"]) == 3)
        self.expect("a checkpoint across processes resumes across processes and into mirrored",
                    ok, "" if ok else (first[1] + again[1] + mirrored[1])[-2000:])

    def server_lost(self, how, extra, shards=1):
        # The chief (rank 0) with one shard; shard rank 1 (its pulls
        # counted) with two.
        out_dir = self.directory(f"server-{how}-ps{shards}")
        spec = ("0:10" if shards == 1 else "1:10") + (":stop" if how == "stopped" else "")
        code, out, seconds = self.run(
            self.mpirun(shards + 2, COMMON + ["--epochs", "2", "--ps", str(shards), "--output",
                                              out_dir] + extra,
                        env={"TANDEM_TEST_KILL_AFTER_WORK": spec}, recovery=True),
            timeout=LIMIT + 30)
        reason = "lost" if how == "killed" else "sent nothing for 3 s"
        server = "the parameter server (rank 0" if shards == 1 else "parameter-server shard 1 (rank 1"
        lines = out.splitlines()
        named = sum(any(f"error on rank {r}:" in line and server in line for line in lines)
                    for r in (shards, shards + 1))
        ok = code is not None and seconds < LIMIT and named == 2 and reason in out
        what = "the server" if shards == 1 else "shard rank 1 of 2"
        self.expect(f"{what} {how}: every worker ends naming it within {LIMIT} s", ok,
                    f"{seconds:.1f} s" + ("" if ok else "\n" + out[-2000:]))

    def refused(self, extra, message):
        code, out, _ = self.run(self.mpirun(3, COMMON + ["--epochs", "1", "--output",
                                                        self.directory("refused")] + extra))
        self.expect(f"refused: {' '.join(extra)}", code != 0 and message in out,
                    "" if message in out else out[-1500:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", required=True)
    p.add_argument("--mpirun", required=True,
                   help="the launcher, with its own arguments (e.g. 'sh netns-hosts.sh mpirun')")
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    check = Check(args)
    check.synchronous_equals_mirrored("sgd")
    check.synchronous_equals_mirrored("adam")
    check.synchronous_equals_mirrored("sgd", "mixed_float16")  # loss scaling on the server
    # Batch norm: each worker's running statistics travel with its shares.
    check.synchronous_equals_mirrored("sgd", model=["--model", "resnet", "--model-options",
                                                    "depth=8,width=8"])
    # The variables sharded over server ranks.
    check.synchronous_equals_mirrored("sgd", shards=2)
    check.synchronous_equals_mirrored("adam", shards=3)
    check.synchronous_equals_mirrored("sgd", shards=2, extra=["--clip-norm", "0.5"])
    check.synchronous_equals_mirrored("sgd", "mixed_float16", shards=2)
    check.synchronous_equals_mirrored("sgd", model=["--model", "resnet", "--model-options",
                                                    "depth=8,width=8"], shards=2)
    check.shard_state_in_checkpoints()
    check.asynchronous()
    check.asynchronous(shards=2)
    check.checkpoints()
    check.worker_lost("killed")
    check.worker_lost("stopped")
    check.server_lost("killed", [])
    check.server_lost("stopped", ["--peer-timeout", "3"])
    check.server_lost("killed", [], shards=2)
    check.server_lost("stopped", ["--peer-timeout", "3"], shards=2)
    check.refused(["--ps", "3"], "would hold the parameter-server shards and leave no worker")
    check.refused(["--devices", "2"], "each parameter-server worker is one process")
    if check.failures:
        print(f"{len(check.failures)} failed: {', '.join(check.failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
