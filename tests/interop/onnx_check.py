#!/usr/bin/env python3
"""tandem's ONNX export checked by third-party code (CTest interop.onnx;
exit 77, a skip, without python3-onnx, python3-opencv or numpy).

For the built-in mlp, cnn and resnet and for model files (the examples'
resnet20.toml and one with the other exportable layers: average pooling,
exact and tanh GELU, SiLU, dropout, batch norm on features), with seeded
weights and randomised batch-norm statistics: the export passes
onnx.checker (full check), and OpenCV's DNN module runs it on random inputs
and gives tandem's logits, max|a - b| <= 1e-4 max|b|.

For dense and layer_norm on images (each pixel's channels) and batch norm
on sequences (their features), the graph runs in the NumPy interpreter below
(OpenCV 4.6's MatMul takes matrices only).

For the token models (gpt and the example gpt_small.toml): OpenCV 4.6 cannot
run a Gather whose indices are the graph's input, and Debian 12 has no other
ONNX runtime (onnx 1.12 predates onnx.reference), so the graph runs in the
small float64 NumPy interpreter below, written from the operator
specifications, on full-length and shorter sequences; OpenCV is still tried
and what it says is printed.

    python3 onnx_check.py --logits build/tests/interop_logits --work /tmp/x
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

try:
    import cv2
    import numpy as np
    import onnx
    import onnx.numpy_helper
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

# Layers on the last axis of images (dense and layer_norm on each pixel's
# channels; W != C so that the wrong axis cannot fit), and batch norm on
# sequences' features: their exports acted on W and on T. Run in the NumPy
# interpreter (OpenCV 4.6's MatMul takes matrices only).
PIXEL_LAYERS = """
name = "pixel_layers"
input_shape = [4, 5, 3]
[[layers]]
type = "dense"
units = 7
activation = "relu"
[[layers]]
type = "layer_norm"
[[layers]]
type = "flatten"
[[layers]]
type = "dense"
units = 4
"""

SEQUENCE_BATCH_NORM = """
name = "sequence_batch_norm"
input_shape = [6, 5]
[[layers]]
type = "batch_norm"
activation = "relu"
[[layers]]
type = "flatten"
[[layers]]
type = "dense"
units = 3
"""


def write_safetensors(path, name, array):
    dtype, code = ("I32", "<i4") if array.dtype.kind == "i" else ("F32", "<f4")
    data = array.astype(code).tobytes()
    header = json.dumps({name: {"dtype": dtype, "shape": list(array.shape),
                                "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def _slice(data, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * data.ndim
    for s, e, a, k in zip(starts, ends, axes, steps):
        index[int(a)] = slice(int(s), int(e), int(k))
    return data[tuple(index)]


def _reshape(data, shape):
    shape = [data.shape[i] if d == 0 else int(d) for i, d in enumerate(shape)]
    return data.reshape(shape)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_erf = np.vectorize(math.erf)

# name -> f(inputs, attributes); the operators of opset 13 that token models use.
OPERATORS = {
    "Identity": lambda x, a: x[0],
    "Gather": lambda x, a: np.take(x[0], x[1], axis=a.get("axis", 0)),
    "Shape": lambda x, a: np.array(x[0].shape, dtype=np.int64),
    "Slice": lambda x, a: _slice(*x),
    "Concat": lambda x, a: np.concatenate(x, axis=a["axis"]),
    "Reshape": lambda x, a: _reshape(*x),
    "Transpose": lambda x, a: np.transpose(x[0], a.get("perm")),
    "MatMul": lambda x, a: np.matmul(x[0], x[1]),
    "Gemm": lambda x, a: x[0] @ (x[1].T if a.get("transB") else x[1]) + (x[2] if len(x) > 2 else 0),
    "Add": lambda x, a: x[0] + x[1],
    "Sub": lambda x, a: x[0] - x[1],
    "Mul": lambda x, a: x[0] * x[1],
    "Div": lambda x, a: x[0] / x[1],
    "Sqrt": lambda x, a: np.sqrt(x[0]),
    "Tanh": lambda x, a: np.tanh(x[0]),
    "Erf": lambda x, a: _erf(x[0]),
    "Sigmoid": lambda x, a: 1 / (1 + np.exp(-x[0])),
    "Relu": lambda x, a: np.maximum(x[0], 0),
    "ReduceMean": lambda x, a: x[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1))),
    "Softmax": lambda x, a: _softmax(x[0], a.get("axis", -1)),
    "Flatten": lambda x, a: x[0].reshape(int(np.prod(x[0].shape[:a.get("axis", 1)])), -1),
    "BatchNormalization": lambda x, a: _batch_norm(x, a.get("epsilon", 1e-5)),
}


def _batch_norm(x, epsilon):
    """Inference batch norm over axis 1 (ONNX's): x, scale, bias, mean, var."""
    shape = (1, -1) + (1,) * (x[0].ndim - 2)
    scale, bias, mean, var = (v.reshape(shape) for v in x[1:5])
    return (x[0] - mean) / np.sqrt(var + epsilon) * scale + bias


def interpret(proto, feeds):
    """The graph's outputs in float64 (integers stay integers)."""
    values = {}
    for t in proto.graph.initializer:
        v = onnx.numpy_helper.to_array(t)
        values[t.name] = v.astype(np.float64) if v.dtype.kind == "f" else v
    values.update(feeds)
    for node in proto.graph.node:
        if node.op_type not in OPERATORS:
            raise SystemExit(f"the NumPy interpreter has no {node.op_type}")
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        inputs = [values[name] if name else None for name in node.input]
        values[node.output[0]] = OPERATORS[node.op_type](inputs, attributes)
    return [values[o.name] for o in proto.graph.output]


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


def export_checked(logits, model, settings, stem):
    """Seeded weights, their ONNX graph through onnx.checker (full check)."""
    run([logits, model, settings, "export", "2", stem + ".safetensors"])
    run([logits, model, settings, "onnx", stem + ".safetensors", stem + ".onnx"])
    proto = onnx.load(stem + ".onnx")
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logits", required=True, help="the interop_logits helper")
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    other = os.path.join(args.work, "other_layers.toml")
    with open(other, "w") as f:
        f.write(OTHER_LAYERS)
    # resnet pools globally: its graph takes images of any size (declared
    # 28 x 28, a resnet trained on 32 x 32 RGB images was refused).
    cases = [("mlp", "", (28, 28, 1)), ("cnn", "", (28, 28, 1)), ("resnet", "", (28, 28, 1)),
             ("resnet", "channels=3", (32, 32, 3)),
             (os.path.join(ROOT, "examples", "models", "resnet20.toml"), "", (28, 28, 1)),
             (other, "", (12, 12, 3))]
    token_cases = [("gpt", "layers=2,width=32,heads=4,context=16", 16),
                   (os.path.join(ROOT, "examples", "models", "gpt_small.toml"), "", 128)]
    interpreted_cases = []
    for text, shape in ((PIXEL_LAYERS, (4, 5, 3)), (SEQUENCE_BATCH_NORM, (6, 5))):
        path = os.path.join(args.work, text.split('"')[1] + ".toml")
        with open(path, "w") as f:
            f.write(text)
        interpreted_cases.append((path, shape))
    print(f"onnx {onnx.__version__}, OpenCV {cv2.__version__}")
    rng = np.random.default_rng(3)
    ok = True
    for model, settings, shape in cases:
        label = os.path.basename(model)
        stem = os.path.join(args.work, label)
        proto = export_checked(args.logits, model, settings, stem)
        if model == "resnet":  # height and width symbolic, channels fixed
            dims = proto.graph.input[0].type.tensor_type.shape.dim
            declared = [d.dim_param or d.dim_value for d in dims]
            if declared != ["N", "H", "W", shape[2]]:
                print(f"resnet {settings}: input declared {declared} FAILED")
                ok = False
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
    for model, shape in interpreted_cases:
        label = os.path.basename(model)
        stem = os.path.join(args.work, label)
        proto = export_checked(args.logits, model, "", stem)
        x = rng.standard_normal((3,) + shape).astype(np.float32)
        write_safetensors(stem + "-input.safetensors", "input", x)
        run([args.logits, model, "", "logits", stem + ".safetensors",
             stem + "-input.safetensors", stem + "-logits.safetensors"])
        expected = read_logits(stem + "-logits.safetensors")
        (got,) = interpret(proto, {"input": x.astype(np.float64)})
        error = (float(np.abs(got - expected).max() / np.abs(expected).max())
                 if got.shape == expected.shape else math.inf)
        passed = error <= TOLERANCE
        ok &= passed
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{label:16s} opset {proto.opset_import[0].version}, {len(proto.graph.node)} nodes "
              f"({', '.join(ops)}): checker ok, NumPy interpreter relative error {error:.1e} "
              f"{'ok' if passed else 'FAILED'}")
    for model, settings, context in token_cases:
        label = os.path.basename(model)
        stem = os.path.join(args.work, label)
        proto = export_checked(args.logits, model, settings, stem)
        errors = []
        for length in (context, context // 2 + 1):  # full and shorter sequences
            tokens = rng.integers(0, 256, (3, length)).astype(np.int32)
            write_safetensors(stem + "-input.safetensors", "input", tokens)
            run([args.logits, model, settings, "logits", stem + ".safetensors",
                 stem + "-input.safetensors", stem + "-logits.safetensors"])
            expected = read_logits(stem + "-logits.safetensors")
            (got,) = interpret(proto, {"input": tokens.astype(np.int64)})
            errors.append(float(np.abs(got - expected).max() / np.abs(expected).max())
                          if got.shape == expected.shape else math.inf)
        passed = max(errors) <= TOLERANCE
        ok &= passed
        try:
            net = cv2.dnn.readNetFromONNX(stem + ".onnx")
            net.setInput(tokens.astype(np.float32))
            net.forward()
            opencv = "OpenCV ran it"
        except cv2.error as e:
            opencv = "OpenCV cannot run it: " + getattr(e, "err", str(e)).strip()[:80]
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{label:16s} opset {proto.opset_import[0].version}, {len(proto.graph.node)} nodes "
              f"({', '.join(ops)}): checker ok, NumPy interpreter relative error "
              f"{' / '.join(f'{e:.1e}' for e in errors)} (T = {context} / {context // 2 + 1}) "
              f"{'ok' if passed else 'FAILED'}; {opencv}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
