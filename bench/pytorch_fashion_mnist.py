#!/usr/bin/env python3
"""PyTorch reference run of DESIGN.md's recipe on Fashion-MNIST (SGD momentum
0.9, lr 0.05, batch 128, reshuffled each epoch), to compare accuracy with
`tandem train`. Needs Debian's python3-torch; run with /usr/bin/python3.
Usage: pytorch_fashion_mnist.py MODEL EPOCHS SEED [THREADS]
"""
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pytorch_baseline import make_model  # noqa: E402

DIR = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(f"{DIR}/{name}.gz") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(name):
    x = idx(name).astype(np.float32) / 255.0
    return torch.from_numpy((x - 0.2860) / 0.3530).unsqueeze(1)


def main():
    model_name, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    torch.manual_seed(seed)
    xtr, ytr = images("train-images-idx3-ubyte"), torch.from_numpy(idx("train-labels-idx1-ubyte").astype(np.int64))
    xte, yte = images("t10k-images-idx3-ubyte"), torch.from_numpy(idx("t10k-labels-idx1-ubyte").astype(np.int64))
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 128):
            rows = perm[i:i + 128]
            opt.zero_grad()
            loss = loss_fn(model(xtr[rows]), ytr[rows])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        print(f"epoch {epoch + 1} test acc {acc:.4f} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
