"""A model written in Python (a tandem.nn.Module subclass with its own
forward over tandem.ops), trained with fit() on two replicas; its backward
is tandem's C++ autograd.
    PYTHONPATH=build/python python3 examples/python/custom_model.py"""
import numpy as np

import tandem
from tandem import nn, ops


class ResidualMlp(nn.Module):
    def __init__(self, features=20, width=64, classes=3):
        super().__init__()
        self.inp = nn.Linear(features, width, activation="relu")
        self.hidden = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        h = self.inp(x)
        h = self.norm(h + ops.gelu(self.hidden(h)))
        return self.out(h)


rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 20)).astype(np.float32)
y = np.argmax(x[:, :3] + 0.5 * x[:, 3:6], axis=1).astype(np.int32)

with tandem.distribute.MirroredStrategy(devices=2).scope():
    model = ResidualMlp()
    model.compile(optimizer=tandem.optimizers.Adam(0.003), metrics=["accuracy"])
history = model.fit(x, y, batch_size=128, epochs=5, validation_data=(x[:512], y[:512]), verbose=1)
print("final validation accuracy:", history.history["val_accuracy"][-1])
