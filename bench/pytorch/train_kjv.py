#!/usr/bin/env python3
"""The gpt recipe of docs/models.md in PyTorch, on the same corpus cut as
`tandem data text --corpus kjv` (Debian's bible-kjv; verse references
stripped; the last 5% held out from the next line break; sequences of
context + 1 bytes every context bytes), for the convergence comparison:
AdamW (PyTorch's defaults but lr, weight decay 0.01 as tandem's adamw), a
per-step cosine decay to 0 over the run, clipping at global norm 1, batch
32, validation (every sequence) after each quarter.

    python3 train_kjv.py --steps 956 --evaluations 4 --precision bf16 --threads 2 --json
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import Gpt  # noqa: E402


def kjv_text():
    raw = subprocess.run(["/usr/bin/bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True).stdout
    lines = [l for l in raw.split(b"\n") if b" " in l]
    return b"".join(l.split(b" ", 1)[1] + b"\n" for l in lines)


def sequences(data, context):
    n = (len(data) - 1) // context if len(data) > context else 0
    t = torch.tensor(list(data[: n * context + 1]), dtype=torch.long)
    x = torch.stack([t[k * context: k * context + context] for k in range(n)])
    y = torch.stack([t[k * context + 1: k * context + context + 1] for k in range(n)])
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=956)
    p.add_argument("--evaluations", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--precision", choices=["float32", "bf16"], default="bf16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = kjv_text()
    cut = int(len(text) * 0.95)
    cut = text.index(b"\n", cut) + 1
    train_x, train_y = sequences(text[:cut], a.context)
    val_x, val_y = sequences(text[cut:], a.context)
    model = Gpt(context=a.context)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "bf16"
                else torch.autocast("cpu", enabled=False))
    history = []
    order = torch.randperm(len(train_x))
    at = 0
    start = time.time()
    per_eval = a.steps // a.evaluations

    def validate():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), autocast:
            for i in range(0, len(val_x), 256):
                logits = model(val_x[i: i + 256]).float()
                total += F.cross_entropy(logits.reshape(-1, 256), val_y[i: i + 256].reshape(-1),
                                         reduction="sum").item()
                count += val_y[i: i + 256].numel()
        model.train()
        return total / count

    running, seen = 0.0, 0
    for step in range(a.steps):
        for group in opt.param_groups:
            group["lr"] = 0.5 * a.lr * (1 + math.cos(math.pi * step / a.steps))
        if at + a.batch_size > len(order):
            order, at = torch.randperm(len(train_x)), 0
        idx = order[at: at + a.batch_size]
        at += a.batch_size
        with autocast:
            logits = model(train_x[idx])
            loss = F.cross_entropy(logits.float().reshape(-1, 256), train_y[idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
        opt.step()
        running += loss.item()
        seen += 1
        if (step + 1) % per_eval == 0:
            v = validate()
            history.append({"step": step + 1, "train_loss": running / seen, "validation_loss": v,
                            "validation_bits_per_byte": v / math.log(2),
                            "seconds": time.time() - start})
            print(json.dumps(history[-1]), file=sys.stderr, flush=True)
            running, seen = 0.0, 0
    out = {"framework": "pytorch", "torch": torch.__version__, "precision": a.precision,
           "threads": a.threads, "train_sequences": len(train_x),
           "validation_sequences": len(val_x), "history": history}
    print(json.dumps(out) if a.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
