"""Keras-style training for any tandem model: compile(), fit(), evaluate(),
predict(). fit() runs tandem's C++ Trainer (the loop `tandem train` runs)
under the strategy in effect at compile() (tandem.distribute), so a fit from
Python takes exactly the steps the command takes for the same model, data,
seed and settings."""
import warnings as _warnings

import numpy as _np

from . import _tandem

# Keras's loss names and tandem's.
_LOSSES = {
    "sparse_categorical_crossentropy": "softmax_cross_entropy",
    "softmax_cross_entropy": "softmax_cross_entropy",
    "binary_crossentropy": "binary_cross_entropy",
    "binary_cross_entropy": "binary_cross_entropy",
    "mse": "mean_squared_error", "mean_squared_error": "mean_squared_error",
    "mae": "mean_absolute_error", "mean_absolute_error": "mean_absolute_error",
    "huber": "huber",
}

# The metrics compile() takes when given none: tandem train's defaults.
_DEFAULT_METRICS = {
    "softmax_cross_entropy": ("accuracy",),
    "mean_squared_error": ("mae", "rmse"),
    "mean_absolute_error": ("mae", "rmse"),
    "huber": ("mae", "rmse"),
}

# fit() options about what a run writes (as tandem train's flags): the
# monitor's metrics.jsonl, trace and TensorBoard files and summary.json go
# into output_dir on the chief.
_RUN_OUTPUT_OPTIONS = ("monitor", "metrics_every", "tensorboard", "trace_steps")


class History:
    """What fit() returns: history[name] is that log's value per epoch."""

    def __init__(self):
        self.epoch = []
        self.history = {}
        self.interrupted = False

    def _add(self, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)

    def __repr__(self):
        return f"History(epochs={len(self.epoch)}, keys={sorted(self.history)})"


class Trainable:
    """compile/fit/evaluate/predict, mixed into tandem.nn.Module and tandem.Model."""

    def compile(self, optimizer="sgd", loss="sparse_categorical_crossentropy",
                metrics=None, precision=None, strategy=None, **options):
        """Chooses the optimizer (a tandem.optimizers object or a name), the
        loss (Keras's or tandem's name; models output logits), the metrics
        (default, as tandem train's: accuracy beside cross-entropy, mae and
        rmse beside a regression loss, none beside binary cross-entropy) and
        the strategy (default: the one whose scope() was active when the
        model was built or is active now, else one device). `options` are fit()'s training options, fixed here."""
        from . import distribute, optimizers
        if isinstance(optimizer, str):
            optimizer = optimizers.get(optimizer)
        if not isinstance(optimizer, optimizers.Optimizer):
            raise TypeError(f"optimizer must be a tandem.optimizers optimizer or a name, got "
                            f"{type(optimizer).__name__}")
        if not isinstance(loss, str) or loss not in _LOSSES:
            raise ValueError(f"unknown loss {loss!r} (known: {', '.join(sorted(_LOSSES))})")
        if metrics is None:
            metrics = _DEFAULT_METRICS.get(_LOSSES[loss], ())
        if isinstance(metrics, str):
            metrics = [metrics]
        policy = self._policy()
        if precision is not None and precision != policy:
            raise ValueError(
                f"the model was built under the {policy!r} policy, not {precision!r}: set "
                f"tandem.set_global_policy({precision!r}) before building it (as Keras does)")
        strategy = strategy or _compile_strategy(self.__dict__.get("_tandem_strategy"),
                                                 distribute.active_strategy())
        object.__setattr__(self, "_compiled", {
            "optimizer": optimizer, "loss": _LOSSES[loss], "metrics": list(metrics),
            "strategy": strategy, "options": dict(options)})

    def _compiled_or_raise(self):
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            raise RuntimeError("call compile() before fit() or evaluate()")
        return compiled

    def _policy(self):
        return self.__dict__.get("_tandem_policy") or _tandem.global_policy()

    def _trainer(self, data, options):
        compiled = self._compiled_or_raise()
        config = dict(compiled["strategy"].options())
        config.update(compiled["options"])
        config.update(options)
        config["optimizer"] = compiled["optimizer"].config()
        input_name, label_name = data._names[0], (data._names[1] if len(data._names) > 1 else None)
        config.setdefault("input_feature", input_name)
        config["objective"] = {"loss": compiled["loss"], "metrics": compiled["metrics"],
                               "labels": label_name or "label"}
        seed = config.get("seed", 0)
        source = self._model_source(self._policy(), seed)
        return _tandem.train.Trainer(config, source)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, validation_data=None,
            callbacks=(), verbose="auto", shuffle=True, **options):
        """Trains on a tandem.data.Dataset of (input, label) examples (or
        numpy arrays x, y, reshuffled every epoch from the seed unless
        shuffle=False, as Keras's; a dataset is taken in its own order). A
        batched dataset gives the global batch size;
        otherwise batch_size (default 32, Keras's). `options` are any of
        tandem train's settings (seed, steps_per_epoch, accumulation_steps,
        zero, schedule, warmup_epochs, output_dir, resume, checkpoint_every,
        loss_scale, ...: docs/python.md lists them), and what the run writes
        into output_dir (as tandem train does, on the chief): checkpoints,
        summary.json and the monitor's metrics.jsonl (monitor=True,
        metrics_every=1), TensorBoard event files (tensorboard: a directory;
        default output_dir/tensorboard; False: none) and a Chrome trace
        (trace_steps=(first, last)). `tandem report OUTPUT_DIR` reads them.
        Returns a History. verbose: "auto" (Keras's default), 1 or 2 print
        one line per epoch (its time, loss and metrics; under several
        processes, the first's); 0 prints nothing.
        Ctrl-C stops after the current step, saves a checkpoint (with
        output_dir) and raises KeyboardInterrupt."""
        from . import callbacks as cb
        from .data import Dataset
        if isinstance(verbose, bool) or verbose not in ("auto", 0, 1, 2):
            raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
        train, batch_size = _as_examples(x, y, batch_size)
        validation = None
        if validation_data is not None:
            if isinstance(validation_data, tuple):
                if len(validation_data) != 2:
                    raise ValueError(f"validation_data is a tuple of {len(validation_data)}; it "
                                     "takes (x, y) (sample weights are not supported) or a "
                                     "Dataset")
                validation_data = _dataset_of(*validation_data)
            validation, _ = _as_examples(validation_data, None, None)
            validation = validation._native
        options = dict(options, epochs=epochs, batch_size=batch_size)
        outputs = {key: options.pop(key) for key in _RUN_OUTPUT_OPTIONS if key in options}
        callbacks = list(callbacks)
        for c in callbacks:
            for key, value in c._fit_options().items():
                if key in _RUN_OUTPUT_OPTIONS:
                    outputs[key] = value
                elif options.setdefault(key, value) != value:
                    raise ValueError(f"{type(c).__name__} sets {key}={value!r}, and fit was given "
                                     f"{key}={options[key]!r}")
        trainer = self._trainer(train, options)  # checks the options (the seed's type too)
        if shuffle and not isinstance(x, Dataset):
            # Pass k (epoch k) draws its own order from the seed.
            train = train.shuffle(len(train), seed=options.get("seed", 0))
        self._continue_optimizer(trainer, options)
        object.__setattr__(self, "_last_trainer", trainer)
        object.__setattr__(self, "_last_trainer_names", train._names)
        history = History()
        if verbose != 0 and _tandem.engine.launched_rank() <= 0:
            # The chief's lines only: every process of a multi-worker job
            # sees the same epochs (as tandem train prints).
            callbacks.append(cb.ProgressLogger(epochs))
        for c in callbacks:
            c.set_model(self)
        object.__setattr__(self, "stop_training", False)
        for c in callbacks:
            c.on_train_begin({})
        # Only callbacks that look at steps cost a call into Python per step.
        steps = [c for c in callbacks
                 if getattr(c.on_train_batch_end, "__func__", c.on_train_batch_end)
                 is not cb.Callback.on_train_batch_end]

        def on_step(logs):
            for c in steps:
                c.on_train_batch_end(logs["step"] - 1, logs)

        def on_epoch(epoch, logs):
            history._add(epoch - 1, logs)
            for c in callbacks:
                c.on_epoch_end(epoch - 1, logs)
            return bool(self.__dict__.get("stop_training"))

        result = trainer.fit(train._native, validation, on_step if steps else None, on_epoch, outputs)
        self._adopt(trainer)
        for warning in result["warnings"]:
            _warnings.warn(warning, RuntimeWarning, stacklevel=2)
        for c in callbacks:
            c.on_train_end({"interrupted": result["interrupted"]})
        if result["interrupted"] and not self.__dict__.get("stop_training"):
            history.interrupted = True
            raise KeyboardInterrupt("fit stopped by Ctrl-C after a step; the checkpoint (with "
                                    "output_dir) resumes it with resume=True")
        return history

    def _continue_optimizer(self, trainer, options):
        """A fit after a fit under the same compile() continues the optimizer's
        state (momentum, Adam's moments, the loss scale), as Keras does; the
        learning-rate schedule starts over with the new fit's epochs. A new
        compile() starts a new optimizer; resume=True takes the checkpoint's."""
        compiled = self._compiled_or_raise()
        previous = self.__dict__.get("_last_trainer")
        if previous is None or self.__dict__.get("_last_trainer_compiled") is not compiled \
                or options.get("resume"):
            object.__setattr__(self, "_last_trainer_compiled", compiled)
            return
        trainer.adopt_state(previous)

    def _adopt(self, trainer):
        """After fit: the trained replica 0 is this model (nothing to do for
        a Module, which was replica 0)."""

    def evaluate(self, x=None, y=None, batch_size=None, **options):
        """Loss and metrics over examples, as a dict ({"loss": ..., "accuracy": ...})."""
        given_batch_size = batch_size
        data, batch_size = _as_examples(x, y, batch_size)
        # The last fit's trainer when it evaluates what was asked: the same
        # compile() (loss, metrics), features and settings. Otherwise a trainer
        # of its own over the model's current weights, which the next fit
        # does not continue from.
        trainer = self.__dict__.get("_last_trainer")
        if trainer is None or options or given_batch_size is not None \
                or self.__dict__.get("_last_trainer_compiled") is not self._compiled_or_raise() \
                or self.__dict__.get("_last_trainer_names") != data._names:
            # The batch asked for (or a batched dataset's), else tandem's 1000.
            batched = getattr(x, "_batch_size", None) is not None
            eval_batch = batch_size if given_batch_size is not None or batched else 1000
            trainer = self._trainer(data, dict(options, eval_batch_size=eval_batch))
        return trainer.evaluate(data._native)

    def predict(self, x, batch_size=256):
        """The model's outputs for numpy inputs (or a dataset's first
        feature), in evaluation mode without gradients, as a numpy array."""
        from . import no_grad
        if hasattr(x, "_native"):
            rows = [features[0] if isinstance(features, tuple) else features
                    for features in x.iterate(as_numpy=True)]
            batched = x._batch_size is not None or x._batched_before
            if not rows:
                x = _np.zeros((0,), _np.float32)
            else:
                # A batched dataset's elements are batches: their rows, in order.
                x = _np.concatenate(rows) if batched else _np.stack(rows)
        x = _np.asarray(x)
        was_training = self._network_for_predict().training
        net = self._network_for_predict()
        net.eval()
        outputs = []
        try:
            with no_grad():
                for start in range(0, len(x), batch_size):
                    outputs.append(net(_tandem.Tensor(x[start:start + batch_size])).numpy().astype(_np.float32))
        finally:
            net.train(was_training)
        return _np.concatenate(outputs) if outputs else _np.zeros((0,), _np.float32)

    def _network_for_predict(self):
        return self


def _compile_strategy(created, active):
    """Keras's rule: a model built under a strategy's scope trains under it
    (compile() may be called outside); compiling it under another scope is
    an error."""
    from . import distribute
    if created is not None and active is not None and created is not active:
        raise ValueError(f"the model was built under {created!r}'s scope and is compiled under "
                         f"{active!r}'s; build and compile it under one strategy")
    return created or active or distribute.OneDeviceStrategy()


def _dataset_of(x, y):
    from .data import Dataset
    return Dataset.from_tensor_slices((x, y) if y is not None else x)


def _with_current_names(x):
    """A dict dataset named as its elements are now (a map may have renamed
    its features; the dataset keeps its source's names): one element is
    read to tell. fit takes the first feature as the input and the second
    as the label, so more than two are refused (the first two of a CSV's
    columns trained one column on another)."""
    from .data import Dataset
    source = x._unbatched if x._unbatched is not None else x
    first = next(iter(source._native.iterate(0)), None)
    names = tuple(first) if first else x._names
    if len(names) > 2:
        raise ValueError(
            f"the dataset's elements hold {len(names)} features ({', '.join(names)}); fit and "
            "evaluate take the input and the label: map each element to a dict of those two, "
            "the input first, e.g. ds.map(lambda e: {'x': e['x0'], 'y': e['y']})")
    unbatched = None
    if x._unbatched is not None:
        unbatched = Dataset(x._unbatched._native, names, "dict")
    renamed = Dataset(x._native, names, "dict", unbatched, x._batch_size)
    renamed._batched_before = x._batched_before
    return renamed


def _as_examples(x, y, batch_size):
    """The unbatched dataset fit and evaluate give the Trainer, and the batch size."""
    from .data import Dataset
    if x is None:
        raise ValueError("fit/evaluate need data: a tandem.data.Dataset or numpy arrays x, y")
    if not isinstance(x, Dataset):
        x = _dataset_of(x, y)
    elif y is not None:
        raise ValueError("y is given by the dataset; pass y only with numpy x")
    if x._structure == "tuple" and len(x._names) > 2:
        # Keras's third element: weights the Trainer would silently ignore.
        raise NotImplementedError(
            f"the dataset's elements have {len(x._names)} parts; fit and evaluate take (input, "
            "label): sample weights are not supported")
    if x._structure == "dict":
        x = _with_current_names(x)
    if x._batched_before:
        # Each element would be taken for one example (a batch of 16 rows
        # trained as 16 "examples" of 16 rows each).
        raise ValueError("the dataset was batched and then transformed (map, cache, shuffle, "
                         "...): fit and evaluate take examples, or a dataset whose last stage "
                         "is batch() (prefetch() may follow); move those stages before batch()")
    if x._batch_size is not None:
        if batch_size is not None and batch_size != x._batch_size:
            raise ValueError(f"the dataset is batched by {x._batch_size}; batch_size={batch_size} "
                             "disagrees (give one or the other)")
        return x._unbatched, x._batch_size
    return x, 32 if batch_size is None else batch_size
