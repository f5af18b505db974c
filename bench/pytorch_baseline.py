#!/usr/bin/env python3
"""PyTorch reference for `tandem bench train`: the same models, recipe and
measurement (examples/second over timed training steps on in-memory random
batches), so the two can be compared in one interleaved run.

Needs Debian's python3-torch (run with /usr/bin/python3). Prints one JSON
object per (model, dtype, threads) variant and repeat.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def make_model(name):
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
            nn.ReLU(), nn.Linear(512, 10))
    raise SystemExit(f"unknown model {name}")


def run(model_name, dtype, threads, batch, steps, warmup):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    xs = [torch.randn(batch, 1, 28, 28) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(4)]
    autocast = dtype == "bf16"

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(xs[i % 4])
        loss = loss_fn(out.float(), ys[i % 4])
        loss.backward()
        opt.step()

    for i in range(warmup):
        step(i)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    seconds = time.perf_counter() - start
    return batch * steps / seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="cnn,mlp")
    p.add_argument("--dtypes", default="f32")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    for r in range(a.repeats):
        for m in a.models.split(","):
            for d in a.dtypes.split(","):
                for t in (int(x) for x in a.threads.split(",")):
                    eps = run(m, d, t, a.batch, a.steps, a.warmup)
                    print(json.dumps({"framework": "pytorch", "version": torch.__version__,
                                      "model": m, "dtype": d, "threads": t, "batch": a.batch,
                                      "repeat": r, "examples_per_second": round(eps, 1)}),
                          flush=True)


if __name__ == "__main__":
    main()
