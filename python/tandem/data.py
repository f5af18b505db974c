"""tf.data-style input pipelines (tandem.data.Dataset).

Every stage runs in tandem's C++ pipeline, on its threads; Python only
describes it. Elements are tuples or dicts of features, as in tf.data:
from_tensor_slices((x, y)) yields (x_i, y_i) pairs; iterating gives numpy
arrays (as_numpy=True, the default) or tandem tensors. A Python function
given to map() or filter() holds the GIL while it runs, so such stages do
not run in parallel; the built-in transforms (map_transform) do.
"""
import numpy as _np

from . import _tandem

_D = _tandem.data
AUTOTUNE = _D.AUTOTUNE


class Dataset:
    """A pipeline of named features with a tuple or dict structure.

    Create one with from_tensor_slices, from_generator, from_tfrecord,
    from_csv, from_image_folder, from_spec or range; chain map, map_transform, filter,
    shuffle, batch, repeat, take, skip, shard, cache, prefetch."""

    def __init__(self, native, names, structure, unbatched=None, batch_size=None):
        self._native = native
        self._names = tuple(names)        # the C++ feature names, in structure order
        self._structure = structure       # "tuple", "dict" or "single"
        self._unbatched = unbatched       # the dataset before batch() (for fit)
        self._batch_size = batch_size
        # Batched, then transformed by a stage other than prefetch: its
        # elements are batches that fit() cannot take apart.
        self._batched_before = False

    # --- sources -------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors):
        """One element per row of the arrays: a tuple (x, y), a dict, or one array."""
        if isinstance(tensors, dict):
            names, structure, columns = list(tensors), "dict", list(tensors.values())
        elif isinstance(tensors, tuple):
            names = ["x", "y", "sample_weight"][:len(tensors)] if len(tensors) <= 3 else \
                [f"f{i}" for i in range(len(tensors))]
            structure, columns = "tuple", list(tensors)
        else:
            names, structure, columns = ["x"], "single", [tensors]
        columns = _columns(names, columns, "from_tensor_slices")
        return Dataset(_D.from_tensors(list(columns.items())), names, structure)

    @staticmethod
    def from_generator(generator, output_signature, cardinality=None):
        """Elements from Python: generator() is called at the start of each
        pass (epoch) and must return an iterable of elements shaped like
        output_signature, a TensorSpec, a tuple of them or a dict of them
        (tf.data's from_generator). Each value is converted to its spec's
        dtype (safe casts only: int into float, float64 into float32) and its
        shape checked (None in a spec's shape: any size). Runs holding the
        GIL, one element at a time. cardinality: the elements per pass when
        known (fit then knows its epoch's steps)."""
        if not callable(generator):
            raise TypeError(f"from_generator needs a callable that returns an iterable, got "
                            f"{type(generator).__name__}")
        if isinstance(output_signature, TensorSpec):
            names, structure, specs = ["x"], "single", [output_signature]
        elif isinstance(output_signature, tuple) and output_signature:
            names = ["x", "y", "sample_weight"][:len(output_signature)] \
                if len(output_signature) <= 3 else [f"f{i}" for i in range(len(output_signature))]
            structure, specs = "tuple", list(output_signature)
        elif isinstance(output_signature, dict) and output_signature:
            names, structure, specs = list(output_signature), "dict", list(output_signature.values())
        else:
            raise TypeError("output_signature must be a TensorSpec, or a non-empty tuple or dict "
                            f"of them, got {output_signature!r}")
        for name, spec in zip(names, specs):
            if not isinstance(spec, TensorSpec):
                raise TypeError(f"output_signature's '{name}' is {spec!r}, not a TensorSpec")
        if cardinality is not None and (not isinstance(cardinality, int) or cardinality < 0):
            raise ValueError(f"cardinality must be a non-negative int or None, got {cardinality!r}")

        def make_pass(pass_index):
            for index, element in enumerate(generator()):
                values = _generated_values(element, names, structure, index)
                yield {name: spec._convert(value, name, index)
                       for name, spec, value in zip(names, specs, values)}
        return Dataset(_D.from_generator(make_pass, -2 if cardinality is None else cardinality),
                       names, structure)

    @staticmethod
    def range(count):
        return Dataset(_D.range(count), ["index"], "single")

    @staticmethod
    def from_tfrecord(files, features=None, compression=""):
        """TFRecord files; features: {name: (shape, dtype)} parses tf.train.Example
        records (shape None: variable length), else each element is the record's bytes."""
        files = [files] if isinstance(files, str) else list(files)
        native = _D.from_tfrecord(files, features, compression)
        names = list(features) if features else ["record"]
        return Dataset(native, names, "dict")

    @staticmethod
    def from_csv(path, header=True, delimiter=","):
        """A CSV file's rows as dicts of float32 columns (named by the header)."""
        native = _D.from_csv(path, header, delimiter)
        first = next(iter(native.iterate(0)), None)
        return Dataset(native, list(first) if first else [], "dict")

    @staticmethod
    def from_image_folder(root, shuffle_seed=None):
        """(encoded image bytes, label) pairs from a folder of class folders
        (Keras's image_dataset_from_directory); decode with
        map_transform("decode_image")."""
        return Dataset(_D.from_image_folder(root, shuffle_seed), ["image", "label"], "tuple")

    @staticmethod
    def from_spec(path, seed=0):
        """The input a data specification file describes (docs/data.md), as
        (input, label) pairs."""
        native, input_name, label_name = _D.from_spec(path, seed)
        return Dataset(native, [input_name, label_name], "tuple")

    # --- transformations -----------------------------------------------------
    def _derive(self, native, keep_batch=False):
        if self._batch_size is not None and not keep_batch:
            derived = Dataset(native, self._names, self._structure)
        else:
            derived = Dataset(native, self._names, self._structure, self._unbatched,
                              self._batch_size)
        derived._batched_before = self._batched_before or (
            self._batch_size is not None and not keep_batch)
        return derived

    def map(self, fn, num_parallel_calls=1, deterministic=True):
        """fn takes an element (a tuple or dict of tandem tensors) and returns
        one of the same structure. Runs holding the GIL."""
        names, structure = self._names, self._structure

        def call(features):
            result = fn(*_pack(features, names, structure, False)) if structure == "tuple" \
                else fn(_pack(features, names, structure, False))
            return _unpack(result, names, structure)
        return self._derive(self._native.map(call, num_parallel_calls, deterministic))

    def map_transform(self, name, num_parallel_calls=AUTOTUNE, **args):
        """A built-in transform run in C++ threads: decode_image (channels),
        resize (height, width), center_crop (height, width), normalize (mean,
        stddev), random_flip (seed), random_crop (padding, seed), cast
        (dtype); key= names the feature (default the first)."""
        args.setdefault("key", self._names[0])
        if "mean" in args and not isinstance(args["mean"], (list, tuple)):
            args["mean"] = [args["mean"]]
        if "stddev" in args and not isinstance(args["stddev"], (list, tuple)):
            args["stddev"] = [args["stddev"]]
        return self._derive(self._native.map_builtin(name, args, num_parallel_calls, True))

    def filter(self, predicate):
        names, structure = self._names, self._structure
        return self._derive(self._native.filter(
            lambda features: bool(predicate(*_pack(features, names, structure, False))
                                  if structure == "tuple" else predicate(_pack(features, names, structure, False)))))

    def batch(self, batch_size, drop_remainder=False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        return Dataset(self._native.batch(batch_size, drop_remainder), self._names,
                       self._structure, unbatched=self, batch_size=batch_size)

    def shuffle(self, buffer_size, seed=0, reshuffle_each_iteration=True):
        return self._derive(self._native.shuffle(buffer_size, seed, reshuffle_each_iteration))

    def repeat(self, count=-1):
        return self._derive(self._native.repeat(count))

    def take(self, count):
        return self._derive(self._native.take(count))

    def skip(self, count):
        return self._derive(self._native.skip(count))

    def shard(self, num_shards, index):
        return self._derive(self._native.shard(num_shards, index))

    def cache(self, filename=""):
        return self._derive(self._native.cache(filename))

    def prefetch(self, buffer_size=AUTOTUNE):
        return self._derive(self._native.prefetch(buffer_size), keep_batch=True)

    def cardinality(self):
        """The number of elements, or -1 (infinite) / -2 (unknown), as tf.data."""
        return self._native.cardinality()

    def __len__(self):
        n = self.cardinality()
        if n < 0:
            raise TypeError("the dataset's length is infinite or unknown")
        return n

    def iterate(self, as_numpy=True, pass_index=0):
        """One pass (pass_index picks the pass's shuffle, as epochs do)."""
        for features in self._native.iterate(pass_index):
            yield _pack(features, self._names, self._structure, as_numpy)

    def __iter__(self):
        return self.iterate()

    @property
    def element_names(self):
        return self._names


class TensorSpec:
    """The shape and dtype of one feature of a generated element (tf.TensorSpec).
    shape: a tuple of ints, None for a dimension of any size."""

    def __init__(self, shape, dtype="float32"):
        self.shape = tuple(shape)
        for d in self.shape:
            if d is not None and (not isinstance(d, int) or d < 0):
                raise ValueError(f"TensorSpec shape {shape!r}: each dimension must be a "
                                 "non-negative int or None")
        self.dtype = _np.dtype(dtype)
        if self.dtype not in _GENERATED_DTYPES:
            raise ValueError(f"TensorSpec dtype {self.dtype} is not one a dataset carries "
                             f"({', '.join(str(d) for d in _GENERATED_DTYPES)}; labels and "
                             "indices are int32)")

    def _convert(self, value, name, index):
        array = _np.asarray(value)
        if array.dtype != self.dtype:
            if not _np.can_cast(array.dtype, self.dtype, "same_kind"):
                raise TypeError(f"generated element {index}: '{name}' has dtype {array.dtype}, "
                                f"which does not convert to the signature's {self.dtype}")
            if self.dtype.kind in "iu" and array.size:
                limits = _np.iinfo(self.dtype)
                if array.min() < limits.min or array.max() > limits.max:
                    raise ValueError(f"generated element {index}: '{name}' has values outside "
                                     f"{self.dtype} ([{array.min()}, {array.max()}])")
            array = array.astype(self.dtype)
        if len(array.shape) != len(self.shape) or any(
                want is not None and got != want for got, want in zip(array.shape, self.shape)):
            raise ValueError(f"generated element {index}: '{name}' has shape {array.shape}, "
                             f"the signature says {self.shape}")
        return _np.asarray(array, order="C")  # (ascontiguousarray makes scalars 1-d)

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype})"


_GENERATED_DTYPES = [_np.dtype(d) for d in ("float32", "float16", "int32", "uint8")]


def _generated_values(element, names, structure, index):
    """A generated element's values in names' order, its structure checked."""
    if structure == "single":
        return [element]
    if structure == "tuple":
        if not isinstance(element, (tuple, list)) or len(element) != len(names):
            raise TypeError(f"generated element {index} is {type(element).__name__}"
                            f"{f' of {len(element)}' if isinstance(element, (tuple, list)) else ''}"
                            f", the signature is a {len(names)}-tuple")
        return list(element)
    if not isinstance(element, dict) or set(element) != set(names):
        keys = sorted(element) if isinstance(element, dict) else type(element).__name__
        raise TypeError(f"generated element {index} has {keys}, the signature's keys are {sorted(names)}")
    return [element[n] for n in names]


def _columns(names, values, what):
    """Named columns of rows, in order: tandem Tensors as they are, anything
    else as C-ordered numpy arrays (the C++ side shares them where tandem has
    their dtype and copies them otherwise; int64 columns become int32, the
    labels' and indices' dtype, refusing values outside it). A scalar, or columns whose first dimensions differ, are refused
    with a ValueError that `what` starts."""
    from ._tandem import Tensor
    columns = {}
    for name, value in zip(names, values):
        if not isinstance(value, Tensor):
            value = _np.asarray(value, order="C")
            if value.ndim == 0:
                raise ValueError(f"{what}: {name!r} is a scalar; it needs a first (row) dimension")
        columns[name] = value
    if len({c.shape[0] for c in columns.values()}) > 1:
        raise ValueError(f"{what}: the first dimensions differ: "
                         + ", ".join(f"{n} {c.shape[0]}" for n, c in columns.items()))
    return columns


def _read_only(tensor):
    """The tensor's values as a numpy array that cannot be written: it may
    share the dataset's memory (from_tensor_slices' arrays, a cache), which
    an in-place `x /= 255` in a loop changed for every later pass."""
    array = tensor.numpy()
    array.flags.writeable = False
    return array


def _pack(features, names, structure, as_numpy):
    def value(name):
        if name not in features:
            raise ValueError(f"the element has no feature '{name}' (it has {sorted(features)})")
        t = features[name]
        return _read_only(t) if as_numpy else t
    if structure == "dict":
        return {name: (_read_only(t) if as_numpy else t) for name, t in features.items()}
    if structure == "single":
        return value(names[0])
    return tuple(value(n) for n in names)


def _unpack(result, names, structure):
    if structure == "dict":
        if not isinstance(result, dict):
            raise TypeError(f"a map function over dict elements must return a dict, got {type(result).__name__}")
        return dict(result)
    if structure == "single":
        # A tuple here would be stacked into one array: the structure
        # cannot change in a map.
        if isinstance(result, (tuple, dict)):
            raise TypeError("a map function over single elements must return one tensor, got a "
                            f"{type(result).__name__}")
        return {names[0]: result}
    if not isinstance(result, tuple) or len(result) != len(names):
        raise TypeError(f"a map function over {len(names)}-tuples must return a {len(names)}-tuple, "
                        f"got {type(result).__name__}")
    return dict(zip(names, result))


def fashion_mnist(directory=""):
    """Fashion-MNIST from Debian's dataset-fashion-mnist: ((x_train, y_train),
    (x_test, y_test)), images float32 (N, 28, 28, 1) normalised as `tandem
    train` does, labels int32."""
    return _D.fashion_mnist(directory)
