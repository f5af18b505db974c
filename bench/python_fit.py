#!/usr/bin/env python3
"""What the Python front end costs, and where Python-driven tandem stands
against the peers: training throughput of

  cli-cnn    tandem train --model cnn (Fashion-MNIST subset, batch 128, SGD momentum;
             --precision float32 or mixed_bfloat16: Keras's policy, PyTorch's autocast)
  py-cnn     the same recipe through model.fit from Python
  tf-cnn     TensorFlow 2 Keras model.fit on the same arrays (tf.data, batch 128)
  torch-cnn  a PyTorch 2 loop on the same arrays
  cli-gpt    tandem train --model gpt on the KJV corpus (batch 32, AdamW, bf16)
  py-gpt     the built-in gpt through model.fit
  pyclass-gpt the same architecture written in Python (examples/python/kjv_transformer.py)

each in its own process pinned to one core (taskset -c 0, one thread,
TensorFlow's inter-op pool and tf.data included; --threads N: cores
0..N-1 and N intra-op threads in every framework, TensorFlow's inter-op
pool and tf.data still one thread each), variants interleaved
round by round; medians with min-max. cnn figures are the second epoch's
(the first includes set-up and first-touch costs in every framework); gpt
figures are over steps 6-25 (the first 5 are warm-up).

    python3 bench/python_fit.py --tandem build/tandem --pythonpath build/python \\
        --peers /work/peers/bin/python --rounds 3

--peers names a Python with tensorflow-cpu and torch (a venv outside the
repository; never a product dependency); without it the peers are skipped.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FASHION = "/usr/share/datasets/fashion-mnist"
CNN_EXAMPLES = 8192
GPT_STEPS, GPT_WARMUP = 25, 5


# --- workers: each runs one measurement and prints {"rate": ...} ---------------

def fashion_arrays(n):
    import gzip
    import numpy as np
    with gzip.open(os.path.join(FASHION, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)[:n]
    with gzip.open(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return ((x.astype(np.float32) / 255.0 - 0.286) / 0.353), y.astype(np.int32)


def worker_py_cnn(args):
    import tandem
    tandem.set_global_policy(args.precision)
    (x, y), _ = tandem.data.fashion_mnist()
    model = tandem.models.cnn(seed=1)
    model.compile(optimizer=tandem.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
    train = tandem.data.Dataset.from_tensor_slices((x[:CNN_EXAMPLES], y[:CNN_EXAMPLES])).shuffle(CNN_EXAMPLES, seed=1)
    history = model.fit(train, batch_size=128, epochs=2, seed=1, threads_per_device=args.threads,
                        verbose=0)
    return history.history["examples_per_second"][1]


def gpt_fit(model, data_dir, threads):
    import tandem
    model.compile(optimizer=tandem.optimizers.AdamW(6e-4, weight_decay=0.01), metrics=[])
    train = tandem.data.Dataset.from_spec(os.path.join(data_dir, "train.toml"))
    times = []

    class Clock(tandem.callbacks.Callback):
        def on_train_batch_end(self, batch, logs):
            times.append(logs["step_seconds"])
    model.fit(train, batch_size=32, epochs=1, steps_per_epoch=GPT_STEPS, seed=1, threads_per_device=threads, verbose=0,
              callbacks=[Clock()])
    return 32 * 128 * len(times[GPT_WARMUP:]) / sum(times[GPT_WARMUP:])


def worker_py_gpt(args):
    import tandem
    tandem.set_global_policy("mixed_bfloat16")
    return gpt_fit(tandem.models.gpt(seed=1), args.kjv, args.threads)


def worker_pyclass_gpt(args):
    import tandem
    tandem.set_global_policy("mixed_bfloat16")
    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    from kjv_transformer import Transformer
    return gpt_fit(Transformer(seed=1), args.kjv, args.threads)


def worker_tf_cnn(args):
    import time
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.mixed_precision.set_global_policy(args.precision)
    x, y = fashion_arrays(CNN_EXAMPLES)
    L = tf.keras.layers
    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)), L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPooling2D(),
        L.Conv2D(64, 3, padding="same", activation="relu"), L.MaxPooling2D(), L.Flatten(),
        L.Dense(128, activation="relu"), L.Dense(10, dtype="float32")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(CNN_EXAMPLES, seed=1).batch(128) \
        .prefetch(tf.data.AUTOTUNE).with_options(options)
    marks = []

    class Clock(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            marks.append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            marks.append(time.perf_counter())
    model.fit(data, epochs=2, verbose=0, callbacks=[Clock()])
    return CNN_EXAMPLES / (marks[3] - marks[2])


def worker_torch_cnn(args):
    import time
    import torch
    import torch.nn as nn
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x, y = fashion_arrays(CNN_EXAMPLES)
    x = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(y).long()
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    rate = 0.0
    for epoch in range(2):
        start = time.perf_counter()
        order = torch.randperm(CNN_EXAMPLES)
        for i in range(0, CNN_EXAMPLES, 128):
            rows = order[i:i + 128]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "mixed_bfloat16"):
                logits = model(x[rows])
                loss = loss_fn(logits.float(), y[rows])
            loss.backward()
            opt.step()
            (logits.argmax(1) == y[rows]).float().mean().item()  # the accuracy metric peers compute
        rate = CNN_EXAMPLES / (time.perf_counter() - start)
    return rate


WORKERS = {"py-cnn": worker_py_cnn, "py-gpt": worker_py_gpt, "pyclass-gpt": worker_pyclass_gpt,
           "tf-cnn": worker_tf_cnn, "torch-cnn": worker_torch_cnn}


# --- the driver --------------------------------------------------------------

def cli_rate(args, variant, out):
    common = ["--threads", str(args.threads), "--quiet", "--no-monitor", "--seed", "1", "--output", out]
    if variant == "cli-cnn":
        command = [args.tandem, "train", "--model", "cnn", "--epochs", "2", "--train-examples",
                   str(CNN_EXAMPLES), "--test-examples", "256", "--batch-size", "128",
                   "--precision", args.precision] + common
        run(args, command)
        return json.load(open(os.path.join(out, "summary.json")))["history"][1]["examples_per_second"]
    command = [args.tandem, "train", "--model", "gpt", "--data", os.path.join(args.kjv, "train.toml"),
               "--batch-size", "32", "--epochs", "1", "--steps-per-epoch", str(GPT_STEPS),
               "--optimizer", "adamw", "--lr", "6e-4", "--precision", "mixed_bfloat16",
               "--metrics", "none",  # as the Python fits compile it: metrics=[]
               "--metrics-every", "1"] + [a for a in common if a != "--no-monitor"]
    run(args, command)
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    seconds = [s["step_seconds"] for s in steps if s.get("type") == "step"][GPT_WARMUP:]
    return 32 * 128 * len(seconds) / sum(seconds)


def run(args, command, env=None):
    cores = f"0-{args.threads - 1}" if args.threads > 1 else "0"
    result = subprocess.run(["taskset", "-c", cores] + command, capture_output=True, text=True,
                            env=env)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def measure(args, variant, work):
    out = tempfile.mkdtemp(dir=work)
    if variant.startswith("cli-"):
        return cli_rate(args, variant, out)
    peer = variant.startswith(("tf-", "torch-"))
    python = args.peers if peer else "/usr/bin/python3"
    threads = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=threads, TF_NUM_INTRAOP_THREADS=threads,
               TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    if not peer:
        env["PYTHONPATH"] = args.pythonpath
    stdout = run(args, [python, os.path.abspath(__file__), "--worker", variant, "--kjv", args.kjv,
                        "--precision", args.precision, "--threads", str(args.threads)], env)
    return json.loads(stdout.strip().splitlines()[-1])["rate"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", default="build/tandem")
    p.add_argument("--pythonpath", default="build/python")
    p.add_argument("--peers", default="", help="a Python with tensorflow and torch")
    p.add_argument("--kjv", default="", help="tandem data text --corpus kjv's output (made when empty)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default="cli-cnn,py-cnn,tf-cnn,torch-cnn,cli-gpt,py-gpt,pyclass-gpt")
    p.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"],
                   help="the cnn variants' precision (gpt: mixed_bfloat16 always)")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads in every framework, the run pinned to cores 0..N-1")
    p.add_argument("--worker", default="")
    args = p.parse_args()
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if args.worker:
        print(json.dumps({"rate": WORKERS[args.worker](args)}))
        return
    work = tempfile.mkdtemp(prefix="python_fit_")
    if not args.kjv:
        args.kjv = os.path.join(work, "kjv")
        subprocess.run([args.tandem, "data", "text", "--corpus", "kjv", "--output", args.kjv],
                       check=True, capture_output=True)
    variants = [v for v in args.variants.split(",") if args.peers or not v.startswith(("tf-", "torch-"))]
    rates = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            rates[v].append(measure(args, v, work))
            print(f"round {r + 1} {v}: {rates[v][-1]:,.0f}", file=sys.stderr, flush=True)
    print("| variant | per second (median, min-max) | unit |\n|---|---|---|")
    for v in variants:
        unit = "tokens" if v.endswith("gpt") else "examples"
        print(f"| {v} | {statistics.median(rates[v]):,.0f} ({min(rates[v]):,.0f}-{max(rates[v]):,.0f}) | {unit} |")
    med = {v: statistics.median(x) for v, x in rates.items()}
    for a, b in (("py-cnn", "cli-cnn"), ("py-gpt", "cli-gpt"), ("pyclass-gpt", "py-gpt"),
                 ("py-cnn", "tf-cnn"), ("py-cnn", "torch-cnn")):
        if a in med and b in med:
            print(f"{a} / {b}: {med[a] / med[b]:.3f}")
    print(json.dumps({"rates": rates}))


if __name__ == "__main__":
    main()
