#!/usr/bin/env python3
"""`tandem launch` end to end (CTest distribute.launch):

- 2 workers on one host, multi-worker over gloo, end with the parameters of
  mirrored training on 2 devices (max relative error <= 1e-5), and so do 2
  "nodes" of 1 worker each (two launchers on this host, --nnodes 2, node 0
  serving --rdzv);
- a worker killed (SIGKILL) mid-run: the launcher names its rank and the
  signal, stops the other worker and exits non-zero within 30 s, leaving no
  worker behind; a stopped worker (SIGSTOP) ends the job after the
  collective timeout; a worker that fails on another node stops this node's;
  SIGTERM to the launcher stops every worker once (exit 143, the chief's
  checkpoint) and the job resumes under the launcher; a launcher killed
  outright (SIGKILL) takes its workers with it (their parent-death signal)
  instead of leaving them to train on unsupervised;
- bad input, each refused with one clear line and no hang: no command, a
  worker count or node rank out of range, --nnodes without --rdzv, node
  ranks that disagree on --nproc-per-node, another run's --run-id, a node
  rank taken twice, a rendezvous nobody serves, a worker of another run,
  multi-worker without a launcher, and the parameter-server strategy
  under tandem launch (its links need MPI).

    python3 launch_check.py --tandem build/tandem --work /tmp/x
    python3 launch_check.py ... --hosts scripts/netns-hosts.sh   # across its 2 test hosts:
        equal to mirrored, and a host cut off mid-run ends the job on both
"""
import os
import signal
import socket
import subprocess
import time

from job_checks import JobChecks, free_port, job_arguments, left_behind, max_relative_error

TOLERANCE = 1e-5
LIMIT = 30  # seconds for a job with a lost worker to end

TRAIN = ["train", "--model", "mlp", "--train-examples", "1536", "--test-examples", "256",
         "--batch-size", "96", "--seed", "3", "--threads", "1", "--allow-oversubscription",
         "--quiet"]


def serving(endpoint, seconds=10):
    """Waits until something accepts connections at HOST:PORT."""
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing serves {endpoint} after {seconds} s")


class Check(JobChecks):
    def __init__(self, args):
        super().__init__(args.tandem, args.work)

    def launch(self, workers, extra, *launch_flags):
        return [self.tandem, "launch", "--nproc-per-node", str(workers), *launch_flags, "--",
                "tandem", *TRAIN, "--strategy", "multi-worker", *extra]

    def equals_mirrored(self):
        mirrored = self.directory("mirrored")
        code, out, _ = self.run([self.tandem, *TRAIN, "--strategy", "mirrored", "--devices", "2",
                                 "--epochs", "2", "--output", mirrored])
        self.expect("mirrored reference runs", code == 0, out[-300:])
        reference = self.parameters(mirrored)

        one_host = self.directory("one-host")
        code, out, _ = self.run(self.launch(2, ["--epochs", "2", "--output", one_host]))
        self.expect("launch 2 workers runs", code == 0, out[-300:])
        error = max_relative_error(self.parameters(one_host), reference)
        self.expect("launch 2 workers == mirrored", error <= TOLERANCE, f"max relative error {error:.2e}")

        two_nodes = self.directory("two-nodes")
        rdzv = f"127.0.0.1:{free_port()}"
        common = ["--nnodes", "2", "--rdzv", rdzv, "--run-id", "pair"]
        nodes = [self.start(self.launch(1, ["--epochs", "2", "--output", two_nodes], *common,
                                        "--node-rank", str(rank))) for rank in (1, 0)]
        results = [self.finish(p) for p in nodes]
        self.expect("launch 2 nodes x 1 worker runs", all(code == 0 for code, _ in results),
                    " | ".join(out[-200:] for _, out in results))
        error = max_relative_error(self.parameters(two_nodes), reference)
        self.expect("launch 2 nodes x 1 worker == mirrored", error <= TOLERANCE,
                    f"max relative error {error:.2e}")

    def killed_worker(self):
        # Rank 1 kills itself (after exec, so tandem itself is killed) 3 s in.
        killer = ('if [ "$TANDEM_RANK" = 1 ]; then (sleep 3; kill -9 $$) & fi; '
                  'exec "$0" "$@"')
        run_dir = self.directory("killed")
        command = [self.tandem, "launch", "--nproc-per-node", "2", "--", "sh", "-c", killer,
                   self.tandem, *TRAIN, "--strategy", "multi-worker", "--epochs", "200",
                   "--output", run_dir]
        code, out, seconds = self.run(command, timeout=120)
        self.expect("a killed worker ends the job", code not in (None, 0) and seconds < 3 + LIMIT,
                    f"status {code} after {seconds:.1f} s")
        self.expect("the launcher names the killed worker",
                    "worker rank 1" in out and "signal 9" in out, out[-400:])
        left = left_behind(run_dir)
        self.expect("no worker is left behind", left == "", left)

    def stopped_worker(self):
        # Rank 1 stops itself (SIGSTOP) 3 s in: rank 0's collective times out
        # (--collective-timeout 3), it fails, and the launcher kills rank 1.
        stopper = ('if [ "$TANDEM_RANK" = 1 ]; then (sleep 3; kill -STOP $$) & fi; '
                   'exec "$0" "$@"')
        run_dir = self.directory("stopped")
        command = [self.tandem, "launch", "--nproc-per-node", "2", "--", "sh", "-c", stopper,
                   self.tandem, *TRAIN, "--strategy", "multi-worker", "--epochs", "200",
                   "--collective-timeout", "3", "--output", run_dir]
        code, out, seconds = self.run(command, timeout=120)
        self.expect("a stopped worker ends the job after the collective timeout",
                    code not in (None, 0) and seconds < 3 + 3 + 10 + LIMIT,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-300:]}")
        self.expect("rank 0 says it timed out", "did not take part within 3000 ms" in out,
                    out[-400:])
        left = left_behind(run_dir)
        self.expect("no stopped worker is left behind", left == "", left)

    def forwarded_sigterm(self):
        # SIGTERM to the launcher reaches each worker once: they stop at one
        # step, the chief checkpoints, and the job resumes under the launcher.
        run_dir = self.directory("sigterm")
        train = self.launch(2, ["--epochs", "30", "--output", run_dir])
        p = self.start(train)
        time.sleep(4)
        p.send_signal(signal.SIGTERM)
        code, out = self.finish(p, 60)
        self.expect("SIGTERM to the launcher stops the job with 143", code == 143, out[-300:])
        self.expect("and the chief saved a checkpoint",
                    os.path.exists(os.path.join(run_dir, "checkpoint.tckpt")) and
                    out.count("saving a checkpoint") == 2, out[-300:])
        code, out, _ = self.run(train + ["--resume"], timeout=240)
        self.expect("the stopped job resumes under the launcher", code == 0, out[-300:])

    def killed_launcher(self):
        run_dir = self.directory("killed-launcher")
        p = self.start(self.launch(2, ["--epochs", "200", "--output", run_dir]))
        time.sleep(4)
        p.kill()  # SIGKILL to the launcher alone: it cannot forward anything
        self.finish(p, 10)
        deadline = time.time() + 15
        while left_behind(run_dir) and time.time() < deadline:
            time.sleep(0.2)
        left = left_behind(run_dir)
        self.expect("a killed launcher leaves no worker behind", left == "", left)
        if left:
            subprocess.run(["pkill", "-9", "-f", run_dir], check=False)

    def failure_on_another_node(self):
        rdzv = f"127.0.0.1:{free_port()}"
        common = ["--nnodes", "2", "--rdzv", rdzv]
        run_dir = self.directory("other-node")
        healthy = self.start(self.launch(1, ["--epochs", "200", "--output", run_dir], *common,
                                         "--node-rank", "0"))
        failing = self.start([self.tandem, "launch", *common, "--node-rank", "1", "--", "sh", "-c",
                              "sleep 2; exit 7"])
        (code0, out0), (code1, out1) = self.finish(healthy, 120), self.finish(failing, 120)
        self.expect("a failed worker on node 1 fails its launcher", code1 == 7, out1[-300:])
        self.expect("and stops node 0's workers", code0 not in (None, 0) and
                    "worker rank 1 (pid" in out0 and "exited with status 7" in out0, out0[-400:])

    def bad_input(self):
        t = self.tandem
        self.refused("no command", [t, "launch", "--nproc-per-node", "2"], "needs the command")
        self.refused("zero workers", [t, "launch", "--nproc-per-node", "0", "--", "true"],
                     "--nproc-per-node 0 is outside 1..1024")
        self.refused("node rank out of range", [t, "launch", "--nnodes", "2", "--node-rank", "2",
                                                "--rdzv", "127.0.0.1:1", "--", "true"],
                     "--node-rank 2 is outside 0..1")
        self.refused("--nnodes without --rdzv", [t, "launch", "--nnodes", "2", "--", "true"],
                     "needs --rdzv HOST:PORT")
        self.refused("a malformed --rdzv", [t, "launch", "--rdzv", "node0", "--", "true"],
                     "--rdzv 'node0' is not HOST:PORT")
        self.refused("nobody serves the rendezvous",
                     [t, "launch", "--nnodes", "2", "--node-rank", "1", "--rdzv",
                      f"127.0.0.1:{free_port()}", "--rdzv-timeout", "2", "--", "true"],
                     "cannot reach the rendezvous store")
        self.refused("multi-worker without a launcher", [t, *TRAIN, "--strategy", "multi-worker"],
                     "needs its processes started by mpirun or tandem launch")
        self.refused("the parameter server under tandem launch",
                     [t, "launch", "--nproc-per-node", "2", "--", "tandem", *TRAIN, "--strategy",
                      "parameter-server", "--output", self.directory("ps-launch")],
                     "the parameter-server strategy across processes runs under mpirun")

        # A node 0 that waits for node 1, which then disagrees with it.
        def against_node0(label, node1_flags, pattern, worker_env=None):
            rdzv = f"127.0.0.1:{free_port()}"
            node0 = self.start([t, "launch", "--nnodes", "2", "--rdzv", rdzv, "--run-id", "mine",
                                "--rdzv-timeout", "10", "--nproc-per-node", "2", "--", "true"])
            serving(rdzv)
            if worker_env is None:
                self.refused(label, [t, "launch", "--nnodes", "2", "--rdzv", rdzv,
                                     "--rdzv-timeout", "10", *node1_flags, "--", "true"], pattern)
            else:
                env = dict(worker_env, TANDEM_RDZV_ENDPOINT=rdzv)
                self.refused(label, [t, *TRAIN, "--strategy", "multi-worker"], pattern, env=env)
            os.killpg(node0.pid, signal.SIGKILL)
            self.finish(node0)

        against_node0("another run's --run-id", ["--node-rank", "1", "--run-id", "theirs",
                                                 "--nproc-per-node", "2"],
                      "serves run 'mine', not 'theirs'")
        against_node0("a different --nproc-per-node", ["--node-rank", "1", "--run-id", "mine",
                                                       "--nproc-per-node", "1"],
                      "every node must give the same --nproc-per-node")
        against_node0("a node rank taken twice", ["--node-rank", "0", "--run-id", "mine",
                                                  "--nproc-per-node", "2"],
                      "cannot listen for the rendezvous store")
        against_node0("a worker of another run", None, "serves run 'mine', not this worker's run 'x'",
                      worker_env={"TANDEM_RANK": "0", "TANDEM_WORLD_SIZE": "2",
                                  "TANDEM_LOCAL_RANK": "0", "TANDEM_LOCAL_WORLD_SIZE": "1",
                                  "TANDEM_RUN_ID": "x"})


class HostsCheck(Check):
    """Two launchers on two namespace hosts (scripts/netns-hosts.sh), the
    rendezvous served by h0 on its data network address."""

    def __init__(self, args):
        super().__init__(args)
        self.netns = args.hosts

    def on(self, host, command):
        return ["sh", self.netns, "exec", host] + command

    def two_hosts(self, extra, label):
        run_dir = self.directory(label)
        common = ["--nnodes", "2", "--rdzv", "10.213.0.1:29511", "--run-id", label]
        nodes = [self.start(self.on(f"h{rank}", self.launch(
            1, [*extra, "--output", run_dir], *common, "--node-rank", str(rank))))
            for rank in (0, 1)]
        return run_dir, nodes

    def equals_mirrored_across_hosts(self):
        mirrored = self.directory("mirrored")
        code, out, _ = self.run([self.tandem, *TRAIN, "--strategy", "mirrored", "--devices", "2",
                                 "--epochs", "2", "--output", mirrored])
        self.expect("mirrored reference runs", code == 0, out[-300:])
        run_dir, nodes = self.two_hosts(["--epochs", "2"], "hosts")
        results = [self.finish(p) for p in nodes]
        self.expect("launch across 2 hosts runs", all(code == 0 for code, _ in results),
                    " | ".join(out[-300:] for _, out in results))
        error = max_relative_error(self.parameters(run_dir), self.parameters(mirrored))
        self.expect("launch across 2 hosts == mirrored", error <= TOLERANCE,
                    f"max relative error {error:.2e}")

    def link_cut(self):
        # h1's links go down mid-run: h0's worker times out
        # (--collective-timeout 5) and its launcher ends; h1's launcher loses
        # the rendezvous and stops its worker. Both within 5 + 30 s.
        run_dir, nodes = self.two_hosts(["--epochs", "200", "--collective-timeout", "5"], "cut")
        metrics = os.path.join(run_dir, "metrics.jsonl")
        deadline = time.monotonic() + 60
        while not os.path.exists(metrics) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        subprocess.run(["sh", self.netns, "cut", "h1"], check=True)
        cut = time.monotonic()
        try:
            results = [self.finish(p, 5 + LIMIT + 30) for p in nodes]
        finally:
            subprocess.run(["sh", self.netns, "restore", "h1"], check=False)
        seconds = time.monotonic() - cut
        self.expect("a cut host ends the job on both hosts",
                    all(code not in (None, 0) for code, _ in results) and seconds < 5 + LIMIT,
                    f"statuses {[code for code, _ in results]} after {seconds:.1f} s: " +
                    " | ".join(out[-300:] for _, out in results))


def main():
    args = job_arguments(__doc__)
    if args.hosts:
        check = HostsCheck(args)
        check.equals_mirrored_across_hosts()
        check.link_cut()
        check.conclude()
        return
    check = Check(args)
    check.equals_mirrored()
    check.killed_worker()
    check.stopped_worker()
    check.forwarded_sigterm()
    check.killed_launcher()
    check.failure_on_another_node()
    check.bad_input()
    check.conclude()


if __name__ == "__main__":
    main()
