"""tandem: data-parallel training on every device of a machine, from Python.

The step runs in tandem's C++ engine; Python describes the work. See
docs/python.md for the API and how it maps to tf.distribute, Keras and
PyTorch.
"""
import atexit as _atexit
import contextlib as _contextlib

from ._tandem import (Tensor, dtype, from_numpy, from_dlpack, cuda_built, cuda_device_count,
                      virtual_cpu_device_count, set_virtual_cpu_device_count, set_global_policy,
                      global_policy, manual_seed, Error, InvalidArgument, ShapeError, IoError,
                      FileNotFound, CommError, PeerFailed, Timeout, Diverged, NotImplemented)
from . import ops, nn, layers, data, models, distribute, optimizers, callbacks
from .models import Model, Sequential
from ._tandem import is_grad_enabled, set_grad_enabled


def _end_threads_at_exit():
    """Ends open dataset passes and engines while their threads can still
    take the GIL: once the interpreter finalizes, a pipeline or
    parameter-server thread finishing a Python call would be ended in the
    middle of it (the process aborted at exit)."""
    from . import _tandem
    _tandem.data._end_open_passes()
    _tandem.engine._close_open_engines()


_atexit.register(_end_threads_at_exit)

float32 = dtype.float32
bfloat16 = dtype.bfloat16
float16 = dtype.float16
int32 = dtype.int32
uint8 = dtype.uint8
int64 = dtype.int64


def tensor(data, dtype=None, requires_grad=False, device=None):
    """A tensor copying `data` (numpy arrays, nested lists, numbers).

    The dtype defaults to float32 for floating values and int32 for integers
    (as tf.constant; labels and indices are int32), int64 when asked for;
    float16 arrays stay float16 and uint8 arrays uint8.
    """
    return Tensor(data, dtype=dtype, requires_grad=requires_grad, device=device)


@_contextlib.contextmanager
def no_grad():
    """Ops inside record no graph (evaluation, manual updates)."""
    previous = is_grad_enabled()
    set_grad_enabled(False)
    try:
        yield
    finally:
        set_grad_enabled(previous)


def _name_the_rank_of_uncaught_errors():
    """Under mpirun every process prints its own traceback; a first line
    saying which rank failed (as the tandem command's errors do) tells them
    apart. mpirun then ends the other ranks."""
    import sys
    from ._tandem import engine as _engine
    if _engine.launched_process_count() <= 1:
        return
    rank, previous = _engine.launched_rank(), sys.excepthook

    def hook(kind, value, traceback):
        if not issubclass(kind, KeyboardInterrupt):
            print(f"tandem: error on rank {rank}: {kind.__name__}: {value}".splitlines()[0],
                  file=sys.stderr, flush=True)
        previous(kind, value, traceback)
    sys.excepthook = hook


_name_the_rank_of_uncaught_errors()
