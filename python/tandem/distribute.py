"""Distribution strategies (tf.distribute's names). A strategy is in effect
inside `with strategy.scope():`; compile() takes the one in effect, and
fit() trains under it: replicas on the virtual CPU devices (or GPUs), the
global batch split between them, gradients all-reduced (or applied through
parameter servers). strategy.engine(model, optimizer) gives the same step
engine to a training loop of one's own (Engine.step)."""
import contextlib

import numpy as _np

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

    @property
    def num_workers(self):
        """Processes that take part (mpirun's or tandem launch's under the multi-worker strategy, else 1)."""
        return 1

    @property
    def worker_index(self):
        return 0

    @property
    def is_chief(self):
        """Whether this process writes the run's files (worker 0)."""
        return self.worker_index == 0

    def engine(self, model, optimizer="sgd", loss_scale=None, accumulation_steps=1, zero=0,
               seed=0, sync_every=0):
        """The step engine for a custom training loop: replicas of `model` (a
        tandem.nn.Module or tandem.Model; replica 0 is the model itself, the
        others built alike and given its values), each with the optimizer,
        gradients synchronised by this strategy. loss_scale: None (dynamic
        under mixed_float16, none otherwise), "dynamic" or a number;
        accumulation_steps: micro-batches per step; zero: the ZeRO stage
        (0, 1, 2); seed: dropout streams; sync_every: local SGD's period."""
        from . import _tandem, optimizers
        if isinstance(optimizer, str):
            optimizer = optimizers.get(optimizer)
        if not isinstance(optimizer, optimizers.Optimizer):
            raise TypeError(f"optimizer must be a tandem.optimizers optimizer or a name, got "
                            f"{type(optimizer).__name__}")
        if not hasattr(model, "_model_source"):
            raise TypeError(f"model must be a tandem.nn.Module or tandem.Model, got {type(model).__name__}")
        for name, value in (("accumulation_steps", accumulation_steps), ("zero", zero),
                            ("seed", seed), ("sync_every", sync_every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        source = model._model_source(model._policy(), seed)
        native = _tandem.engine.Engine(
            dict(self.options(), optimizer=optimizer.config(), loss_scale=loss_scale,
                 accumulation_steps=accumulation_steps, zero=zero, seed=seed,
                 sync_every=sync_every),
            source)
        return Engine(native, self, model)

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
    """Mirrored inside each process started by mpirun (`mpirun -np N python3
    train.py`) or tandem launch (`tandem launch --nproc-per-node N -- python3
    train.py`), all-reduced across them. Every process runs the same script;
    fit() shards the data between them and only the chief (worker 0) writes
    the run's files. A failure on one process ends every process with an
    error naming it."""
    name = "multi_worker"

    @property
    def num_workers(self):
        from . import _tandem
        return max(1, _tandem.engine.launched_process_count())

    @property
    def worker_index(self):
        from . import _tandem
        return max(0, _tandem.engine.launched_rank())

    @property
    def num_replicas_in_sync(self):
        return self.num_workers * super().num_replicas_in_sync


class ParameterServerStrategy(Strategy):
    """Replica threads as workers of parameter-server shards: asynchronous
    (max_staleness None), bounded staleness, or synchronous (0)."""
    name = "parameter_server"

    def __init__(self, devices=None, max_staleness=None):
        super().__init__(devices=devices, max_staleness=max_staleness)


class Engine:
    """A strategy's step engine (distribute::Engine), for training loops of
    one's own. Each step() takes this process's rows of a global batch,
    splits them between the replicas, runs loss_fn on each replica's rows,
    differentiates the sum of the per-example losses over the global batch,
    synchronises the gradients and updates every replica alike: N replicas
    take the step one device takes on the whole batch.

    Batches are tuples, dicts or single arrays (numpy or tandem tensors)
    with rows along the first dimension; loss_fn(model, *features) (or
    loss_fn(model, features) for a dict) returns the replica's per-example
    losses, shape (rows,). It runs on every replica's thread, holding the
    GIL while Python runs (tandem's ops release it).

    An exception in a step (from loss_fn or the engine) reaches the caller
    and ends the engine: its replicas' collectives were broken off, so later
    steps raise RuntimeError saying so."""

    def __init__(self, native, strategy, model):
        self._native = native
        self.strategy = strategy
        self._model = model
        self._steps = 0
        self._failed = None

    def step(self, batch, loss_fn, step=None, learning_rate=None):
        """One training step; returns {"loss": mean per-example loss of the
        global batch, "global_rows", "skipped" (non-finite gradients under
        loss scaling), "loss_scale", "gradient_norm", "seconds", ...}.
        step: the global step index (dropout streams; default: counts calls);
        learning_rate: this step's rate (a schedule of one's own)."""
        if self._failed:
            raise RuntimeError(
                f"this engine stopped at an error in an earlier step ({self._failed}); its "
                "replicas' collectives were broken off. Build a new one (strategy.engine("
                "engine.model, ...): the parameters were not updated by the failed step) or "
                "load a saved state into a new one")
        columns, names, as_dict = _batch_columns(batch)
        if step is None:
            step = self._steps
        self._steps = step + 1
        try:
            return self._native.step(columns, names, as_dict, loss_fn, step, learning_rate)
        except BaseException as error:
            self._failed = f"{type(error).__name__}: {error}".splitlines()[0]
            raise

    def evaluate(self, batch, fn):
        """fn(model, *features) on every replica's rows of the batch, in
        evaluation mode without gradients; returns its results in row order
        (the replicas' tensors concatenated as one numpy array), or None
        when fn returns nothing."""
        columns, names, as_dict = _batch_columns(batch)
        outputs = [o for o in self._native.evaluate(columns, names, as_dict, fn) if o is not None]
        if not outputs:
            return None
        return _np.concatenate([_np.asarray(o.numpy() if hasattr(o, "numpy") else o) for o in outputs])

    def synchronize(self):
        """Waits for the work an asynchronous engine (the parameter server)
        or local SGD still has; every replica then holds the same values
        (buffers such as batch norm's running statistics: replica 0's).
        Call it before evaluate; every process calls it."""
        self._native.synchronize()

    def save_state(self, path):
        """The model and optimizer state (and the loss scaler's) in a
        checkpoint file written by the chief process (atomically). Every
        process must call it."""
        self._native.save_state(str(path))

    def load_state(self, path):
        """Loads a save_state() file into every replica (every process must call it)."""
        self._native.load_state(str(path))

    @property
    def model(self):
        """The model the engine was made from: replica 0 is it (a
        tandem.Model's network), and every replica holds the same values.
        strategy.engine(engine.model, ...) makes a new engine from it."""
        return self._model

    def replica_model(self, index):
        return self._native.model(index)

    @property
    def name(self):
        return self._native.name()

    @property
    def num_replicas_in_sync(self):
        return self._native.global_replicas()

    @property
    def is_chief(self):
        return self._native.is_chief()

    @property
    def learning_rate(self):
        return self._native.learning_rate()


def _batch_columns(batch):
    """A batch's named columns, the names in argument order, and whether the
    loss function takes one dict."""
    if isinstance(batch, dict):
        names, values, as_dict = list(batch), list(batch.values()), True
    elif isinstance(batch, (tuple, list)):
        names = [f"f{i}" for i in range(len(batch))]
        values, as_dict = list(batch), False
    else:
        names, values, as_dict = ["f0"], [batch], False
    if not names:
        raise ValueError("a batch needs at least one feature")
    from .data import _columns
    columns = _columns(names, values, "the batch")
    return columns, names, as_dict


def active_strategy():
    """The strategy whose scope is active, or None."""
    return _current[-1] if _current else None


def current_strategy():
    """The strategy whose scope is active, else a OneDeviceStrategy."""
    return active_strategy() or OneDeviceStrategy()
