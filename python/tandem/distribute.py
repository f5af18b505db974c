"""Distribution strategies (tf.distribute's names). A strategy is in effect
inside `with strategy.scope():`; compile() takes the one in effect, and
fit() trains under it: replicas on the virtual CPU devices (or GPUs), the
global batch split between them, gradients all-reduced (or applied through
parameter servers)."""
import contextlib

_current = []


class Strategy:
    name = None

    def __init__(self, **options):
        self._options = {k: v for k, v in options.items() if v is not None}

    def options(self):
        return dict(self._options, strategy=self.name)

    @contextlib.contextmanager
    def scope(self):
        _current.append(self)
        try:
            yield self
        finally:
            _current.pop()

    @property
    def num_replicas_in_sync(self):
        from . import _tandem
        return self._options.get("devices") or _tandem.virtual_cpu_device_count()

    def __repr__(self):
        return f"{type(self).__name__}({self._options})"


class OneDeviceStrategy(Strategy):
    name = "one_device"

    @property
    def num_replicas_in_sync(self):
        return 1


class MirroredStrategy(Strategy):
    """One replica per device of this process (devices: how many virtual CPU
    devices; default one per core)."""
    name = "mirrored"

    def __init__(self, devices=None, threads_per_device=None):
        if devices is not None and (not isinstance(devices, int) or devices < 1):
            raise ValueError(f"devices must be a positive int, got {devices!r}")
        super().__init__(devices=devices, threads_per_device=threads_per_device)


class MultiWorkerMirroredStrategy(MirroredStrategy):
    """Mirrored inside each process started by mpirun, all-reduced across them."""
    name = "multi_worker"


class ParameterServerStrategy(Strategy):
    """Replica threads as workers of parameter-server shards: asynchronous
    (max_staleness None), bounded staleness, or synchronous (0)."""
    name = "parameter_server"

    def __init__(self, devices=None, max_staleness=None):
        super().__init__(devices=devices, max_staleness=max_staleness)


def current_strategy():
    """The strategy whose scope is active, else a OneDeviceStrategy."""
    return _current[-1] if _current else OneDeviceStrategy()
