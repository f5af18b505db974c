"""fit() from Python against `tandem train`, callbacks, early stopping,
Ctrl-C, and bad input."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tandem

CLI = os.environ.get("TANDEM_CLI")
FASHION = "/usr/share/datasets/fashion-mnist"
needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist missing")


def fashion_subset(train, test):
    (xt, yt), (xv, yv) = tandem.data.fashion_mnist()
    return (xt[:train], yt[:train]), (xv[:test], yv[:test])


@needs_fashion
@pytest.mark.skipif(not CLI, reason="TANDEM_CLI (the tandem command) not set")
def test_fit_equals_tandem_train_bit_for_bit(workdir):
    run = os.path.join(workdir, "cli")
    subprocess.run([CLI, "train", "--model", "cnn", "--epochs", "2", "--train-examples", "1024",
                    "--test-examples", "256", "--batch-size", "128", "--seed", "3", "--output", run],
                   check=True, capture_output=True)
    cli = json.load(open(os.path.join(run, "summary.json")))["history"]

    (xt, yt), (xv, yv) = fashion_subset(1024, 256)
    model = tandem.models.cnn(seed=3)
    model.compile(optimizer=tandem.optimizers.SGD(0.05, momentum=0.9), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    train = tandem.data.Dataset.from_tensor_slices((xt, yt)).shuffle(len(xt), seed=3)
    history = model.fit(train, batch_size=128, epochs=2, validation_data=(xv, yv), seed=3)
    assert history.history["loss"] == [e["train_loss"] for e in cli]
    assert history.history["val_loss"] == [e["validation_loss"] for e in cli]
    assert history.history["accuracy"] == [e["train_accuracy"] for e in cli]


def small_model_and_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    model = tandem.Sequential([tandem.layers.Dense(16, activation="relu"), tandem.layers.Dense(2)],
                              input_shape=(4,))
    model.compile(optimizer=tandem.optimizers.SGD(0.1, momentum=0.9), metrics=["accuracy"])
    return model, x, y


def test_callbacks_see_every_epoch_and_step():
    model, x, y = small_model_and_data()
    epochs, steps = [], []
    callback = tandem.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: epochs.append((epoch, dict(logs))),
        on_train_batch_end=lambda batch, logs: steps.append(batch))
    history = model.fit(x, y, batch_size=32, epochs=3, validation_data=(x, y), callbacks=[callback])
    assert [e for e, _ in epochs] == [0, 1, 2]
    assert all({"loss", "accuracy", "val_loss", "val_accuracy"} <= set(logs) for _, logs in epochs)
    assert steps == [0, 1, 2, 3] * 3
    assert history.history["loss"] == [logs["loss"] for _, logs in epochs]


def test_a_nan_validation_loss_is_logged_and_is_no_improvement():
    # Keras passes a NaN validation loss on: it was dropped with every val_
    # key, and callbacks watching val_loss stopped the fit with an error.
    _, x, y = small_model_and_data()
    model = tandem.Sequential([tandem.layers.Dense(2)], input_shape=(4,))  # NaN in, NaN out
    model.compile(optimizer=tandem.optimizers.SGD(0.1), metrics=["accuracy"])
    broken = x.copy()
    broken[0, 0] = np.nan
    seen = []
    stop = tandem.callbacks.EarlyStopping(monitor="val_loss", patience=0)
    log = tandem.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(dict(logs)))
    history = model.fit(x, y, batch_size=32, epochs=3, validation_data=(broken, y),
                        callbacks=[log, stop], verbose=0)
    assert all(np.isnan(logs["val_loss"]) and "val_accuracy" in logs for logs in seen)
    assert len(history.epoch) == 2 and stop.stopped_epoch == 1  # never the first epoch
    assert np.isnan(history.history["val_loss"]).all()


def test_early_stopping_stops():
    model, x, y = small_model_and_data()
    stop = tandem.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=1)
    history = model.fit(x, y, batch_size=32, epochs=10, callbacks=[stop])
    assert len(history.epoch) == 2        # the best at epoch 0, then patience (Keras's)
    assert stop.stopped_epoch == 1


def test_evaluate_and_predict():
    model, x, y = small_model_and_data()
    model.fit(x, y, batch_size=32, epochs=2)
    result = model.evaluate(x, y)
    assert set(result) >= {"loss", "accuracy"} and result["examples"] == 128
    assert model.predict(x[:10]).shape == (10, 2)


def test_numpy_data_is_shuffled_every_epoch_unless_told_not_to():
    # Keras's default (fit(x, y) took the rows in order, every epoch).
    def losses(shuffle):
        model, x, y = small_model_and_data()
        return model.fit(x, y, batch_size=32, epochs=2, shuffle=shuffle,
                         schedule="constant").history["loss"]
    assert losses(True) == losses(True)              # drawn from the seed
    assert losses(True) != losses(False)


def test_a_dataset_transformed_after_batch_is_refused_and_predict_takes_batches():
    # fit took each batch of such a dataset for one example.
    model, x, y = small_model_and_data()
    batched = tandem.data.Dataset.from_tensor_slices((x, y)).batch(16)
    with pytest.raises(ValueError, match="batched and then transformed"):
        model.fit(batched.cache(), epochs=1)
    assert len(model.fit(batched.prefetch(2), epochs=1).epoch) == 1
    # predict stacked the batches: (8, 16, 2) for 128 rows, and ragged
    # ones failed.
    assert model.predict(tandem.data.Dataset.from_tensor_slices(x[:20]).batch(8)).shape == (20, 2)
    assert model.predict(batched.map(lambda a, b: (a, b))).shape == (128, 2)


INTERRUPTED = textwrap.dedent("""
    import os, signal, sys
    import numpy as np, tandem
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    model = tandem.Sequential([tandem.layers.Dense(8, activation="relu"), tandem.layers.Dense(2)],
                              input_shape=(4,), seed=1)
    model.compile(optimizer=tandem.optimizers.SGD(0.1, momentum=0.9), metrics=["accuracy"])
    mode, out = sys.argv[1], sys.argv[2]
    kill = tandem.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: os.kill(os.getpid(), signal.SIGINT)
        if logs["global_step"] == 5 and mode == "interrupt" else None)
    try:
        h = model.fit(x, y, batch_size=32, epochs=3, seed=2, output_dir=out,
                      resume=(mode == "resume"), callbacks=[kill])
    except KeyboardInterrupt:
        print("interrupted"); sys.exit(0)
    print(repr(h.history["loss"][-1]))
""")


def test_ctrl_c_leaves_a_checkpoint_that_resumes_exactly(workdir):
    script = os.path.join(workdir, "fit.py")
    with open(script, "w") as f:
        f.write(INTERRUPTED)
    env = dict(os.environ)

    def run(mode, out):
        r = subprocess.run([sys.executable, script, mode, out], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().splitlines()[-1]

    whole = run("whole", os.path.join(workdir, "a"))
    assert run("interrupt", os.path.join(workdir, "b")) == "interrupted"
    assert os.path.exists(os.path.join(workdir, "b", "checkpoint.tckpt"))
    assert run("resume", os.path.join(workdir, "b")) == whole


# Each bad input with what its error must say.
BAD_INPUTS = {
    "unknown fit option": (lambda m, x, y: m.fit(x, y, epochs=1, batch_size=32, warmup=3),
                           "unknown training option 'warmup'"),
    "wrong option type": (lambda m, x, y: m.fit(x, y, epochs=1, batch_size=32, seed="three"),
                          "option 'seed' must be an integer"),
    "fractional epochs": (lambda m, x, y: m.fit(x, y, epochs=np.float32(2.9), batch_size=32),
                          "option 'epochs' must be an integer"),
    "a bool for a count": (lambda m, x, y: m.fit(x, y, epochs=1, steps_per_epoch=True),
                           "option 'steps_per_epoch' must be an integer"),
    "a number for a bool": (lambda m, x, y: m.fit(x, y, epochs=1, drop_remainder=2),
                            "option 'drop_remainder' must be True or False"),
    "negative seed": (lambda m, x, y: m.fit(x, y, epochs=1, seed=-1),
                      "option 'seed' must be from 0 to 2^64 - 1"),
    "zero epochs": (lambda m, x, y: m.fit(x, y, epochs=0, batch_size=32),
                    "epochs (--epochs) must be at least 1"),
    "negative batch": (lambda m, x, y: m.fit(x, y, epochs=1, batch_size=-4),
                       "batch_size (--batch-size) must be at least 1"),
    "batch larger than data, dropped": (
        lambda m, x, y: m.fit(x, y, epochs=1, batch_size=4096, drop_remainder=True),
        "no step would run"),
    "wrong input shape": (lambda m, x, y: m.fit(x[:, :3], y, epochs=1, batch_size=32),
                          "does not fit weight"),
    "labels out of range": (lambda m, x, y: m.fit(x, y + 5, epochs=1, batch_size=32),
                            "is outside [0, 2)"),
    "float labels for cross-entropy": (
        lambda m, x, y: m.fit(x, y.astype(np.float32) + 0.5, epochs=1, batch_size=32),
        "takes integer class labels, but 'y' is f32"),
    "rows differ": (lambda m, x, y: m.fit(x, y[:-1], epochs=1, batch_size=32),
                    "the first dimensions differ"),
    "unknown schedule": (lambda m, x, y: m.fit(x, y, epochs=1, batch_size=32, schedule="wiggly"),
                         "unknown learning-rate schedule 'wiggly'"),
    "unknown strategy option value": (
        lambda m, x, y: m.fit(x, y, epochs=1, batch_size=32, zero=7),
        "ZeRO stage must be 0 (off), 1 or 2, got 7"),
    "y with a dataset": (
        lambda m, x, y: m.fit(tandem.data.Dataset.from_tensor_slices((x, y)), y),
        "y is given by the dataset"),
    "batched size disagrees": (
        lambda m, x, y: m.fit(tandem.data.Dataset.from_tensor_slices((x, y)).batch(16),
                              batch_size=32),
        "batch_size=32 disagrees"),
    "no data": (lambda m, x, y: m.fit(), "fit/evaluate need data"),
    "validation with weights": (
        lambda m, x, y: m.fit(x, y, batch_size=32, validation_data=(x, y, np.ones(len(y)))),
        "validation_data is a tuple of 3"),
    "string data": (lambda m, x, y: m.fit(np.array(["a", "b"]), np.array([0, 1])),
                    "cannot make a tensor from numpy dtype <U1"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_raises_a_clear_error(name):
    model, x, y = small_model_and_data()
    call, says = BAD_INPUTS[name]
    with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
        call(model, x, y)
    assert says in str(info.value)


COMPILE_ERRORS = {
    "unknown loss": dict(loss="hinge"),
    "optimizer of the wrong type": dict(optimizer=3),
    "unknown optimizer": dict(optimizer="rmsprop"),
    "other precision than built": dict(precision="mixed_bfloat16"),
    "unknown metric": dict(metrics=["f1_score"]),
}


@pytest.mark.parametrize("name", sorted(COMPILE_ERRORS))
def test_bad_compile_raises(name):
    model, x, y = small_model_and_data()
    with pytest.raises((ValueError, TypeError)):
        model.compile(**COMPILE_ERRORS[name])
        model.fit(x, y, epochs=1, batch_size=32)


def test_other_bad_inputs():
    with pytest.raises(TypeError):
        tandem.tensor(["a", "b"])
    with pytest.raises(ValueError, match="contiguous"):
        tandem.from_numpy(np.ones((3, 3), np.float32).T)
    with pytest.raises(ValueError):
        tandem.ops.matmul(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(FileNotFoundError):
        tandem.models.from_file("/no/such/model.toml")
    with pytest.raises(ValueError):
        tandem.nn.Dropout(1.5)
    with pytest.raises(TypeError, match="2-tuple"):
        # A map over (x, y) pairs that returns one value.
        list(tandem.data.Dataset.from_tensor_slices((np.ones((4, 2)), np.ones(4))).map(lambda x, y: x))


def test_a_second_fit_continues_the_optimizer_as_keras_does():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(128, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def model():
        m = tandem.Sequential([tandem.layers.Dense(8, activation="relu"), tandem.layers.Dense(2)],
                              input_shape=(4,), seed=2)
        m.compile(optimizer=tandem.optimizers.Adam(1e-2))
        return m

    # Unshuffled data and a constant rate: two fits of one epoch take the
    # steps of one fit of two epochs exactly when the Adam state carries over.
    fixed = {"batch_size": 32, "schedule": "constant", "shuffle": False}
    whole = model().fit(x, y, epochs=2, **fixed).history["loss"]
    split = model()
    first = split.fit(x, y, epochs=1, **fixed).history["loss"]
    second = split.fit(x, y, epochs=1, **fixed).history["loss"]
    assert first + second == whole
    recompiled = model()
    recompiled.fit(x, y, epochs=1, **fixed)
    recompiled.compile(optimizer=tandem.optimizers.Adam(1e-2))  # a new optimizer
    assert recompiled.fit(x, y, epochs=1, **fixed).history["loss"] != whole[1:]


def test_a_trainers_model_keeps_the_trainer_alive(expect_parameters_outlive_their_owner):
    # The model handed out owned nothing: with the trainer gone, reading it
    # read freed memory.
    from tandem import _tandem
    source = {"kind": "definition", "name": "s", "policy": "float32",
              "text": tandem.layers.definition([tandem.layers.Dense(3)], (4,))}
    options = {"objective": {"loss": "softmax_cross_entropy", "metrics": [], "labels": "y"},
               "strategy": "one_device", "optimizer": {"name": "sgd", "learning_rate": 0.01},
               "epochs": 1, "batch_size": 4, "input_feature": "x"}
    trainer = _tandem.train.Trainer(options, source)
    net = trainer.model()
    expected = [p.numpy().copy() for p in net.parameters()]
    del trainer
    expect_parameters_outlive_their_owner(net, expected)


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="reads struct sigaction as x86-64 Linux lays it out")
def test_fit_gives_back_pythons_sigint_handler_with_its_flags():
    # Restored through signal(), Python's handler lost SA_ONSTACK and gained
    # SA_RESTART: Ctrl-C no longer interrupted a blocking read after a fit.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def handler_and_flags():
        raw = ctypes.create_string_buffer(152)  # handler 8, mask 128, flags 4, restorer 8
        assert libc.sigaction(signal.SIGINT, None, raw) == 0
        return raw.raw[0:8], int.from_bytes(raw.raw[136:140], "little")

    before = handler_and_flags()
    model = tandem.Sequential([tandem.layers.Dense(3)], input_shape=(4,))
    model.compile(optimizer="sgd")
    model.fit(np.random.rand(32, 4).astype(np.float32), np.arange(32) % 3, epochs=1, verbose=0)
    assert handler_and_flags() == before


def test_evaluate_after_fit_takes_what_it_is_asked_for():
    # It reused the last fit's trainer whatever had changed: the old
    # metrics after a new compile(), the old feature names for a dict
    # dataset (an error).
    model, x, y = small_model_and_data()
    model.fit(x, y, batch_size=32, epochs=1)
    first = model.evaluate(x, y)
    model.compile(optimizer="sgd", metrics=["top2_accuracy"])
    again = model.evaluate(x, y)
    assert "top2_accuracy" in again and "accuracy" not in again
    assert again["loss"] == pytest.approx(first["loss"], rel=1e-6)   # the trained weights
    named = tandem.data.Dataset.from_tensor_slices({"image": x, "label": y})
    assert model.evaluate(named)["loss"] == pytest.approx(first["loss"], rel=1e-6)
    weighted = tandem.data.Dataset.from_tensor_slices((x, y, np.ones(len(y), np.float32)))
    with pytest.raises(NotImplementedError, match="sample weights"):   # they were ignored
        model.evaluate(weighted)


def test_oversubscription_can_be_allowed_from_python():
    # The error's advice named a setting Python did not take.
    model, x, y = small_model_and_data()
    cores = os.cpu_count() or 1
    with pytest.raises(tandem.InvalidArgument, match=r"fit\(allow_oversubscription=True\)"):
        model.fit(x, y, batch_size=32, epochs=1, threads_per_device=cores + 1)
    history = model.fit(x, y, batch_size=32, epochs=1, threads_per_device=cores + 1,
                        allow_oversubscription=True)
    assert len(history.epoch) == 1


def test_adams_weight_decay_is_decoupled_as_in_keras():
    # It was PyTorch's Adam's L2 term in the gradient; Keras 3 decays the
    # weights apart from the moments (AdamW's rule).
    def losses(optimizer):
        model, x, y = small_model_and_data()
        model.compile(optimizer=optimizer)
        return model.fit(x, y, batch_size=32, epochs=2, shuffle=False).history["loss"]
    decoupled = losses(tandem.optimizers.AdamW(0.01, weight_decay=0.1))
    assert losses(tandem.optimizers.Adam(0.01, weight_decay=0.1)) == decoupled
    assert losses(tandem.optimizers.Adam(0.01)) != decoupled


def test_compile_takes_the_losss_metrics_and_refuses_class_metrics_for_regression():
    # As tandem train: mae and rmse beside a regression loss (accuracy was
    # the default whatever the loss, and failed at the first batch).
    x = np.random.default_rng(0).random((64, 3), dtype=np.float32)
    y = x.sum(axis=1)
    model = tandem.Sequential([tandem.layers.Dense(1)], input_shape=(3,))
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, y, epochs=1, batch_size=16)
    assert {"mae", "rmse"} <= set(history.history) and "accuracy" not in history.history
    model.compile(optimizer="sgd", loss="mse", metrics=["accuracy"])
    with pytest.raises(ValueError, match="metric 'accuracy' scores classes"):
        model.fit(x, y, epochs=1, batch_size=16)


def test_uint8_inputs_are_read_as_their_values():
    # As Keras casts them: a Dense layer on u8 gave u8, clamped and truncated.
    model = tandem.Sequential([tandem.layers.Dense(3)], input_shape=(4,))
    pixels = np.random.default_rng(1).integers(0, 256, (5, 4), dtype=np.uint8)
    assert np.array_equal(model.predict(pixels), model.predict(pixels.astype(np.float32)))


def test_a_dict_dataset_takes_its_current_two_features(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("x0,x1,y\n" + "".join(f"{i % 3},{i % 5},{i % 2}\n" for i in range(40)))
    rows = tandem.data.Dataset.from_csv(str(path))
    model = tandem.Sequential([tandem.layers.Dense(2)], input_shape=(1,))
    model.compile(optimizer="sgd")
    # Three features: which is the input? (The first two trained x0 on x1.)
    with pytest.raises(ValueError, match="hold 3 features"):
        model.fit(rows, epochs=1, batch_size=8)
    # Mapped to two, renamed: fit reads the names the elements have now.
    pairs = rows.map(lambda e: {"inputs": tandem.ops.reshape(e["x0"], (1,)),
                                "classes": tandem.ops.cast(e["y"], "int32")})
    history = model.fit(pairs, epochs=1, batch_size=8)
    assert history.history["examples"] == [40]


def test_an_optimizer_takes_a_number_for_its_learning_rate():
    assert tandem.optimizers.SGD(np.float32(0.5)).learning_rate == 0.5
    for bad in ("0.1", lambda step: 0.1, True):
        with pytest.raises(TypeError, match="learning_rate must be a number"):
            tandem.optimizers.Adam(learning_rate=bad)


def test_fit_prints_a_line_per_epoch_by_default_as_keras(capsys):
    model, x, y = small_model_and_data()
    model.fit(x, y, batch_size=32, epochs=2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"], lines
    assert " s, loss " in lines[0] and "accuracy" in lines[0], lines
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""
    for bad in (3, -1, True, "yes", None):
        with pytest.raises(ValueError, match="verbose must be 'auto', 0, 1 or 2"):
            model.fit(x, y, epochs=1, verbose=bad)
