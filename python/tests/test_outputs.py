"""What fit writes (metrics.jsonl, summary.json, TensorBoard, traces, read
by `tandem report`) and the callbacks that save: TensorBoard,
ModelCheckpoint, BackupAndRestore; weights in safetensors."""
import glob
import json
import os
import subprocess

import numpy as np
import pytest

import tandem

CLI = os.environ.get("TANDEM_CLI")


def model_and_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    tandem.manual_seed(1)
    model = tandem.Sequential([tandem.layers.Dense(16, activation="relu"), tandem.layers.Dense(2)],
                              input_shape=(4,), seed=1)
    model.compile(optimizer=tandem.optimizers.SGD(0.1, momentum=0.9), metrics=["accuracy"])
    return model, x, y


def test_fit_writes_the_run_directory_as_tandem_train_does(workdir):
    model, x, y = model_and_data()
    run = os.path.join(workdir, "run")
    history = model.fit(x, y, batch_size=32, epochs=2, validation_data=(x[:64], y[:64]),
                        output_dir=run, trace_steps=(2, 3), seed=4)
    lines = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    steps = [line for line in lines if line.get("type") == "step"]
    epochs = [line for line in lines if line.get("type") == "epoch"]
    assert len(steps) == 16 and len(epochs) == 2
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert [e["train_loss"] for e in summary["history"]] == history.history["loss"]
    assert "monitor" in summary
    assert glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*"))
    assert os.path.exists(os.path.join(run, "trace.json"))
    assert os.path.exists(os.path.join(run, "checkpoint.tckpt"))
    if CLI:
        report = subprocess.run([CLI, "report", run], capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, report.stderr


def test_monitor_off_and_metrics_every(workdir):
    model, x, y = model_and_data()
    quiet = os.path.join(workdir, "quiet")
    model.fit(x, y, batch_size=32, epochs=1, output_dir=quiet, monitor=False)
    assert not os.path.exists(os.path.join(quiet, "metrics.jsonl"))
    assert os.path.exists(os.path.join(quiet, "summary.json"))
    sparse = os.path.join(workdir, "sparse")
    model.fit(x, y, batch_size=32, epochs=1, output_dir=sparse, metrics_every=4, tensorboard=False)
    steps = [line for line in open(os.path.join(sparse, "metrics.jsonl")) if json.loads(line)["type"] == "step"]
    assert len(steps) == 2
    assert not os.path.exists(os.path.join(sparse, "tensorboard"))


def test_tensorboard_callback_without_a_run_directory(workdir):
    model, x, y = model_and_data()
    logs = os.path.join(workdir, "logs")
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[tandem.callbacks.TensorBoard(logs)])
    assert glob.glob(os.path.join(logs, "events.out.tfevents.*"))


def test_model_checkpoint_keeps_the_best_weights_and_they_load(workdir):
    model, x, y = model_and_data()
    path = os.path.join(workdir, "best.safetensors")
    seen = []
    model.fit(x, y, batch_size=32, epochs=3, validation_data=(x[:64], y[:64]),
              callbacks=[tandem.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=True),
                         tandem.callbacks.LambdaCallback(
                             on_epoch_end=lambda e, logs: seen.append(logs["val_loss"]))])
    assert os.path.exists(path)
    other, _, _ = model_and_data(seed=1)
    report = other.load_weights(path)
    assert report["missing"] == [] and report["unexpected"] == []
    assert other.evaluate(x[:64], y[:64])["loss"] == pytest.approx(min(seen), rel=1e-5)
    # Into a folder that does not exist yet, as Keras's makes it.
    numbered = os.path.join(workdir, "ckpt", "w{epoch:02d}.safetensors")
    model.fit(x, y, batch_size=32, epochs=2, callbacks=[tandem.callbacks.ModelCheckpoint(numbered)])
    assert sorted(os.listdir(os.path.join(workdir, "ckpt"))) == ["w01.safetensors", "w02.safetensors"]


def test_weights_round_trip_through_pytorch_names(workdir):
    class Net(tandem.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tandem.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    path = os.path.join(workdir, "net.safetensors")
    net.save_weights(path)
    other = Net()
    other.load_weights(path)
    for a, b in zip(net.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="fc"):
        tandem.Sequential([tandem.layers.Dense(2)], input_shape=(4,)).load_weights(path)
    with pytest.raises(OSError):
        other.load_weights(os.path.join(workdir, "missing.safetensors"))


def test_backup_and_restore_resumes_a_stopped_fit(workdir):
    backup = os.path.join(workdir, "backup")
    model, x, y = model_and_data()
    whole = model.fit(x, y, batch_size=32, epochs=3, seed=2).history["loss"]

    model, x, y = model_and_data()

    class StopAfterFirstEpoch(tandem.callbacks.Callback):
        def on_epoch_end(self, epoch, logs):
            if epoch == 0:
                raise_interrupt()

    def raise_interrupt():
        import signal
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=32, epochs=3, seed=2,
                  callbacks=[tandem.callbacks.BackupAndRestore(backup), StopAfterFirstEpoch()])
    assert os.path.exists(os.path.join(backup, "checkpoint.tckpt"))
    model, x, y = model_and_data()
    resumed = model.fit(x, y, batch_size=32, epochs=3, seed=2,
                        callbacks=[tandem.callbacks.BackupAndRestore(backup)]).history["loss"]
    assert resumed == whole[1:]
    assert not os.path.exists(os.path.join(backup, "checkpoint.tckpt"))


@pytest.mark.parametrize("kwargs, error", [
    (dict(trace_steps=(3, 1), output_dir="x"), ValueError),
    (dict(trace_steps=(1, 2)), ValueError),
    (dict(metrics_every=0, output_dir="y"), ValueError),
    (dict(tensorboard=True, output_dir="z"), ValueError),
    (dict(monitor="yes", output_dir="w"), TypeError),
])
def test_bad_output_options(workdir, kwargs, error):
    model, x, y = model_and_data()
    if "output_dir" in kwargs:
        kwargs["output_dir"] = os.path.join(workdir, kwargs["output_dir"])
    with pytest.raises(error):
        model.fit(x, y, batch_size=32, epochs=1, **kwargs)


def test_callbacks_that_disagree_with_fit_are_refused(workdir):
    model, x, y = model_and_data()
    with pytest.raises(ValueError, match="output_dir"):
        model.fit(x, y, batch_size=32, epochs=1, output_dir=os.path.join(workdir, "a"),
                  callbacks=[tandem.callbacks.BackupAndRestore(os.path.join(workdir, "b"))])
