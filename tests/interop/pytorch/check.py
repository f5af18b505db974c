#!/usr/bin/env python3
"""tandem's safetensors weights against PyTorch's own models (CTest
interop.pytorch; exit 77, a skip, where PyTorch is not installed).

Both directions, for mlp, cnn, resnet and gpt:
- tandem -> PyTorch: tandem's seeded weights (interop_logits export,
  batch-norm statistics randomised) load with load_state_dict(strict=True)
  into the same architecture written in PyTorch, and its logits match
  tandem's on the same input.
- PyTorch -> tandem: a PyTorch-initialised model (batch-norm statistics and
  affine parameters randomised) saved by the small writer below, loaded by
  tandem, gives PyTorch's logits; and `tandem train --init-from` on one
  batch reports PyTorch's loss for its first step (train-mode batch norm).
Logits agree when max|a - b| <= 1e-5 * max|b|.

Works with Debian's PyTorch 1.13 (no numpy needed) and PyTorch 2.

    python3 check.py --logits build/tests/interop_logits --tandem build/tandem --work /tmp/x
"""
import argparse
import json
import os
import struct
import subprocess
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("PyTorch is not installed: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "pytorch"))
import models  # noqa: E402  (bench/pytorch/models.py: Gpt, ResNet)

TOLERANCE = 1e-5
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=DTYPES[e["dtype"]]) if raw else torch.empty(
            0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist()) if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Mlp(nn.Module):
    """tandem's mlp: Flatten (index 0), Dense 784-512-512-10 (1, 2, 3)."""

    def __init__(self):
        super().__init__()
        for i, (a, b) in enumerate([(784, 512), (512, 512), (512, 10)], start=1):
            self.add_module(str(i), nn.Linear(a, b))

    def forward(self, x):  # (N, 1, 28, 28): one channel, so NCHW flattens as NHWC
        x = x.flatten(1)
        x = F.relu(getattr(self, "1")(x))
        x = F.relu(getattr(self, "2")(x))
        return getattr(self, "3")(x)


class Cnn(nn.Module):
    """tandem's cnn: conv 0, pool 1, conv 2, pool 3, flatten 4, dense 5, 6."""

    def __init__(self):
        super().__init__()
        self.add_module("0", nn.Conv2d(1, 32, 3, padding=1))
        self.add_module("2", nn.Conv2d(32, 64, 3, padding=1))
        self.add_module("5", nn.Linear(3136, 128))
        self.add_module("6", nn.Linear(128, 10))

    def forward(self, x):
        x = F.max_pool2d(F.relu(getattr(self, "0")(x)), 2)
        x = F.max_pool2d(F.relu(getattr(self, "2")(x)), 2)
        # tandem is channels-last: its Flatten sees (H, W, C).
        x = x.permute(0, 2, 3, 1).flatten(1)
        return getattr(self, "6")(F.relu(getattr(self, "5")(x)))


GPT = dict(layers=2, width=64, heads=4, context=32)
CASES = {
    "mlp": ("", Mlp),
    "cnn": ("", Cnn),
    "resnet": ("depth=20", lambda: models.ResNet(depth=20)),
    "gpt": (",".join(f"{k}={v}" for k, v in GPT.items()), lambda: models.Gpt(**GPT, use_sdpa=False)),
}


def example_input(name, generator):
    if name == "gpt":
        return torch.randint(0, 256, (3, GPT["context"]), generator=generator, dtype=torch.int32)
    return torch.randn(4, 28, 28, 1, generator=generator)  # tandem's NHWC


def torch_logits(model, name, x):
    model.eval()
    with torch.no_grad():
        return model(x.long() if name == "gpt" else x.permute(0, 3, 1, 2).contiguous())


def compare(what, tandem, reference):
    error = (tandem - reference).abs().max().item() / reference.abs().max().item()
    ok = error <= TOLERANCE
    print(f"{what:44s} relative error {error:.2e} {'ok' if ok else 'FAILED'}")
    return ok


def run(command):
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def tandem_logits(args, name, settings, weights, x):
    input_path = os.path.join(args.work, f"{name}-input.safetensors")
    output_path = os.path.join(args.work, f"{name}-logits.safetensors")
    write_safetensors(input_path, {"input": x})
    run([args.logits, name, settings, "logits", weights, input_path, output_path])
    return read_safetensors(output_path)["logits"]


def write_idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def first_step_loss(args, name, settings, weights, model):
    """tandem's reported loss for one step on a 32-image batch (the whole
    data set, so the shuffle order does not matter) against PyTorch's."""
    g = torch.Generator().manual_seed(11)
    pixels = torch.randint(0, 256, (32, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (32,), generator=g, dtype=torch.uint8)
    images_path = os.path.join(args.work, "step-images.idx")
    labels_path = os.path.join(args.work, "step-labels.idx")
    write_idx(images_path, 0x803, [32, 28, 28], bytes(pixels.reshape(-1).tolist()))
    write_idx(labels_path, 0x801, [32], bytes(labels.tolist()))
    spec = os.path.join(args.work, "step.toml")
    with open(spec, "w") as f:
        f.write(f'format = "idx"\nimages = "{images_path}"\nlabels = "{labels_path}"\n')
    out = os.path.join(args.work, f"{name}-run")
    command = [args.tandem, "train", "--model", name, "--data", spec, "--batch-size", "32",
               "--epochs", "1", "--threads", "1", "--quiet", "--init-from", weights,
               "--output", out]
    if settings:
        command += ["--model-options", settings]
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    run(command)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f if '"type":"step"' in line]
    model.train()
    x = (pixels.float() * (1.0 / 255.0)).reshape(32, 1, 28, 28)
    with torch.no_grad():
        reference = F.cross_entropy(model(x), labels.long()).item()
    loss = steps[0]["loss"]
    error = abs(loss - reference) / abs(reference)
    ok = error <= TOLERANCE
    print(f"{name + ': first step loss, PyTorch init':44s} tandem {loss:.6f} PyTorch "
          f"{reference:.6f} ({error:.1e}) {'ok' if ok else 'FAILED'}")
    return ok


def randomise(model, generator):
    """Batch-norm statistics and affine parameters that are not the defaults."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5, generator=generator)
                m.running_var.uniform_(0.5, 2.0, generator=generator)
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.uniform_(-0.2, 0.2, generator=generator)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logits", required=True, help="the interop_logits helper")
    p.add_argument("--tandem", required=True, help="the tandem command")
    p.add_argument("--work", required=True, help="a scratch directory")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(1)
    print(f"PyTorch {torch.__version__}")
    ok = True
    for name, (settings, build) in CASES.items():
        g = torch.Generator().manual_seed(5)
        x = example_input(name, g)
        # tandem -> PyTorch
        exported = os.path.join(args.work, f"{name}-tandem.safetensors")
        run([args.logits, name, settings, "export", "3", exported])
        model = build()
        model.load_state_dict(read_safetensors(exported), strict=True)
        ok &= compare(f"{name}: PyTorch with tandem's weights",
                      tandem_logits(args, name, settings, exported, x), torch_logits(model, name, x))
        # PyTorch -> tandem
        torch.manual_seed(7)
        model = build()
        randomise(model, g)
        weights = os.path.join(args.work, f"{name}-torch.safetensors")
        write_safetensors(weights, model.state_dict())
        ok &= compare(f"{name}: tandem with PyTorch's weights",
                      tandem_logits(args, name, settings, weights, x), torch_logits(model, name, x))
        if name != "gpt":
            ok &= first_step_loss(args, name, settings, weights, model)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
