"""A training loop of one's own on tandem's step engine (tf.distribute's
strategy.run, or a PyTorch loop over DDP): a residual MLP fits a smooth
function of the plane on 2 mirrored devices; each step splits the batch
between the replicas, all-reduces the gradients and updates both alike.
Exits with status 1 unless the model learned.

    PYTHONPATH=build/python python3 examples/python/custom_loop.py"""
import sys

import numpy as np

import tandem
from tandem import ops


class ResidualMlp(tandem.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = tandem.nn.Linear(2, 64, activation="relu")
        self.hidden = tandem.nn.Linear(64, 64, activation="relu")
        self.out = tandem.nn.Linear(64, 1)

    def forward(self, x):
        h = self.inp(x)
        return self.out(h + self.hidden(h))


def batch(rng, n):
    x = rng.uniform(-2, 2, (n, 2)).astype(np.float32)
    return x, (np.sin(1.5 * x[:, 0]) * np.cos(x[:, 1])).astype(np.float32)


def squared_error(model, x, y):
    """Per-example losses of this replica's rows."""
    error = ops.reshape(model(x), (-1,)) - y
    return error * error


rng = np.random.default_rng(1)
strategy = tandem.distribute.MirroredStrategy(devices=2)
engine = strategy.engine(ResidualMlp(), tandem.optimizers.Adam(3e-3))
x_val, y_val = batch(rng, 1000)


def validation_error():
    return float(engine.evaluate((x_val, y_val), squared_error).mean())


before = validation_error()
for step in range(400):
    result = engine.step(batch(rng, 64), squared_error,
                         learning_rate=3e-3 * 0.5 * (1 + np.cos(np.pi * step / 400)))  # cosine decay
    if step % 100 == 0:
        print(f"step {step}: training loss {result['loss']:.4f}")
after = validation_error()
print(f"validation mean squared error: {before:.4f} before, {after:.4f} after 400 steps on "
      f"{engine.num_replicas_in_sync} replicas")
sys.exit(0 if after < 0.2 * before else 1)
