"""Keras-style callbacks for fit(): called with each epoch's logs
({"loss", "accuracy", "val_loss", ...}) and, when overridden, each step's."""
import math


class Callback:
    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs):
        pass

    def on_train_end(self, logs):
        pass

    def on_epoch_end(self, epoch, logs):
        pass

    def on_train_batch_end(self, batch, logs):
        pass


class LambdaCallback(Callback):
    def __init__(self, on_epoch_end=None, on_train_batch_end=None):
        if on_epoch_end:
            self.on_epoch_end = on_epoch_end
        if on_train_batch_end:
            self.on_train_batch_end = on_train_batch_end


class EarlyStopping(Callback):
    """Stops fit() when `monitor` has not improved by min_delta for
    `patience` epochs (Keras's EarlyStopping)."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, mode="auto"):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be auto, min or max, got {mode!r}")
        if mode == "auto":
            mode = "max" if "acc" in monitor else "min"
        self.monitor, self.min_delta, self.patience, self.mode = monitor, abs(min_delta), patience, mode
        self.best = math.inf if mode == "min" else -math.inf
        self.wait = 0
        self.stopped_epoch = None

    def on_train_begin(self, logs):
        self.best = math.inf if self.mode == "min" else -math.inf
        self.wait = 0
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs):
        if self.monitor not in logs:
            raise ValueError(f"EarlyStopping monitors {self.monitor!r}, which the logs lack "
                             f"(they have {sorted(logs)})")
        value = logs[self.monitor]
        better = value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        if better:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True


class ProgressLogger(Callback):
    """One line per epoch (fit(verbose=1))."""

    def on_epoch_end(self, epoch, logs):
        shown = ", ".join(f"{k} {v:.4f}" for k, v in logs.items()
                          if k not in ("examples", "seconds", "loss_scale"))
        print(f"epoch {epoch + 1}: {shown}", flush=True)
