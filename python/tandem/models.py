"""The built-in models, model files and Keras-style Sequential models.

Each returns a tandem.Model: a network built by tandem's C++ code from a
description it can rebuild (checkpoints record it, as `tandem train` does),
with compile/fit/evaluate/predict."""
import os

from . import _tandem, layers as _layers
from .training import Trainable


class Model(Trainable):
    """A network tandem builds from a description (a built-in name and its
    settings, or a model file's text), with Keras's training methods.
    Calling it runs the network's forward."""

    def __init__(self, source, network):
        from .distribute import active_strategy
        self._source = source
        self._network = network
        self._tandem_policy = source["policy"]
        self._tandem_strategy = active_strategy()

    def __call__(self, x):
        return self._network(x)

    def _model_source(self, policy, seed):
        return dict(self._source, first=self._network)

    def _adopt(self, trainer):
        self._network = trainer.model()

    def _network_for_predict(self):
        return self._network

    @property
    def network(self):
        """The C++ module (a tandem.nn.Module)."""
        return self._network

    def parameters(self):
        return self._network.parameters()

    def named_parameters(self):
        return self._network.named_parameters()

    def parameter_count(self):
        return self._network.parameter_count()

    def summary(self):
        return self._network.summary()

    def save_weights(self, path, dtype=None):
        """The weights in a safetensors file (PyTorch's names and layouts)."""
        self._network.save_weights(path, dtype)

    def load_weights(self, path, strict=True):
        """Loads a safetensors file into the network (see tandem.nn.Module.load_weights)."""
        return self._network.load_weights(path, strict)

    def __repr__(self):
        return f"tandem.Model({self._source['name']}, {self.parameter_count()} parameters)"


def _policy(precision):
    return precision or _tandem.global_policy()


def builtin(name, settings="", seed=0, precision=None):
    """A built-in model by name (cnn, mlp, gpt, resnet) with settings "key=value,..."."""
    policy = _policy(precision)
    settings = _tandem.models.canonical_settings(name, settings)
    network = _tandem.models.build(name, settings, seed, policy)
    return Model({"kind": "builtin", "name": name, "settings": settings, "policy": policy,
                  "seed": seed}, network)


def _settings(**values):
    return ",".join(f"{k}={v}" for k, v in values.items() if v is not None)


def cnn(seed=0, precision=None):
    """DESIGN.md's reference CNN for 28x28x1 images and 10 classes."""
    return builtin("cnn", "", seed, precision)


def mlp(seed=0, precision=None):
    return builtin("mlp", "", seed, precision)


def gpt(layers=None, width=None, heads=None, context=None, vocabulary=None, dropout=None,
        seed=0, precision=None):
    """A GPT over byte tokens (docs/models.md lists the defaults)."""
    return builtin("gpt", _settings(layers=layers, width=width, heads=heads, context=context,
                                    vocabulary=vocabulary, dropout=dropout), seed, precision)


def resnet(depth=None, width=None, classes=None, channels=None, seed=0, precision=None):
    """A CIFAR-style ResNet (depth 6n+2; ResNet-20 by default)."""
    return builtin("resnet", _settings(depth=depth, width=width, classes=classes,
                                       channels=channels), seed, precision)


def from_definition(text, source="model.toml", seed=0, precision=None):
    """A model from a model file's text (docs/model_files.md)."""
    policy = _policy(precision)
    network = _tandem.models.from_definition(text, source, seed, policy)
    name = _tandem.models.input_of_definition(text, source)[2]
    return Model({"kind": "definition", "name": name, "text": text, "policy": policy,
                  "seed": seed}, network)


def from_file(path, seed=0, precision=None):
    """A model file (TOML, docs/model_files.md)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return from_definition(text, os.path.basename(path), seed, precision)


def Sequential(layers, input_shape, input_dtype="f32", name="sequential", seed=0, precision=None):
    """Keras's Sequential over tandem.layers (shapes inferred from input_shape,
    per example: (28, 28, 1) for images, (T,) with input_dtype "i32" for tokens)."""
    text = _layers.definition(layers, input_shape, input_dtype, name)
    source = f"{name}.toml"
    try:
        return from_definition(text, source, seed, precision)
    except ValueError as e:
        # The definition is ours, not a file of the user's: the layer's
        # index names the place ("sequential.toml:5: layer 0 ..." named a
        # file and line nobody wrote).
        message = str(e)
        if not message.startswith(source + ":"):
            raise
        raise type(e)("Sequential: " + message.split(": ", 1)[1]) from None
