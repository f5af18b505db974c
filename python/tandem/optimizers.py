"""Optimizers (Keras's names; the updates are tandem's C++ ones)."""
import numbers


class Optimizer:
    name = None

    def __init__(self, learning_rate, **settings):
        # A Keras schedule or a string compared with '>' raised Python's own
        # TypeError; the schedule is fit's option (schedule=, warmup_epochs=).
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real):
            raise TypeError(f"learning_rate must be a number, got {type(learning_rate).__name__} "
                            "(the schedule is fit's option: schedule='cosine', 'step' or "
                            "'constant', warmup_epochs=)")
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        self.learning_rate = float(learning_rate)
        self.settings = settings

    def config(self):
        return dict(self.settings, name=self.name, learning_rate=self.learning_rate)

    def __repr__(self):
        return f"{type(self).__name__}({self.config()})"


class SGD(Optimizer):
    name = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None,
                 global_clipnorm=0.0):
        super().__init__(learning_rate, momentum=float(momentum), nesterov=bool(nesterov),
                         weight_decay=weight_decay, global_clip_norm=float(global_clipnorm))


class Adam(Optimizer):
    name = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 weight_decay=None, global_clipnorm=0.0):
        super().__init__(learning_rate, beta1=float(beta_1), beta2=float(beta_2),
                         eps=float(epsilon), weight_decay=weight_decay,
                         global_clip_norm=float(global_clipnorm))

    def config(self):
        c = super().config()
        # Keras 3's weight decay is decoupled (AdamW's), not an L2 term added
        # to the gradient (PyTorch's Adam): Adam(weight_decay=) is AdamW.
        if c.get("weight_decay"):
            c["name"] = "adamw"
        return c


class AdamW(Adam):
    name = "adamw"

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, global_clipnorm=0.0):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay, global_clipnorm)


def get(name):
    classes = {"sgd": SGD, "adam": Adam, "adamw": AdamW}
    if name not in classes:
        raise ValueError(f"unknown optimizer {name!r} (known: {', '.join(classes)})")
    return classes[name]()
