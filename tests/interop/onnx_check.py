#!/usr/bin/env python3
"""tandem's ONNX export checked by third-party code (CTest interop.onnx;
exit 77, a skip, without python3-onnx, python3-opencv or numpy).

For the built-in mlp, cnn and resnet and for model files (the examples'
resnet20.toml and one with the other exportable layers: average pooling,
exact and tanh GELU, SiLU, dropout, batch norm on features), with seeded
weights and randomised batch-norm statistics: the export passes
onnx.checker (full check), and OpenCV's DNN module runs it on random inputs
and gives tandem's logits, max|a - b| <= 1e-4 max|b|.

    python3 onnx_check.py --logits build/tests/interop_logits --work /tmp/x
"""
import argparse
import json
import os
import struct
import subprocess
import sys

try:
    import cv2
    import numpy as np
    import onnx
except ImportError as e:
    print(f"{e.name} is not installed: skipped")
    sys.exit(77)

TOLERANCE = 1e-4
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

OTHER_LAYERS = """
name = "other_layers"
input_shape = [12, 12, 3]
[[layers]]
type = "conv2d"
filters = 8
kernel = 3
padding = "same"
activation = "silu"
[[layers]]
type = "avg_pool2d"
size = 2
[[layers]]
type = "batch_norm"
[[layers]]
type = "activation"
function = "gelu"
[[layers]]
type = "residual"
activation = "gelu_tanh"
[[layers.layers]]
type = "conv2d"
filters = 8
kernel = 3
padding = 1
[[layers]]
type = "flatten"
[[layers]]
type = "dropout"
rate = 0.25
[[layers]]
type = "dense"
units = 16
activation = "gelu_tanh"
[[layers]]
type = "batch_norm"
activation = "relu"
[[layers]]
type = "dense"
units = 5
"""


def write_safetensors(path, name, array):
    header = json.dumps({name: {"dtype": "F32", "shape": list(array.shape),
                                "data_offsets": [0, array.nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + array.astype("<f4").tobytes())


def read_logits(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    e = json.loads(data[8:8 + n])["logits"]
    begin, end = e["data_offsets"]
    return np.frombuffer(data[8 + n + begin:8 + n + end], dtype="<f4").reshape(e["shape"])


def run(command):
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{r.stdout}{r.stderr}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logits", required=True, help="the interop_logits helper")
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    other = os.path.join(args.work, "other_layers.toml")
    with open(other, "w") as f:
        f.write(OTHER_LAYERS)
    cases = [("mlp", "", (28, 28, 1)), ("cnn", "", (28, 28, 1)), ("resnet", "", (28, 28, 1)),
             (os.path.join(ROOT, "examples", "models", "resnet20.toml"), "", (28, 28, 1)),
             (other, "", (12, 12, 3))]
    print(f"onnx {onnx.__version__}, OpenCV {cv2.__version__}")
    rng = np.random.default_rng(3)
    ok = True
    for model, settings, shape in cases:
        label = os.path.basename(model)
        stem = os.path.join(args.work, label)
        run([args.logits, model, settings, "export", "2", stem + ".safetensors"])
        run([args.logits, model, settings, "onnx", stem + ".safetensors", stem + ".onnx"])
        proto = onnx.load(stem + ".onnx")
        onnx.checker.check_model(proto, full_check=True)
        x = rng.standard_normal((3,) + shape).astype(np.float32)
        write_safetensors(stem + "-input.safetensors", "input", x)
        run([args.logits, model, settings, "logits", stem + ".safetensors",
             stem + "-input.safetensors", stem + "-logits.safetensors"])
        expected = read_logits(stem + "-logits.safetensors")
        net = cv2.dnn.readNetFromONNX(stem + ".onnx")
        net.setInput(x)
        got = net.forward()
        error = float(np.abs(got - expected).max() / np.abs(expected).max())
        passed = got.shape == expected.shape and error <= TOLERANCE
        ok &= passed
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{label:16s} opset {proto.opset_import[0].version}, {len(proto.graph.node)} nodes "
              f"({', '.join(ops)}): checker ok, OpenCV relative error {error:.1e} "
              f"{'ok' if passed else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
