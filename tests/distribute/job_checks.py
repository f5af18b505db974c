"""What the end-to-end job checks (launch_check.py, elastic_check.py,
ps_mpi_check.py) share: running a job in a process group of its own (killed
whole when it runs past its time), the ok/FAILED lines and the verdict,
commands that must be refused, fresh run directories, a free port, the
processes a job left behind, and reading a
run's exported weights (`tandem export` writes model.safetensors) to
compare them."""
import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time


def job_arguments(doc):
    """--tandem, --work (made here) and --hosts (netns-hosts.sh: across its
    test hosts), for a check whose docstring is `doc`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--hosts", help="netns-hosts.sh: run the checks across its test hosts")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def left_behind(pattern):
    """The processes whose command line holds `pattern` (pgrep -f), as text."""
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip()


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        tensors[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
    return tensors


def max_relative_error(a, b):
    """Over b's tensors: the largest |a - b| relative to b's largest magnitude."""
    worst = 0.0
    for name, values in b.items():
        scale = max(max(abs(v) for v in values), 1e-30)
        worst = max(worst, max(abs(x - y) for x, y in zip(a[name], values)) / scale)
    return worst


class JobChecks:
    def __init__(self, tandem, work):
        self.tandem = tandem
        self.work = work
        self.failures = []

    def start(self, command, env=None):
        # Its own process group, so that a job past its time goes whole
        # (a launcher, its daemons and workers), not just the first process.
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True,
                                env=dict(os.environ, **(env or {})))

    def finish(self, p, timeout=240):
        """(status, output); status None when the job ran past `timeout`."""
        try:
            out, _ = p.communicate(timeout=timeout)
            return p.returncode, out
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return None, out

    def run(self, command, timeout=240, env=None):
        """(status, output, seconds)."""
        started = time.monotonic()
        code, out = self.finish(self.start(command, env), timeout)
        return code, out, time.monotonic() - started

    def expect(self, label, ok, detail=""):
        print(f"{'ok    ' if ok else 'FAILED'} {label}{': ' + detail if detail else ''}")
        if not ok:
            self.failures.append(label)

    def conclude(self):
        """Prints the verdict and exits non-zero when a check failed."""
        if self.failures:
            print(f"{len(self.failures)} check(s) failed: {', '.join(self.failures)}")
            sys.exit(1)
        print("all checks passed")

    def refused(self, label, command, pattern, env=None, timeout=60):
        """A command that must fail with `pattern` in its output, without hanging."""
        code, out, seconds = self.run(command, timeout=timeout, env=env)
        self.expect(label, code not in (None, 0) and pattern in out,
                    f"status {code} after {seconds:.1f} s: {out.strip()[-300:]}")

    def directory(self, name):
        path = os.path.join(self.work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def parameters(self, run_dir):
        """The run's final weights, by name."""
        self.run([self.tandem, "export", run_dir])
        return read_safetensors(os.path.join(run_dir, "model.safetensors"))
