"""tandem's differentiable functions (the C++ autograd's), for models and
losses written in Python. Operands may be tensors, numpy arrays or numbers;
gradients flow to the tensors that require them."""
from ._tandem import ops as _ops
from ._tandem.ops import *  # noqa: F401,F403

__all__ = [name for name in dir(_ops) if not name.startswith("_")]
