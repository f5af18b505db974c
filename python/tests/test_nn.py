"""Models written in Python: registration, replicas on threads, errors."""
import os
import traceback

import numpy as np
import pytest

import tandem
from tandem import nn, ops


class Mlp(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(6, hidden)
        self.scale = nn.Parameter(np.ones((hidden,), np.float32))
        self.fc2 = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.fc2(ops.gelu(self.fc1(x)) * self.scale)


def regression_data(n=256):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, :3] * 2.0 - x[:, 3:]).astype(np.float32)
    return x, y


def test_parameters_registered_in_pytorch_order():
    # A module's own parameters first, then each sub-module's, each in
    # assignment order (PyTorch's named_parameters order).
    m = Mlp()
    names = [name for name, _ in m.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert m.parameter_count() == 6 * 16 + 16 + 16 + 16 * 3 + 3
    out = m(np.zeros((2, 6), np.float32))
    assert out.shape == (2, 3)
    assert "Linear" in m.summary()


def test_init_without_super_is_refused():
    class Broken(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.ones(2, np.float32))

    with pytest.raises((RuntimeError, TypeError)):
        Broken()


def test_backward_through_a_python_model():
    m = Mlp()
    loss = ops.mean(m(np.ones((4, 6), np.float32)))
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())


def fit_losses(strategy, epochs=3):
    tandem.manual_seed(11)
    x, y = regression_data()
    with strategy.scope():
        m = Mlp()
        m.compile(optimizer=tandem.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])
    history = m.fit(x, y, batch_size=64, epochs=epochs, seed=5)
    return history.history["loss"], [p.numpy().copy() for p in m.parameters()]


def test_mirrored_two_devices_equals_one_device():
    one_losses, one_params = fit_losses(tandem.distribute.OneDeviceStrategy())
    two_losses, two_params = fit_losses(tandem.distribute.MirroredStrategy(devices=2))
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(one_params, two_params):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert one_losses[-1] < one_losses[0]


class Failing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        if x.shape[0] > 0:
            raise KeyError("boom in forward")
        return self.fc(x)


def test_exception_in_forward_on_a_replica_reaches_the_caller():
    x, y = regression_data(64)
    with tandem.distribute.MirroredStrategy(devices=2).scope():
        m = Failing()
        m.compile(loss="mse", metrics=[])
    with pytest.raises(KeyError, match="boom in forward") as info:
        m.fit(x, y, batch_size=32, epochs=1)
    frames = "".join(traceback.format_tb(info.value.__traceback__))
    assert "in forward" in frames


def test_keras_sequential_matches_its_model_file():
    model = tandem.Sequential([tandem.layers.Flatten(), tandem.layers.Dense(8, activation="relu"),
                               tandem.layers.Dense(3)], input_shape=(2, 3))
    assert [n for n, _ in model.named_parameters()] == ["1.weight", "1.bias", "2.weight", "2.bias"]
    assert model(np.zeros((5, 2, 3), np.float32)).shape == (5, 3)
    with pytest.raises(ValueError, match=r"^Sequential: layer 1 \(conv2d\): needs a \(height, width, channels\)"):
        tandem.Sequential([tandem.layers.Dense(8), tandem.layers.Conv2D(4, 3)], input_shape=(6,))


def test_builtin_models_build():
    assert tandem.models.cnn().parameter_count() == 421642
    g = tandem.models.gpt(layers=1, width=32, heads=2, context=16)
    assert g(np.zeros((2, 16), np.int32)).shape == (2, 16, 256)
    with pytest.raises(ValueError):
        tandem.models.gpt(width=30, heads=4)


def test_the_global_policy_is_the_packages_default_for_the_layers_it_builds():
    """Keras's set_global_policy: layers built after it take it; float32
    again once it is reset; an unknown name is refused."""
    assert tandem.global_policy() == "float32"
    x = np.ones((3, 4), np.float32)
    tandem.set_global_policy("mixed_bfloat16")
    try:
        assert tandem.global_policy() == "mixed_bfloat16"
        assert tandem.nn.Linear(4, 2)(x).dtype == tandem.bfloat16
    finally:
        tandem.set_global_policy("float32")
    assert tandem.nn.Linear(4, 2)(x).dtype == tandem.float32
    with pytest.raises(tandem.InvalidArgument, match="unknown precision policy 'float64'"):
        tandem.set_global_policy("float64")


class Double(nn.Module):
    def forward(self, x):
        return x * 2.0


def test_a_sequential_keeps_its_python_modules():
    # Only the C++ half was kept: once the Python object was collected, the
    # Sequential called a pure virtual forward.
    import gc
    s = nn.Sequential(Double(), nn.ReLU())
    added = nn.Sequential()
    added.add(Double())
    gc.collect()
    x = np.array([[1.0, -2.0]], np.float32)
    assert s(x).numpy().tolist() == [[2.0, 0.0]]
    assert added(x).numpy().tolist() == [[2.0, -4.0]]


def test_assigning_a_module_or_parameter_again_replaces_it():
    # PyTorch's rule. The module was kept twice (two fc.weight, save_weights
    # failed) and the parameter refused as registered twice.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.fc = nn.Linear(2, 3)
            self.scale = nn.Parameter(np.ones((3,), np.float32))
            self.scale = nn.Parameter(np.full((3,), 2.0, np.float32))

        def forward(self, x):
            return self.fc(x) * self.scale

    net = Net()
    assert sorted(name for name, _ in net.named_parameters()) == ["fc.bias", "fc.weight", "scale"]
    assert net.parameter_count() == 2 * 3 + 3 + 3
    assert net(np.ones((1, 2), np.float32)).shape == (1, 3)
    assert dict(net.named_parameters())["scale"].numpy().tolist() == [2.0, 2.0, 2.0]


def test_buffers_deleted_and_cleared_attributes_and_parameter_identity_as_pytorch(workdir):
    # A buffer registered again was kept twice (save_weights refused it); a
    # sub-module deleted or set to None stayed among the parameters; the
    # Parameter assigned was not the one registered (its .grad stayed None).
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("stat", tandem.tensor([1.0]))
            self.register_buffer("stat", tandem.tensor([2.0]))
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)
            self.w = nn.Parameter(np.ones((2,), np.float32))
            self.head = nn.Linear(2, 1)

        def forward(self, x):
            return self.head(x * self.w)

    net = Net()
    assert [(n, b.numpy().tolist()) for n, b in net.named_buffers()] == [("stat", [2.0])]
    del net.b
    net.a = None
    assert [n for n, _ in net.named_parameters()] == ["w", "head.weight", "head.bias"]
    net.save_weights(os.path.join(workdir, "net.safetensors"))
    w = net.w
    assert isinstance(w, nn.Parameter)
    net(np.ones((3, 2), np.float32)).sum().backward()
    assert w.grad is not None and w.grad.shape == (2,)
    net.stat = tandem.tensor([3.0])
    assert dict(net.named_buffers())["stat"].numpy().tolist() == [3.0]
    with pytest.raises(TypeError, match="cannot assign Tensor as parameter 'w'"):
        net.w = tandem.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="cannot assign int as module 'head'"):
        net.head = 5


def test_keras_named_layers_take_keras_defaults():
    # They took PyTorch's (momentum 0.9 in Keras's terms, epsilon 1e-5).
    text = tandem.layers.definition([tandem.layers.BatchNormalization(),
                                     tandem.layers.LayerNormalization()], (4,))
    batch_norm, layer_norm = text.split("[[layers]]")[1:]
    assert "momentum = 0.01" in batch_norm and "eps = 0.001" in batch_norm
    assert "eps = 0.001" in layer_norm


def test_weights_written_through_numpy_reach_a_mixed_precision_model():
    # Its cached bf16 weights kept the old values: the forward ignored the
    # write (the biases alone changed).
    model = tandem.models.mlp(precision="mixed_bfloat16")
    x = np.ones((2, 28, 28, 1), np.float32)
    model(x)
    for p in model.parameters():
        p.numpy()[...] = 0
    assert float(np.abs(model(x).numpy()).max()) == 0.0
    kept = [(p, p.numpy()) for p in model.parameters()]  # kept across a forward
    model(x)
    for p, array in kept:
        array[...] = 0.01
        p.mark_modified()
    # The weights take part (the biases alone, f32, would give 0.01).
    assert float(np.abs(model(x).numpy()).max()) > 1.0


def test_a_corrupt_weights_file_is_not_a_missing_one(workdir):
    # "key 'dtype' not found" in a corrupt header raised FileNotFoundError.
    import json
    import struct
    header = json.dumps({"a": {"shape": [1], "data_offsets": [0, 4]}}).encode()
    path = os.path.join(workdir, "corrupt.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    model = tandem.models.mlp()
    with pytest.raises(tandem.IoError) as info:
        model.load_weights(path)
    assert not isinstance(info.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        model.load_weights(os.path.join(workdir, "absent.safetensors"))
    with pytest.raises(FileNotFoundError):
        tandem.data.Dataset.from_spec(os.path.join(workdir, "absent.toml"))
