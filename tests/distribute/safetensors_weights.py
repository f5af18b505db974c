"""The fault checks' reading of exported weights (`tandem export` writes
model.safetensors): float32 tensors by name, and the largest relative error
between two such files."""
import json
import struct


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
