"""Layers and models (PyTorch's torch.nn, with Keras's layer names too).

Two ways to define a model:

- Subclass tandem.nn.Module and write forward(self, x) with tandem.ops and
  the layers below (explicit sizes, as in PyTorch). Parameters and
  sub-modules assigned as attributes are registered (PyTorch's names and order).
- List Keras-style layers (tandem.layers.Dense, Conv2D, ...) in
  tandem.Sequential(layers, input_shape=...): the shapes are inferred and
  the model is built by the same code as a model file (docs/model_files.md).

Both train with .compile() and .fit() (tandem/training.py).
"""
from . import _tandem
from ._tandem import Tensor
from .training import Trainable

_C = _tandem.nn


class Parameter(Tensor):
    """A tensor that is a module's trainable parameter (requires_grad)."""

    def __init__(self, data, dtype=None):
        super().__init__(data, dtype=dtype, requires_grad=True)


class Module(_C.Module, Trainable):
    """The base of models written in Python (torch.nn.Module).

    Call super().__init__() first, then assign Parameters and sub-modules as
    attributes, and define forward(self, x). Parameter names and order are
    PyTorch's: the module's own parameters, then each sub-module's, each in
    assignment order ("fc1.weight"). Replicas of the model (under a
    strategy with several devices) are built by calling the class again with
    the constructor's arguments, so a constructor must build the same
    architecture each time; the replicas then receive replica 0's values.
    forward may run on several replica threads at once (each holding the
    GIL while it runs Python); tandem's ops release the GIL while they compute.
    """

    def __new__(cls, *args, **kwargs):
        from .distribute import active_strategy
        self = super().__new__(cls)
        object.__setattr__(self, "_tandem_recipe", (args, kwargs))
        object.__setattr__(self, "_tandem_strategy", active_strategy())
        return self

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_tandem_ready", True)

    def _check_ready(self):
        if not self.__dict__.get("_tandem_ready", False):
            raise RuntimeError(
                f"{type(self).__name__}.__init__ must call super().__init__() before "
                "assigning parameters or modules")

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._check_ready()
            self._register_parameter(name, value)  # this very tensor: it sees the gradients
        elif isinstance(value, _C.Module):
            self._check_ready()
            self._register_module(name, value)
        elif self.__dict__.get("_tandem_ready") and self._registered_as(name):
            # PyTorch's rules for a registered name given something else.
            kind = self._registered_as(name)
            if value is None:
                self._unregister(name)
            elif kind == "buffer" and isinstance(value, Tensor):
                self._register_buffer(name, value)
            else:
                raise TypeError(f"cannot assign {type(value).__name__} as {kind} '{name}' "
                                "(a tandem.nn.Parameter, a Module or None)")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if self.__dict__.get("_tandem_ready"):
            self._unregister(name)
        super().__delattr__(name)

    def register_buffer(self, name, tensor):
        """State saved with the model but not trained (e.g. running statistics)."""
        self._check_ready()
        self._register_buffer(name, tensor)
        super().__setattr__(name, tensor)

    def forward(self, x):  # noqa: D401 - documented in the class
        raise NotImplementedError(f"{type(self).__name__} does not define forward(self, x)")

    def _replica_builder(self):
        args, kwargs = self.__dict__["_tandem_recipe"]
        cls = type(self)
        first = [self]

        def build():
            if first:
                return first.pop()
            return cls(*args, **kwargs)
        return build

    def _model_source(self, policy, seed):
        return {"kind": "python", "name": type(self).__name__, "policy": policy,
                "build": self._replica_builder()}


class init:
    """In-place initialisers for float32 parameters (torch.nn.init's names),
    drawing from numpy's generator (seed it, or pass one, for repeatability)."""

    @staticmethod
    def _array(tensor):
        import numpy as np
        if tensor.dtype != _tandem.dtype.float32:
            raise TypeError(f"initialisers write float32 tensors, got {tensor.dtype}")
        array = tensor.numpy()
        if not isinstance(array, np.ndarray):
            raise TypeError("the tensor has no host memory to write")
        return array

    @staticmethod
    def normal_(tensor, mean=0.0, std=1.0, generator=None):
        import numpy as np
        a = init._array(tensor)
        a[...] = (generator or np.random.default_rng()).normal(mean, std, a.shape)
        return tensor

    @staticmethod
    def uniform_(tensor, a=0.0, b=1.0, generator=None):
        import numpy as np
        x = init._array(tensor)
        x[...] = (generator or np.random.default_rng()).uniform(a, b, x.shape)
        return tensor

    @staticmethod
    def zeros_(tensor):
        init._array(tensor)[...] = 0.0
        return tensor

    @staticmethod
    def ones_(tensor):
        init._array(tensor)[...] = 1.0
        return tensor


Linear = _C.Linear
Conv2d = _C.Conv2d
MaxPool2d = _C.MaxPool2d
AvgPool2d = _C.AvgPool2d
GlobalAvgPool = _C.GlobalAvgPool
Flatten = _C.Flatten
ReLU = _C.ReLU
GELU = _C.GELU
Dropout = _C.Dropout
LayerNorm = _C.LayerNorm
BatchNorm = _C.BatchNorm
Embedding = _C.Embedding
CausalSelfAttention = _C.CausalSelfAttention
Sequential = _C.Sequential
