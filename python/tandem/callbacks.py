"""Keras-style callbacks for fit(): called with each epoch's logs
({"loss", "accuracy", "val_loss", ...}) and, when overridden, each step's."""
import math
import os


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

    def _fit_options(self):
        """fit() options this callback asks for (run in C++, not per call)."""
        return {}


class LambdaCallback(Callback):
    def __init__(self, on_epoch_end=None, on_train_batch_end=None):
        if on_epoch_end:
            self.on_epoch_end = on_epoch_end
        if on_train_batch_end:
            self.on_train_batch_end = on_train_batch_end


class _Monitored:
    """A logged value a callback watches for improvement (Keras's monitor
    and mode: "auto" is max for accuracies, min otherwise) and its best so far."""

    def __init__(self, owner, name, mode, min_delta=0.0):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be auto, min or max, got {mode!r}")
        self.owner, self.name, self.min_delta = owner, name, abs(min_delta)
        self.mode = ("max" if "acc" in name else "min") if mode == "auto" else mode
        self.reset()

    def reset(self):
        self.best = math.inf if self.mode == "min" else -math.inf

    def improved(self, logs):
        """Whether the logs' value beats the best by more than min_delta (it
        becomes the best then); ValueError when the logs lack it."""
        if self.name not in logs:
            raise ValueError(f"{self.owner} monitors {self.name!r}, which the logs lack "
                             f"(they have {sorted(logs)})")
        value = logs[self.name]
        better = (value < self.best - self.min_delta if self.mode == "min"
                  else value > self.best + self.min_delta)
        if better:
            self.best = value
        return better


class EarlyStopping(Callback):
    """Stops fit() when `monitor` has not improved by min_delta for
    `patience` epochs (Keras's EarlyStopping)."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, mode="auto"):
        self.watched = _Monitored("EarlyStopping", monitor, mode, min_delta)
        self.patience = patience
        self.wait = 0
        self.stopped_epoch = None

    def on_train_begin(self, logs):
        self.watched.reset()
        self.wait = 0
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs):
        if self.watched.improved(logs):
            self.wait = 0
            return
        self.wait += 1
        # Keras's: the patience-th epoch without improvement stops it, never
        # the first epoch (a NaN there is no improvement on nothing).
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True


class ProgressLogger(Callback):
    """One line per epoch, as fit prints by default (verbose "auto", 1 or 2)."""

    def __init__(self, epochs):
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs):
        shown = ", ".join(f"{k} {v:.4f}" for k, v in logs.items()
                          if k not in ("examples", "seconds", "loss_scale"))
        seconds = logs.get("seconds")
        took = f" {seconds:.1f} s," if isinstance(seconds, (int, float)) else ""
        print(f"epoch {epoch + 1}/{self.epochs}:{took} {shown}", flush=True)


class TensorBoard(Callback):
    """TensorBoard event files in log_dir (scalars per step and epoch:
    losses, metrics, learning rate, throughput, memory), written by the C++
    monitor as fit runs (Keras's TensorBoard callback; `tensorboard
    --logdir LOG_DIR` reads them)."""

    def __init__(self, log_dir="logs"):
        if not isinstance(log_dir, str) or not log_dir:
            raise ValueError(f"log_dir must be a directory name, got {log_dir!r}")
        self.log_dir = log_dir

    def _fit_options(self):
        return {"tensorboard": self.log_dir}


class BackupAndRestore(Callback):
    """A checkpoint of the whole training state (model, optimizer, position
    in the data) in backup_dir at each epoch's end and every save_freq steps
    (an int; "epoch": epoch ends only); a fit() started again with the same
    callback resumes from it (Keras's BackupAndRestore). It is fit's
    output_dir/resume/checkpoint_every, so the run's other files go there too."""

    def __init__(self, backup_dir, save_freq="epoch"):
        if not isinstance(backup_dir, str) or not backup_dir:
            raise ValueError(f"backup_dir must be a directory name, got {backup_dir!r}")
        if save_freq != "epoch" and (not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f'save_freq must be "epoch" or a positive number of steps, got {save_freq!r}')
        self.backup_dir, self.save_freq = backup_dir, save_freq

    def _fit_options(self):
        import os
        options = {"output_dir": self.backup_dir,
                   "resume": os.path.exists(os.path.join(self.backup_dir, "checkpoint.tckpt"))}
        if self.save_freq != "epoch":
            options["checkpoint_every"] = self.save_freq
        return options

    def on_train_end(self, logs):
        # A finished run's backup is removed (as Keras does), so that the
        # next fit starts afresh; a stopped one's is kept to resume from.
        import os
        if not logs.get("interrupted") or getattr(self.model, "stop_training", False):
            path = os.path.join(self.backup_dir, "checkpoint.tckpt")
            if os.path.exists(path):
                os.remove(path)


class ModelCheckpoint(Callback):
    """The model's weights in a safetensors file (PyTorch's names and
    layouts: safetensors.torch.load_file reads it) after each epoch, or only
    when `monitor` improved (save_best_only). filepath may use {epoch} and
    the logs' names ("weights.{epoch:02d}-{val_loss:.3f}.safetensors")."""

    def __init__(self, filepath, monitor="val_loss", save_best_only=False, mode="auto"):
        self.filepath, self.save_best_only = filepath, save_best_only
        self.watched = _Monitored("ModelCheckpoint", monitor, mode)  # its best spans fits

    def on_epoch_end(self, epoch, logs):
        if self.save_best_only and not self.watched.improved(logs):
            return
        path = self.filepath.format(epoch=epoch + 1, **logs)
        # As Keras's: the folder is made (a missing one ended the fit).
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self.model.save_weights(path)
