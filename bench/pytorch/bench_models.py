#!/usr/bin/env python3
"""Times PyTorch training steps of tandem's reference models (models.py) on
synthetic in-memory data, for side-by-side comparison with tandem.

    python3 bench_models.py --model gpt|resnet [--threads 1|2] [--device cpu|cuda]
        [--precision float32|bf16] [--batch-size N] [--steps S] [--warmup W] [--json]

gpt: AdamW lr 6e-4 (PyTorch's defaults otherwise: betas 0.9/0.999, eps 1e-8,
weight decay 0.01, as tandem's adamw), next-token cross entropy on random
tokens. resnet: SGD momentum 0.9 lr 0.05, cross entropy on random 28x28x1
images (made NHWC, used as NCHW, channels_last by default) with random labels.
A few distinct batches (--batches) are cycled, so the loss falls as the model
memorises them: a convergence check, not a data set.

Each timed step (zero_grad, forward, loss, backward, optimizer step) is
measured alone; examples/s (and tokens/s for gpt) is reported as the median
over the timed steps with the min and max, and as the timed steps' examples
over their total time ("over_steps", tandem bench train's statistic, which
compare.py uses; each step ends with loss.item(), which waits for a GPU). Works with PyTorch 1.13 and 2.x. On cuda, bf16 is
autocast to bf16 on the GPU and float32 uses PyTorch's default (TF32 off for
matmuls, on for cuDNN convolutions).
"""
import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import HAS_SDPA, Gpt, ResNet, count_parameters  # noqa: E402

DEFAULT_BATCH = {"gpt": 32, "resnet": 128}
DEFAULT_WIDTH = {"gpt": 256, "resnet": 16}
DEFAULT_LR = {"gpt": 6e-4, "resnet": 0.05}


def blas_info():
    """What BLAS this torch uses. PyPI's wheels link MKL statically
    (BLAS_INFO=mkl). Debian's torch says BLAS_INFO=generic and uses whatever
    libblas.so.3 the Debian alternatives point to, so for it the libraries
    mapped into the process after a matmul tell (NumPy's own bundled OpenBLAS,
    mapped when torch imports NumPy, is left out)."""
    config = torch.__config__.show()
    match = re.search(r"BLAS_INFO=([^,\s]+)", config)
    build = match.group(1) if match else "unknown"
    a = torch.randn(32, 32)
    (a @ a).sum().item()
    loaded = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                name = os.path.basename(path).lower()
                if (path.startswith("/") and ("blas" in name or "mkl" in name)
                        and "numpy" not in path and "scipy_openblas" not in name
                        and "cublas" not in name
                        and path not in loaded):
                    loaded.append(path)
    except OSError:
        pass
    if build != "generic":
        kind = {"open": "openblas"}.get(build, build)
    else:
        # The library that answers libblas.so.3 is the one whose sgemm_ torch
        # calls (an OpenBLAS mapped only behind liblapack.so.3 is not).
        blas3 = [os.path.realpath(p) for p in loaded if os.path.basename(p).startswith("libblas.so")]
        names = " ".join(blas3 or loaded).lower()
        if "openblas" in names:
            kind = "openblas"
        elif "mkl" in names:
            kind = "mkl"
        elif "blis" in names:
            kind = "blis"
        elif "/blas/" in names:
            kind = "reference"
        else:
            kind = "generic"
    return {"blas": kind, "blas_info": build, "blas_libraries": loaded,
            "mkldnn": torch.backends.mkldnn.is_available()}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("gpt", "resnet"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("float32", "bf16"), default="float32")
    p.add_argument("--batch-size", type=int, help="default: gpt 32, resnet 128")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batches", type=int, default=4, help="distinct synthetic batches cycled")
    p.add_argument("--lr", type=float, help="default: gpt 6e-4, resnet 0.05")
    p.add_argument("--width", type=int, help="default: gpt 256, resnet 16")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (default mode) before the warm-up steps")
    p.add_argument("--kernel-table", metavar="FILE",
                   help="after the timed steps, profile one more step (torch.profiler) and "
                        "write its kernels' device time per kernel name to FILE")
    g = p.add_argument_group("gpt")
    g.add_argument("--vocabulary", type=int, default=256)
    g.add_argument("--context", type=int, default=128, help="also the sequence length")
    g.add_argument("--layers", type=int, default=6)
    g.add_argument("--heads", type=int, default=8)
    g.add_argument("--attention", choices=("auto", "sdpa", "manual"), default="auto",
                   help="auto: scaled_dot_product_attention where torch has it")
    r = p.add_argument_group("resnet")
    r.add_argument("--depth", type=int, default=20)
    r.add_argument("--image-size", type=int, default=28)
    r.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                   help="channels_last memory format for the model and images (default on)")
    a = p.parse_args(argv)
    if a.batch_size is None:
        a.batch_size = DEFAULT_BATCH[a.model]
    if a.width is None:
        a.width = DEFAULT_WIDTH[a.model]
    if a.lr is None:
        a.lr = DEFAULT_LR[a.model]
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.threads < 1 or a.batches < 1:
        p.error("steps, batch-size, threads and batches must be >= 1, warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this PyTorch sees no GPU")
    if a.attention == "sdpa" and not HAS_SDPA:
        p.error(f"torch {torch.__version__} has no scaled_dot_product_attention")
    return a


def build(a):
    """Model, optimizer, loss function and the list of (input, target) batches."""
    g = torch.Generator().manual_seed(a.seed)
    if a.model == "gpt":
        use_sdpa = {"auto": None, "sdpa": True, "manual": False}[a.attention]
        model = Gpt(vocabulary=a.vocabulary, context=a.context, layers=a.layers,
                    width=a.width, heads=a.heads, use_sdpa=use_sdpa)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
        batches = []
        for _ in range(a.batches):
            tokens = torch.randint(0, a.vocabulary, (a.batch_size, a.context + 1), generator=g)
            batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

        def loss_fn(logits, target):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    else:
        model = ResNet(depth=a.depth, width=a.width, channels=1, classes=10)
        fmt = torch.channels_last if a.channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
        batches = []
        for _ in range(a.batches):
            nhwc = torch.randn(a.batch_size, a.image_size, a.image_size, 1, generator=g)
            images = nhwc.permute(0, 3, 1, 2).contiguous(memory_format=fmt)  # NCHW
            labels = torch.randint(0, 10, (a.batch_size,), generator=g)
            batches.append((images, labels))
        loss_fn = F.cross_entropy
    return model, opt, loss_fn, batches


def run(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, opt, loss_fn, batches = build(a)
    if a.device == "cuda":
        # Module.cuda() moves each Parameter's data in place, so the optimizer
        # (no state yet) holds the moved ones. (Rebuilding it from
        # opt.defaults fails on PyTorch 2.11, whose AdamW defaults hold a key
        # its constructor refuses.)
        model = model.cuda()
        batches = [(x.cuda(), y.cuda()) for x, y in batches]
    model.train()
    if a.compile:
        model = torch.compile(model)
    if a.precision == "bf16":
        autocast = lambda: torch.autocast(device_type=a.device, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    losses, times = [], []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        loss = step(i)
        elapsed = time.perf_counter() - start
        losses.append(loss)
        if i >= a.warmup:
            times.append(elapsed)

    if a.kernel_table:
        write_kernel_table(a, step)

    # "over_steps" is tandem bench train's statistic (the timed steps' work
    # over their total time); the median of per-step rates runs higher
    # when a few steps are slow.
    def stats(per_step):
        values = [per_step / t for t in times]
        return {"median": statistics.median(values), "min": min(values), "max": max(values),
                "over_steps": per_step * len(times) / sum(times)}

    result = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        **blas_info(),
        "model": a.model,
        "parameters": count_parameters(model),
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "precision": a.precision,
        "batch_size": a.batch_size,
        "steps": a.steps,
        "warmup": a.warmup,
        "lr": a.lr,
        "optimizer": type(opt).__name__,
        "compiled": a.compile,
        "examples_per_s": stats(a.batch_size),
        "step_ms": {"median": 1e3 * statistics.median(times),
                    "min": 1e3 * min(times), "max": 1e3 * max(times)},
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses,
    }
    if a.model == "gpt":
        result["tokens_per_s"] = stats(a.batch_size * a.context)
        result["config"] = {"vocabulary": a.vocabulary, "context": a.context, "layers": a.layers,
                            "width": a.width, "heads": a.heads,
                            "attention": "sdpa" if model.blocks[0].attention.use_sdpa else "manual"}
    else:
        result["config"] = {"depth": a.depth, "width": a.width, "image_size": a.image_size,
                            "channels_last": a.channels_last}
    return result


def write_kernel_table(a, step):
    """One more step under torch.profiler: device time per kernel name."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if a.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step(a.warmup + a.steps)
        if a.device == "cuda":
            torch.cuda.synchronize()
    key = "self_device_time_total" if a.device == "cuda" else "self_cpu_time_total"
    with open(a.kernel_table, "w") as f:
        f.write(prof.key_averages().table(sort_by=key, row_limit=60, max_name_column_width=90))


def report(r):
    e = r["examples_per_s"]
    line = (f"{r['model']} torch {r['torch']} ({r['blas']}) {r['precision']} "
            f"threads={r['threads']} batch={r['batch_size']} params={r['parameters']:,}: "
            f"{e['median']:.1f} examples/s [{e['min']:.1f}-{e['max']:.1f}]")
    if "tokens_per_s" in r:
        t = r["tokens_per_s"]
        line += f", {t['median']:.0f} tokens/s [{t['min']:.0f}-{t['max']:.0f}]"
    line += (f", step {r['step_ms']['median']:.1f} ms; loss {r['loss_first']:.4f} -> "
             f"{r['loss_last']:.4f} over {r['warmup'] + r['steps']} steps")
    print(line)


def main(argv=None):
    a = parse_args(argv)
    r = run(a)
    if a.json:
        print(json.dumps(r))
    else:
        report(r)


if __name__ == "__main__":
    main()
