"""Keras-style layers for tandem.Sequential: each is one layer of a model
file (docs/model_files.md), with Keras's names and arguments. Shapes are
inferred from the model's input_shape, as Keras does."""
import operator as _operator


class Layer:
    """A model-file layer table; subclasses set `type` and their keys."""
    type = None

    def __init__(self, **keys):
        self.keys = {k: v for k, v in keys.items() if v is not None}

    def table(self, indent=""):
        lines = [f'{indent}type = "{self.type}"']
        for key, value in self.keys.items():
            lines.append(f"{indent}{key} = {_toml(value)}")
        return lines

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.keys.items())
        return f"{type(self).__name__}({args})"


def _toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (int, float)):
        return repr(value)
    raise TypeError(f"a layer setting must be a number, a bool or a string, got {type(value).__name__}")


def _activation(name):
    if name is None or name == "linear":
        return None
    if not isinstance(name, str):
        raise TypeError(f"activation must be a name such as 'relu', got {type(name).__name__}")
    return name


def _square(value, what):
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[0] != value[1]:
            raise ValueError(f"{what} must be square (one int or a pair of equal ints), got {value}")
        return value[0]
    return value


class Dense(Layer):
    type = "dense"

    def __init__(self, units, activation=None, use_bias=True):
        super().__init__(units=units, activation=_activation(activation), bias=use_bias)


class Conv2D(Layer):
    type = "conv2d"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", activation=None,
                 use_bias=True):
        super().__init__(filters=filters, kernel=_square(kernel_size, "kernel_size"),
                         stride=_square(strides, "strides"), padding=padding,
                         activation=_activation(activation), bias=use_bias)


class MaxPooling2D(Layer):
    type = "max_pool2d"

    def __init__(self, pool_size=2, strides=None):
        super().__init__(size=_square(pool_size, "pool_size"),
                         stride=None if strides is None else _square(strides, "strides"))


class AveragePooling2D(MaxPooling2D):
    type = "avg_pool2d"


class GlobalAveragePooling2D(Layer):
    type = "global_avg_pool"


class Flatten(Layer):
    type = "flatten"


class Dropout(Layer):
    type = "dropout"

    def __init__(self, rate):
        super().__init__(rate=float(rate))


class BatchNormalization(Layer):
    """Keras's defaults (momentum 0.99, epsilon 1e-3). Keras's momentum is
    the old statistics' weight; tandem's (PyTorch's) the new batch's:
    momentum=0.99 here is tandem's 0.01."""
    type = "batch_norm"

    def __init__(self, momentum=0.99, epsilon=1e-3, synchronized=False, activation=None):
        super().__init__(momentum=1.0 - float(momentum), eps=float(epsilon),
                         synchronized=synchronized, activation=_activation(activation))


class LayerNormalization(Layer):
    """Keras's default epsilon, 1e-3."""
    type = "layer_norm"

    def __init__(self, epsilon=1e-3):
        super().__init__(eps=float(epsilon))


class Embedding(Layer):
    type = "embedding"

    def __init__(self, input_dim, output_dim):
        super().__init__(vocabulary=input_dim, dim=output_dim)


class Activation(Layer):
    type = "activation"

    def __init__(self, activation):
        super().__init__(function=activation)


class MultiHeadAttention(Layer):
    """Causal multi-head self-attention over (T, width) sequences (GPT's)."""
    type = "attention"

    def __init__(self, num_heads, dropout=0.0):
        super().__init__(heads=num_heads, dropout=float(dropout))


def definition(layers, input_shape, input_dtype="f32", name="sequential"):
    """The model file text of a list of layers."""
    if not layers:
        raise ValueError("a Sequential model needs at least one layer")
    shape = list(input_shape) if isinstance(input_shape, (tuple, list)) else [input_shape]
    for d in shape:
        if isinstance(d, bool) or not hasattr(type(d), "__index__"):
            raise TypeError(f"input_shape takes integers, got {d!r}")
    lines = [f'name = "{name}"', f"input_shape = [{', '.join(str(_operator.index(d)) for d in shape)}]",
             f'input_dtype = "{input_dtype}"']
    for layer in layers:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential takes tandem.layers layers, got {type(layer).__name__} "
                            "(use tandem.nn.Sequential for modules)")
        lines += ["", "[[layers]]"] + layer.table()
    return "\n".join(lines) + "\n"
