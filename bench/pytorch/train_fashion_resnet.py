#!/usr/bin/env python3
"""The resnet recipe of docs/models.md in PyTorch, for the accuracy
comparison: Fashion-MNIST from Debian's dataset-fashion-mnist, scaled to
[0, 1] and normalised with tandem's mean 0.2860 / std 0.3530; augmentation as
`tandem train --augment flip,crop:2` (a left-right flip with probability 1/2,
then zero padding of the normalised image by P pixels per side and a crop
back at a random offset); SGD with Nesterov momentum 0.9, L2 weight decay on
every parameter, a linear warm-up over the first epoch's steps multiplied
into a per-step cosine decay to 0 over the whole run (tandem's schedule);
batch 128 with the last partial batch trained; test accuracy after each
epoch.

    python3 train_fashion_resnet.py --epochs 12 --precision bf16 --threads 2 --json
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import ResNet  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(directory, prefix):
    images = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (images.float() / 255.0 - MEAN) / STD
    return x.unsqueeze(1), labels.long()


def augment(images, padding, generator):
    n, _, h, w = images.shape
    flip = torch.rand(n, generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(3), images)
    if padding == 0:
        return images
    padded = F.pad(images, (padding, padding, padding, padding))
    offsets = torch.randint(0, 2 * padding + 1, (n, 2), generator=generator)
    return torch.stack([padded[i, :, r: r + h, c: c + w]
                        for i, (r, c) in enumerate(offsets.tolist())])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--crop", type=int, default=2)
    p.add_argument("--precision", choices=["float32", "bf16"], default="bf16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    generator = torch.Generator().manual_seed(a.seed)
    train_x, train_y = load_split(a.data_dir, "train")
    test_x, test_y = load_split(a.data_dir, "t10k")
    fmt = torch.channels_last
    model = ResNet().to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True,
                          weight_decay=a.weight_decay)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "bf16"
                else torch.autocast("cpu", enabled=False))
    steps_per_epoch = math.ceil(len(train_x) / a.batch_size)
    total = steps_per_epoch * a.epochs
    warmup = round(a.warmup_epochs * steps_per_epoch)

    def lr_at(step):
        factor = (step + 1) / warmup if step < warmup else 1.0
        return 0.5 * a.lr * (1 + math.cos(math.pi * min(1.0, step / total))) * factor

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad(), autocast:
            for i in range(0, len(test_x), 1000):
                x = test_x[i: i + 1000].contiguous(memory_format=fmt)
                correct += (model(x).argmax(1) == test_y[i: i + 1000]).sum().item()
        model.train()
        return correct / len(test_x)

    history = []
    step = 0
    start = time.time()
    for epoch in range(a.epochs):
        order = torch.randperm(len(train_x), generator=generator)
        running, seen = 0.0, 0
        for b in range(steps_per_epoch):
            idx = order[b * a.batch_size: (b + 1) * a.batch_size]
            x = augment(train_x[idx], a.crop, generator).contiguous(memory_format=fmt)
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            with autocast:
                loss = F.cross_entropy(model(x).float(), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
            seen += 1
            step += 1
        history.append({"epoch": epoch + 1, "train_loss": running / seen,
                        "test_accuracy": evaluate(), "seconds": time.time() - start})
        print(json.dumps(history[-1]), file=sys.stderr, flush=True)
    out = {"framework": "pytorch", "torch": torch.__version__, "precision": a.precision,
           "threads": a.threads, "epochs": a.epochs, "history": history}
    print(json.dumps(out) if a.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
