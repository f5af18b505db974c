#!/usr/bin/env python3
"""Elastic training under `tandem launch --elastic` end to end (CTest
distribute.elastic; multi_host.elastic across the namespace test hosts).

Every run trains the mlp with a global batch of 96 and is compared with one
device training on the same data: under elastic training step t trains
the same examples whatever the membership, so the final parameters must
equal one device's (max relative error <= 1e-5) and every epoch must count
all 1,536 examples once, however the membership changed.

Each worker also logs a hash of every row it trains (TANDEM_TEST_TRAINED_ROWS),
so each epoch's examples are counted one by one: of each step, the rows of
the latest generation that took it, against one device's.

- 3 workers, rank 2 killed (SIGKILL) right after step 23 (state copies
  every 5 steps): the others regroup, take steps 21-23 again, finish.
- the same with rank 0, the chief, killed: the new rank 0 writes the
  checkpoints and summary.json and carries metrics.jsonl on.
- 3 workers, rank 1 stopped (SIGSTOP) after step 10, --peer-timeout 3: the
  others give it up within 3 + 10 s and finish; its launcher stops it once
  the job is over (no process is left).
- 2 workers, a third joins mid-run (tandem launch --elastic --join): taken
  in at a step boundary, the run ends with 3 members.
- --min-workers 2 and a worker lost: the job ends with an error naming the
  bound.
- the rendezvous host's launcher killed: every rank ends with an error
  naming the store, none hangs or is left behind.
- a joiner whose settings differ from the job's (--drop-remainder): refused
  naming them, the members go on.
- bad input: --join or --min-workers without --elastic, --min-workers above
  the workers started, --join with --nnodes, elastic with another strategy
  or with ZeRO, workers whose settings differ, a worker that fails before
  the job formed (the job ends), a joiner of another run.

    python3 elastic_check.py --tandem build/tandem --work /tmp/x
    python3 elastic_check.py ... --hosts scripts/netns-hosts.sh   # across 2 hosts: a
        killed worker, h1 cut off, a joiner from h1
"""
import collections
import glob
import json
import os
import signal
import subprocess
import time

from job_checks import JobChecks, free_port, job_arguments, left_behind, max_relative_error

TOLERANCE = 1e-5
EXAMPLES = 1536
# Every run is 2 epochs (32 steps): past that this mlp amplifies rounding
# (plain multi-worker training ends 3.1e-4 from one device after 3 epochs
# on 3 processes, 8.9e-3 on 2 at --lr 0.02: summation order alone), within
# 5e-7 up to there.
TRAIN = ["train", "--model", "mlp", "--train-examples", str(EXAMPLES), "--test-examples", "256",
         "--batch-size", "96", "--seed", "3", "--threads", "1", "--allow-oversubscription",
         "--quiet"]
ELASTIC = ["--strategy", "multi-worker", "--elastic-copy-every", "5"]


def lines_of(run_dir, kind):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in map(json.loads, f) if line.get("type") == kind]


def wait_for_step(run_dir, step, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(line.get("global_step", 0) >= step for line in lines_of(run_dir, "step")):
            return True
        time.sleep(0.05)
    return False


def trained_examples(prefix):
    """Per epoch, the examples trained (a hash of each row's input) in the
    run's final timeline: of each global step, the rows the latest
    generation logged (a rolled-back step's earlier rows are dropped)."""
    latest = {}  # global step -> (generation, epoch, rows)
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                epoch, step, generation, *rows = line.split()
                step, generation = int(step), int(generation)
                kept = latest.get(step)
                if kept is None or generation > kept[0]:
                    latest[step] = (generation, int(epoch), list(rows))
                elif generation == kept[0]:
                    kept[2].extend(rows)
    epochs = collections.defaultdict(collections.Counter)
    for generation, epoch, rows in latest.values():
        epochs[epoch].update(rows)
    return dict(epochs)


class Check(JobChecks):
    def __init__(self, args):
        super().__init__(args.tandem, args.work)
        self.references = {}

    def reference(self, epochs):
        """One device's parameters after `epochs` epochs."""
        if epochs not in self.references:
            run_dir = self.directory(f"one-device-{epochs}")
            rows = self.rows_log(run_dir)
            code, out, _ = self.run([self.tandem, *TRAIN, "--epochs", str(epochs),
                                     "--output", run_dir], env=rows)
            self.expect(f"one-device reference ({epochs} epochs) runs", code == 0, out[-300:])
            self.references[epochs] = (self.parameters(run_dir),
                                       trained_examples(rows["TANDEM_TEST_TRAINED_ROWS"]))
        return self.references[epochs]

    def rows_log(self, run_dir):
        """Where a run's workers log the rows they train (TANDEM_TEST_TRAINED_ROWS)."""
        directory = self.directory(os.path.basename(run_dir) + "-rows")
        os.makedirs(directory)
        return {"TANDEM_TEST_TRAINED_ROWS": os.path.join(directory, "rows")}

    def launch(self, workers, run_dir, epochs, *launch_flags, extra=()):
        return [self.tandem, "launch", "--elastic", "--nproc-per-node", str(workers),
                *launch_flags, "--", "tandem", *TRAIN, *ELASTIC, "--epochs", str(epochs),
                "--output", run_dir, *extra]

    def same_as_one_device(self, label, run_dir, epochs, rows=True):
        parameters, examples = self.reference(epochs)
        error = max_relative_error(self.parameters(run_dir), parameters)
        self.expect(f"{label}: parameters == one device", error <= TOLERANCE,
                    f"max relative error {error:.2e}")
        if not rows:
            return
        trained = trained_examples(os.path.join(run_dir + "-rows", "rows"))
        wrong = [e for e in range(epochs) if trained.get(e) != examples.get(e)]
        counts = [sum(trained.get(e, {}).values()) for e in range(epochs)]
        self.expect(f"{label}: every example trained once per epoch (by its rows' hashes)",
                    not wrong and len(examples) == epochs and
                    all(sum(c.values()) == EXAMPLES for c in examples.values()),
                    f"epochs {wrong} differ from one device's; rows per epoch {counts}")
        with open(os.path.join(run_dir, "summary.json")) as f:
            counts = [e["train_examples"] for e in json.load(f)["history"]]
        self.expect(f"{label}: every epoch trains each example once", counts == [EXAMPLES] * epochs,
                    f"examples per epoch {counts}")

    def membership(self, label, run_dir, lost=(), joined=(), rolled_back=None, within=None):
        changes = lines_of(run_dir, "membership")
        ok = len(changes) == 1 and changes[0]["lost"] == list(lost) and \
            changes[0]["joined"] == list(joined)
        if ok and rolled_back is not None:
            ok = changes[0]["rolled_back_steps"] == rolled_back
        if ok and within is not None:
            ok = changes[0]["seconds"] <= within
        self.expect(f"{label}: one membership line", ok, json.dumps(changes)[:400])
        return changes

    def killed_worker(self):
        run_dir = self.directory("killed")
        code, out, seconds = self.run(self.launch(3, run_dir, 2), timeout=120,
                                      env={"TANDEM_TEST_KILL_AT_STEP": "2:23", **self.rows_log(run_dir)})
        self.expect("a killed worker: the others finish", code == 0,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-400:]}")
        self.expect("the launcher names the lost worker",
                    "worker rank 2" in out and "signal 9" in out and "goes on without it" in out,
                    out[-400:])
        self.membership("killed worker", run_dir, lost=[2], rolled_back=3, within=5)
        self.same_as_one_device("killed worker", run_dir, 2)

    def killed_chief(self):
        run_dir = self.directory("killed-chief")
        code, out, seconds = self.run(self.launch(3, run_dir, 2), timeout=120,
                                      env={"TANDEM_TEST_KILL_AT_STEP": "0:23", **self.rows_log(run_dir)})
        self.expect("the chief killed: the others finish", code == 0,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-400:]}")
        self.membership("killed chief", run_dir, lost=[0], rolled_back=3, within=5)
        self.expect("the new chief carries metrics.jsonl on and writes the summary",
                    len(lines_of(run_dir, "run")) == 2 and len(lines_of(run_dir, "epoch")) == 2 and
                    os.path.exists(os.path.join(run_dir, "summary.json")),
                    f"{len(lines_of(run_dir, 'run'))} run and {len(lines_of(run_dir, 'epoch'))} epoch lines")
        self.same_as_one_device("killed chief", run_dir, 2)

    def stopped_worker(self):
        run_dir = self.directory("stopped")
        code, out, seconds = self.run(self.launch(3, run_dir, 2, extra=["--peer-timeout", "3"]),
                                      env={"TANDEM_TEST_KILL_AT_STEP": "1:10:stop",
                                           **self.rows_log(run_dir)}, timeout=120)
        self.expect("a silent worker: the others finish", code == 0,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-400:]}")
        self.membership("silent worker", run_dir, lost=[1], within=3 + 10)
        self.same_as_one_device("silent worker", run_dir, 2)
        self.expect("the given-up worker is stopped", left_behind(run_dir) == "",
                    left_behind(run_dir))

    def joiner(self):
        run_dir = self.directory("joined")
        rdzv = f"127.0.0.1:{free_port()}"
        common = ["--rdzv", rdzv, "--run-id", "grow"]
        # Slowed down (every step waits for replica 0), so that the joiner
        # arrives well before the end.
        slow = ["--slow-replica", "0:12"]
        rows = self.rows_log(run_dir)
        members = self.start(self.launch(2, run_dir, 2, *common, extra=slow), env=rows)
        asked = wait_for_step(run_dir, 3)
        joiner = self.start(self.launch(1, run_dir, 2, "--join", *common, extra=slow), env=rows)
        (code, out), (join_code, join_out) = self.finish(members), self.finish(joiner)
        self.expect("a joiner: the job runs", asked and code == 0 and join_code == 0,
                    f"statuses {code}, {join_code}: {out.strip()[-300:]} | {join_out.strip()[-300:]}")
        changes = self.membership("joiner", run_dir, joined=[2], rolled_back=0, within=5)
        if changes:
            self.expect("the job ends with 3 members", changes[0]["members"] == [0, 1, 2] and
                        changes[0]["process_batch"] == 32, json.dumps(changes[0]))
        self.same_as_one_device("joiner", run_dir, 2)

    def joiner_with_other_settings(self):
        run_dir = self.directory("bad-joiner")
        rdzv = f"127.0.0.1:{free_port()}"
        common = ["--rdzv", rdzv, "--run-id", "refuse"]
        slow = ["--slow-replica", "0:12"]
        members = self.start(self.launch(2, run_dir, 2, *common, extra=slow))
        asked = wait_for_step(run_dir, 3)
        code, out, _ = self.run(self.launch(1, run_dir, 2, "--join", *common,
                                            extra=[*slow, "--drop-remainder"]), timeout=120)
        self.expect("a joiner with other settings is refused",
                    asked and code not in (None, 0) and
                    "cannot join: its settings differ from the job's: drop_remainder true here, false in "
                    "the job" in out,
                    f"status {code}: {out.strip()[-400:]}")
        members_code, members_out = self.finish(members)
        self.expect("the members go on without the refused joiner", members_code == 0,
                    f"status {members_code}: {members_out.strip()[-300:]}")
        self.same_as_one_device("refused joiner", run_dir, 2, rows=False)

    def too_few_left(self):
        run_dir = self.directory("too-few")
        code, out, seconds = self.run(self.launch(2, run_dir, 2, "--min-workers", "2"),
                                      env={"TANDEM_TEST_KILL_AT_STEP": "1:5"}, timeout=120)
        self.expect("fewer workers than --min-workers end the job",
                    code not in (None, 0) and "fewer than the 2 needed" in out and seconds < 30,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-400:]}")
        self.expect("no worker is left behind (too few)", left_behind(run_dir) == "",
                    left_behind(run_dir))

    def rendezvous_lost(self):
        run_dir = self.directory("rendezvous-lost")
        rdzv = f"127.0.0.1:{free_port()}"
        common = ["--nnodes", "2", "--rdzv", rdzv, "--run-id", "lost"]
        nodes = [self.start(self.launch(1, run_dir, 200, *common, "--node-rank", str(rank),
                                        extra=["--peer-timeout", "3"]))
                 for rank in (0, 1)]
        started = wait_for_step(run_dir, 3)
        os.kill(nodes[0].pid, signal.SIGKILL)  # the launcher serving the store, not its worker
        killed = time.monotonic()
        code, out = self.finish(nodes[1], timeout=60)
        self.finish(nodes[0], timeout=10)
        seconds = time.monotonic() - killed
        self.expect("the rendezvous host lost: the other node ends with an error",
                    started and code not in (None, 0) and "rendezvous store" in out and
                    seconds < 30, f"status {code} after {seconds:.1f} s: {out.strip()[-400:]}")
        deadline = time.monotonic() + 15
        while left_behind(run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.expect("every worker ends when the rendezvous is lost", left_behind(run_dir) == "",
                    left_behind(run_dir))

    def bad_input(self):
        t = self.tandem
        self.refused("--join without --elastic", [t, "launch", "--join", "--rdzv", "127.0.0.1:1",
                                                   "--", "true"], "are for an elastic job")
        self.refused("--min-workers without --elastic",
                     [t, "launch", "--min-workers", "2", "--", "true"], "are for an elastic job")
        self.refused("--min-workers above the workers",
                     [t, "launch", "--elastic", "--nproc-per-node", "3", "--min-workers", "4", "--",
                      "true"], "--min-workers 4 is outside 1..3")
        self.refused("--max-workers below the workers",
                     [t, "launch", "--elastic", "--nproc-per-node", "3", "--max-workers", "2", "--",
                      "true"], "--max-workers 2 is below")
        self.refused("--join with --nnodes",
                     [t, "launch", "--elastic", "--join", "--nnodes", "2", "--rdzv", "127.0.0.1:1",
                      "--", "true"], "--join adds this host's workers")
        self.refused("elastic with another strategy",
                     [t, "launch", "--elastic", "--nproc-per-node", "2", "--", "tandem", *TRAIN,
                      "--strategy", "mirrored", "--output", self.directory("mirrored")],
                     "add --strategy multi-worker")
        self.refused("elastic with ZeRO",
                     [t, "launch", "--elastic", "--nproc-per-node", "2", "--", "tandem", *TRAIN,
                      *ELASTIC, "--zero", "1", "--output", self.directory("zero")],
                     "does not run ZeRO")
        # Rank 1 drops each epoch's remainder: every worker ends, rank 1 naming it.
        other_seed = ('if [ "$TANDEM_RANK" = 1 ]; then exec "$0" "$@" --drop-remainder; fi; '
                      'exec "$0" "$@"')
        self.refused("workers with different settings",
                     [t, "launch", "--elastic", "--nproc-per-node", "2", "--", "sh", "-c",
                      other_seed, t, *TRAIN, *ELASTIC, "--output", self.directory("settings")],
                     "this worker's settings differ from worker 0's: drop_remainder true here, "
                     "false in the job")
        # A worker that fails before the job formed ends it (the others would
        # wait for it to connect).
        early = ('if [ "$TANDEM_RANK" = 1 ]; then exec "$0" "$@" --seed 3; fi; exec "$0" "$@"')
        self.refused("a worker failing before the job formed ends it",
                     [t, "launch", "--elastic", "--nproc-per-node", "2", "--", "sh", "-c", early,
                      t, *TRAIN, *ELASTIC, "--output", self.directory("early")],
                     "--seed is given more than once", timeout=30)
        self.refused("a bad --elastic-copy-every",
                     [t, *TRAIN, "--elastic-copy-every", "0"],
                     "elastic_copy_every (--elastic-copy-every) must be at least 1")
        # A joiner of another run, against a job that waits for a node.
        rdzv = f"127.0.0.1:{free_port()}"
        job = self.start([t, "launch", "--elastic", "--nnodes", "2", "--rdzv", rdzv, "--run-id",
                          "mine", "--rdzv-timeout", "20", "--", "true"])
        time.sleep(1)
        self.refused("a joiner of another run",
                     [t, "launch", "--elastic", "--join", "--rdzv", rdzv, "--run-id", "theirs",
                      "--", "true"], "serves run 'mine', not 'theirs'")
        os.killpg(job.pid, signal.SIGKILL)
        self.finish(job)


class HostsCheck(Check):
    """The 2 namespace hosts (scripts/netns-hosts.sh), the rendezvous on h0:
    2 workers on each, one killed; 2 workers on each, h1's links cut
    mid-run; 2 workers on h0 and a joiner from h1."""

    def __init__(self, args):
        super().__init__(args)
        self.netns = args.hosts

    def on(self, host, command):
        return ["sh", self.netns, "exec", host] + command

    def killed_across_hosts(self):
        run_dir = self.directory("killed-hosts")
        common = ["--nnodes", "2", "--rdzv", "10.213.0.1:29522", "--run-id", "killed"]
        env = {"TANDEM_TEST_KILL_AT_STEP": "3:23", **self.rows_log(run_dir)}
        nodes = [self.start(self.on(f"h{rank}", self.launch(
            2, run_dir, 2, *common, "--node-rank", str(rank))), env=env) for rank in (0, 1)]
        results = [self.finish(p, 120) for p in nodes]
        self.expect("4 workers on 2 hosts, one killed: the others finish",
                    all(code == 0 for code, _ in results),
                    " | ".join(f"{code}: {out.strip()[-300:]}" for code, out in results))
        self.membership("killed across hosts", run_dir, lost=[3], rolled_back=3, within=5)
        self.same_as_one_device("killed across hosts", run_dir, 2)

    def joiner_across_hosts(self):
        run_dir = self.directory("joined-hosts")
        common = ["--rdzv", "10.213.0.1:29523", "--run-id", "grow"]
        slow = ["--slow-replica", "0:12"]
        rows = self.rows_log(run_dir)
        members = self.start(self.on("h0", self.launch(2, run_dir, 2, *common, extra=slow)),
                             env=rows)
        asked = wait_for_step(run_dir, 3)
        joiner = self.start(self.on("h1", self.launch(1, run_dir, 2, "--join", *common,
                                                      extra=slow)), env=rows)
        (code, out), (join_code, join_out) = self.finish(members), self.finish(joiner)
        self.expect("a joiner from h1: the job runs", asked and code == 0 and join_code == 0,
                    f"statuses {code}, {join_code}: {out.strip()[-300:]} | {join_out.strip()[-300:]}")
        self.membership("joiner across hosts", run_dir, joined=[2], rolled_back=0, within=5)
        self.same_as_one_device("joiner across hosts", run_dir, 2)

    def link_cut(self):
        run_dir = self.directory("cut")
        common = ["--nnodes", "2", "--rdzv", "10.213.0.1:29521", "--run-id", "cut"]
        slow = ["--peer-timeout", "3", "--slow-replica", "0:6"]
        rows = self.rows_log(run_dir)
        nodes = [self.start(self.on(f"h{rank}", self.launch(
            2, run_dir, 2, *common, "--node-rank", str(rank), extra=slow)), env=rows)
            for rank in (0, 1)]
        started = wait_for_step(run_dir, 3)
        subprocess.run(["sh", self.netns, "cut", "h1"], check=True)
        try:
            (code, out), (cut_code, cut_out) = self.finish(nodes[0]), self.finish(nodes[1], 60)
        finally:
            subprocess.run(["sh", self.netns, "restore", "h1"], check=False)
        self.expect("h1 cut off: h0's workers finish", started and code == 0,
                    f"status {code}: {out.strip()[-400:]}")
        self.expect("h1 cut off: h1's launcher ends with an error", cut_code not in (None, 0),
                    f"status {cut_code}: {cut_out.strip()[-300:]}")
        self.membership("h1 cut off", run_dir, lost=[2, 3], within=3 + 10)
        self.same_as_one_device("h1 cut off", run_dir, 2)


def main():
    args = job_arguments(__doc__)
    if args.hosts:
        check = HostsCheck(args)
        check.killed_across_hosts()
        check.link_cut()
        check.joiner_across_hosts()
    else:
        check = Check(args)
        check.killed_worker()
        check.killed_chief()
        check.stopped_worker()
        check.joiner()
        check.joiner_with_other_settings()
        check.too_few_left()
        check.rendezvous_lost()
        check.bad_input()
    check.conclude()


if __name__ == "__main__":
    main()
