"""Custom training loops on the step engine (strategy.engine): equivalence
with one device and with a hand-written update, state round trips, errors."""
import os

import numpy as np
import pytest

import tandem


class Net(tandem.nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.a = tandem.nn.Linear(3, hidden, activation="relu")
        self.b = tandem.nn.Linear(hidden, 1)

    def forward(self, x):
        return self.b(self.a(x))


def squared_error(model, x, y):
    e = tandem.ops.reshape(model(x), (-1,)) - y
    return e * e


def batches(count, rows=32, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        x = rng.normal(size=(rows, 3)).astype(np.float32)
        yield x, (x[:, 0] * x[:, 1] - x[:, 2]).astype(np.float32)


def parameters(engine, replica=0):
    return [p.numpy().copy() for p in engine.replica_model(replica).parameters()]


def train(strategy, steps, optimizer=None, seed=7):
    tandem.manual_seed(seed)
    engine = strategy.engine(Net(), optimizer or tandem.optimizers.SGD(0.05, momentum=0.9))
    losses = [engine.step(b, squared_error)["loss"] for b in batches(steps)]
    return engine, losses


def test_mirrored_two_replicas_equal_one_device():
    one, one_losses = train(tandem.distribute.OneDeviceStrategy(), 8)
    two, two_losses = train(tandem.distribute.MirroredStrategy(devices=2), 8)
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    for a, b in zip(parameters(one), parameters(two)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(parameters(two, 0), parameters(two, 1)):
        np.testing.assert_array_equal(a, b)


def test_a_step_is_the_mean_loss_gradient_update():
    tandem.manual_seed(3)
    model = Net()
    reference = [p.numpy().copy() for p in model.parameters()]
    x, y = next(batches(1))
    # The gradient of the batch's mean loss, by autograd on a copy of the model.
    copy = Net()
    for mine, theirs in zip(copy.parameters(), model.parameters()):
        mine.numpy()[...] = theirs.numpy()
    tandem.ops.mean(squared_error(copy, tandem.tensor(x), tandem.tensor(y))).backward()
    expected = [r - 0.1 * p.grad.numpy() for r, p in zip(reference, copy.parameters())]
    engine = tandem.distribute.MirroredStrategy(devices=2).engine(model, tandem.optimizers.SGD(0.1))
    result = engine.step((x, y), squared_error)
    for got, want in zip(parameters(engine), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The gradient norm is measured under clipping only (as metrics.jsonl's null).
    assert result["gradient_norm"] is None
    norm = np.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in copy.parameters()))
    tandem.manual_seed(3)  # the model's initial weights again
    clipped = tandem.distribute.MirroredStrategy(devices=2).engine(
        Net(), tandem.optimizers.SGD(0.1, global_clipnorm=1e6))
    assert clipped.step((x, y), squared_error)["gradient_norm"] == pytest.approx(norm, rel=1e-4)


def test_learning_rate_per_step_and_evaluate_in_row_order():
    engine, _ = train(tandem.distribute.MirroredStrategy(devices=2), 2)
    before = parameters(engine)
    x, y = next(batches(1, seed=9))
    engine.step((x, y), squared_error, learning_rate=0.0)
    for a, b in zip(before, parameters(engine)):
        np.testing.assert_array_equal(a, b)
    outputs = engine.evaluate((x,), lambda model, x: tandem.ops.reshape(model(x), (-1,)))
    with tandem.no_grad():
        single = engine.model(tandem.tensor(x)).numpy().reshape(-1)
    np.testing.assert_allclose(outputs, single, rtol=1e-6)


def test_saved_state_continues_exactly(workdir):
    path = os.path.join(workdir, "loop.tckpt")
    strategy = tandem.distribute.MirroredStrategy(devices=2)
    all_batches = list(batches(12))
    tandem.manual_seed(1)
    straight = strategy.engine(Net(), tandem.optimizers.Adam(1e-2))
    straight_losses = [straight.step(b, squared_error)["loss"] for b in all_batches]

    tandem.manual_seed(1)
    first = strategy.engine(Net(), tandem.optimizers.Adam(1e-2))
    for b in all_batches[:6]:
        first.step(b, squared_error)
    first.save_state(path)
    tandem.manual_seed(99)  # other initial values: the state must replace them
    second = strategy.engine(Net(), tandem.optimizers.Adam(1e-2))
    second.load_state(path)
    resumed = [second.step(b, squared_error, step=6 + i)["loss"] for i, b in enumerate(all_batches[6:])]
    assert resumed == straight_losses[6:]


def test_dict_batches_and_an_exception_in_the_loss_function():
    engine = tandem.distribute.MirroredStrategy(devices=2).engine(Net(), "sgd")
    x, y = next(batches(1))
    result = engine.step({"x": x, "y": y}, lambda model, f: squared_error(model, f["x"], f["y"]))
    assert result["global_rows"] == 32 and np.isfinite(result["loss"])

    def broken(model, x, y):
        raise KeyError("no such column")
    before = parameters(engine)
    with pytest.raises(KeyError, match="no such column"):
        engine.step((x, y), broken)
    with pytest.raises(RuntimeError, match="stopped at an error in an earlier step .KeyError"):
        engine.step((x, y), squared_error)
    # The failed step updated nothing: a new engine goes on from the model.
    for a, b in zip(before, parameters(engine)):
        np.testing.assert_array_equal(a, b)
    again = engine.strategy.engine(engine.model, "sgd")
    assert np.isfinite(again.step((x, y), squared_error)["loss"])


def test_a_new_engine_goes_on_from_a_built_in_models_engine():
    # engine.model was the bare C++ network, which strategy.engine refused.
    model = tandem.models.mlp()
    engine = tandem.distribute.MirroredStrategy(devices=2).engine(model, "sgd")
    assert engine.model is model
    x = np.random.rand(8, 28, 28, 1).astype(np.float32)
    y = (np.arange(8) % 10).astype(np.int32)

    def loss(m, x, y):
        return tandem.ops.softmax_cross_entropy(m(x), y)
    engine.step((x, y), loss)
    with pytest.raises(ZeroDivisionError):
        engine.step((x, y), lambda m, x, y: 1 / 0)
    again = engine.strategy.engine(engine.model, "sgd")
    assert np.isfinite(again.step((x, y), loss)["loss"])


@pytest.mark.parametrize("call, error, message", [
    (lambda e, x, y: e.step((x, y[:5]), squared_error), ValueError, "first dimensions differ"),
    (lambda e, x, y: e.step((x, y), lambda m, x, y: m(x)), tandem.ShapeError, ""),
    (lambda e, x, y: e.step((x, y), lambda m, x, y: "a string"), TypeError, ""),
    (lambda e, x, y: e.step((), squared_error), ValueError, "at least one feature"),
    (lambda e, x, y: e.load_state("/nonexistent/state.tckpt"), OSError, "nonexistent"),
    (lambda e, x, y: e.replica_model(5), IndexError, "out of range"),
])
def test_bad_loop_input_raises(call, error, message):
    engine = tandem.distribute.MirroredStrategy(devices=2).engine(Net(), "sgd")
    x, y = next(batches(1))
    with pytest.raises(error, match=message):
        call(engine, x, y)


@pytest.mark.parametrize("kwargs, error", [
    ({"model": "cnn"}, TypeError),
    ({"optimizer": 0.1}, TypeError),
    ({"accumulation_steps": -1}, ValueError),
    ({"zero": 7}, tandem.Error),
    ({"loss_scale": "sometimes"}, ValueError),
])
def test_bad_engine_settings_are_refused(kwargs, error):
    args = {"model": Net(), "optimizer": "sgd"}
    args.update(kwargs)
    with pytest.raises(error):
        tandem.distribute.MirroredStrategy(devices=2).engine(**args)


def test_a_replicas_model_keeps_its_engine_alive(expect_parameters_outlive_their_owner):
    # The model of replica 1 was the engine's own: with the engine gone it
    # was freed memory (a crash on the next read).
    engine, _ = train(tandem.distribute.MirroredStrategy(devices=2), 1)
    expected = parameters(engine, 1)
    replica = engine.replica_model(1)
    del engine
    expect_parameters_outlive_their_owner(replica, expected)


_PARAMETER_SERVER_LOOP = """
import gc
import time
import numpy as np
import tandem
strategy = tandem.distribute.ParameterServerStrategy(devices=2)
engine = strategy.engine(tandem.models.mlp(), tandem.optimizers.SGD(0.01))
x = np.random.rand(16, 28, 28, 1).astype(np.float32)
y = (np.arange(16) % 10).astype(np.int32)
calls = []


def loss_fn(m, x, y):
    calls.append(1)
    return tandem.ops.softmax_cross_entropy(m(x), y)


for _ in range(20):
    engine.step((x, y), loss_fn)
engine.synchronize()
print("calls", len(calls))


def slow_loss_fn(m, x, y):
    time.sleep(0.2)
    return tandem.ops.softmax_cross_entropy(m(x), y)


for _ in range(2):
    engine.step((x, y), slow_loss_fn)
del engine  # with steps still queued on the workers
gc.collect()
engine = strategy.engine(tandem.models.mlp(), tandem.optimizers.SGD(0.01))
engine.step((x, y), slow_loss_fn)
print("done")  # and exits with a step still queued
"""


def test_parameter_server_loops_survive_queued_steps_deletion_and_exit():
    # The workers run a step's loss function after step() returned: it read
    # the batch layout step() had freed (an abort in synchronize), deleting
    # the engine joined workers waiting for the GIL it held (a deadlock),
    # and so did the interpreter's exit.
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _PARAMETER_SERVER_LOOP], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, MALLOC_PERTURB_="165"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["calls", "40", "done"], done.stdout  # 2 workers x 20
