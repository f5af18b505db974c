"""Run by test_mpi.py under `mpirun -np 2` or `tandem launch --nproc-per-node
2` (multi-worker) and alone
(mirrored over 2 devices): the same Python model trained by fit and by a
custom loop; prints a JSON line of the losses and writes its final
weights. MODE: fit | fit2 (two fits: the second continues the first's
momentum) | loop | fail (rank 1's forward raises)."""
import json
import os
import sys

import numpy as np

import tandem

mode, strategy_name, out = sys.argv[1], sys.argv[2], sys.argv[3]
# Which launcher started this process is tandem's business (worker_index).
RANK = tandem.distribute.MultiWorkerMirroredStrategy(devices=1).worker_index if strategy_name == "multi_worker" else 0


class Net(tandem.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = tandem.nn.Linear(6, 24, activation="relu")
        self.b = tandem.nn.Linear(24, 3)

    def forward(self, x):
        if mode == "fail" and RANK == 1:
            raise ValueError("injected failure in rank 1's forward")
        return self.b(self.a(x))


rng = np.random.default_rng(0)
x = rng.normal(size=(384, 6)).astype(np.float32)
y = (np.argmax(x[:, :3], axis=1)).astype(np.int32)
strategy = (tandem.distribute.MultiWorkerMirroredStrategy(devices=1) if strategy_name == "multi_worker"
            else tandem.distribute.MirroredStrategy(devices=2))
tandem.manual_seed(3)
with strategy.scope():
    model = Net()
if mode in ("fit", "fit2", "fail"):
    model.compile(optimizer=tandem.optimizers.SGD(0.1, momentum=0.9), metrics=["accuracy"])
    run_dir = os.path.join(out, strategy_name, f"run{RANK}")
    history = model.fit(x, y, batch_size=64, epochs=2, seed=5, output_dir=run_dir)
    losses = history.history["loss"]
    if mode == "fit2":
        losses += model.fit(x, y, batch_size=64, epochs=1, seed=6).history["loss"]
else:
    engine = strategy.engine(model, tandem.optimizers.Adam(1e-2))

    def loss_fn(m, xs, ys):
        return tandem.ops.softmax_cross_entropy(m(xs), ys)
    # Each process takes its rows of every global batch of 64 (the engine's contract).
    shares = strategy.num_workers
    losses = []
    for step in range(12):
        rows = slice(step * 32 % 384, step * 32 % 384 + 32)
        bx, by = x[rows], y[rows]
        if shares > 1:
            half = len(bx) // shares
            bx, by = bx[RANK * half:(RANK + 1) * half], by[RANK * half:(RANK + 1) * half]
        losses.append(engine.step((bx, by), loss_fn)["loss"])
if strategy.is_chief:
    model.save_weights(os.path.join(out, f"{strategy_name}.safetensors"))
print(json.dumps({"rank": RANK, "losses": losses}), flush=True)
