#!/usr/bin/env python3
"""PyTorch 1.13 DistributedDataParallel (gloo) reference for `tandem bench
scaling`: the same model and recipe (SGD momentum 0.9, lr 0.05), global batch
128 split over 2 processes x 1 thread, random in-memory batches, timed steps
after warm-up. Prints one JSON line with the global examples per second.
Run with Debian's python3-torch: /usr/bin/python3 bench/pytorch_ddp.py
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_baseline import make_model  # noqa: E402


def worker(rank, world, args, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    local = args.batch // world
    xs = [torch.randn(local, 1, 28, 28) for _ in range(4)]
    ys = [torch.randint(0, 10, (local,)) for _ in range(4)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xs[i % 4]), ys[i % 4]).backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        queue.put(args.batch * args.steps / seconds)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--port", type=int, default=29517)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(a.processes, a, queue), nprocs=a.processes, join=True)
    print(json.dumps({"framework": "pytorch-ddp-gloo", "model": a.model, "processes": a.processes,
                      "threads": a.threads, "batch": a.batch, "examples_per_second": round(queue.get(), 1)}))


if __name__ == "__main__":
    main()
