"""Linear regression on numpy arrays with tandem tensors and autograd, as
one would write it in PyTorch (fit() takes such arrays too: docs/python.md).
    PYTHONPATH=build/python python3 examples/python/numpy_regression.py"""
import numpy as np

import tandem
from tandem import ops

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 3)).astype(np.float32)
true_w = np.array([[2.0], [-1.0], [0.5]], np.float32)
y = x @ true_w + 0.3

w = tandem.tensor(np.zeros((3, 1), np.float32), requires_grad=True)
b = tandem.tensor(np.zeros((1,), np.float32), requires_grad=True)
for step in range(200):
    loss = ops.mean((x @ w + b - y) ** 2)
    w.grad = None
    b.grad = None
    loss.backward()
    with tandem.no_grad():
        # A plain SGD update through numpy views (they share the tensors' memory).
        w.numpy()[...] -= 0.1 * w.grad.numpy()
        b.numpy()[...] -= 0.1 * b.grad.numpy()
print("learned", w.numpy().ravel(), b.numpy(), "loss", loss.item())
