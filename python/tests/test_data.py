"""tandem.data: tf.data's structure over the C++ pipeline, Python generators
and map functions, and the errors a wrong structure gets."""
import numpy as np
import pytest

import tandem
from tandem.data import Dataset, TensorSpec


def test_tensor_slices_keep_the_tuple_structure_and_batch():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int32)
    batches = list(Dataset.from_tensor_slices((x, y)).batch(4))
    assert [b[0].shape for b in batches] == [(4, 2), (2, 2)]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    first = next(iter(Dataset.from_tensor_slices({"a": x, "b": y})))
    assert set(first) == {"a", "b"} and first["a"].tolist() == [0.0, 1.0] and first["b"].shape == ()


def test_map_filter_take_skip_shard_in_tf_data_order():
    d = Dataset.from_tensor_slices(np.arange(20, dtype=np.float32))
    d = d.map(lambda v: v * 2).filter(lambda v: int(v.numpy()) % 3 == 0).skip(1).take(4)
    assert [int(v) for v in d] == [6, 12, 18, 24]
    shards = [[int(v) for v in Dataset.range(10).shard(3, i)] for i in range(3)]
    assert sorted(sum(shards, [])) == list(range(10))


def test_generator_follows_its_signature_each_pass():
    calls = []

    def gen():
        calls.append(1)
        for i in range(5):
            yield np.full((3,), i, dtype=np.float64), i  # float64 and Python ints: safe casts

    d = Dataset.from_generator(gen, (TensorSpec((3,), "float32"), TensorSpec((), "int32")),
                               cardinality=5)
    assert len(d) == 5
    first = list(d)
    assert first[2][0].dtype == np.float32 and first[2][0].tolist() == [2.0, 2.0, 2.0]
    assert first[4][1].dtype == np.int32 and int(first[4][1]) == 4
    batches = list(d.batch(2))
    assert [b[1].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert len(calls) == 2  # one generator call per pass


def test_generator_with_variable_length_and_dict_signature():
    def gen():
        for n in (2, 4, 3):
            yield {"tokens": np.arange(n, dtype=np.int32), "label": np.int32(n)}

    d = Dataset.from_generator(gen, {"tokens": TensorSpec((None,), "int32"),
                                     "label": TensorSpec((), "int32")})
    assert [len(e["tokens"]) for e in d] == [2, 4, 3]
    assert d.cardinality() == -2


def test_fit_on_a_generator_equals_fit_on_arrays():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def losses(dataset):
        model = tandem.Sequential([tandem.layers.Dense(8, activation="relu"), tandem.layers.Dense(2)],
                                  input_shape=(4,))
        model.compile(optimizer=tandem.optimizers.SGD(0.1))
        return model.fit(dataset, batch_size=32, epochs=2, seed=5).history["loss"]

    generated = Dataset.from_generator(lambda: zip(x, y), (TensorSpec((4,)), TensorSpec((), "int32")),
                                       cardinality=len(x))
    assert losses(generated) == losses(Dataset.from_tensor_slices((x, y)))


@pytest.mark.parametrize("element, error, message", [
    ((np.zeros(3, np.float32),), TypeError, "is tuple of 1, the signature is a 2-tuple"),
    ((np.zeros(4, np.float32), 1), ValueError, r"'x' has shape \(4,\), the signature says \(3,\)"),
    ((np.zeros(3, np.float32), 1.5), TypeError, "'y' has dtype float64, which does not convert"),
    ({"x": np.zeros(3)}, TypeError, "is dict"),
    ((np.zeros(3, np.float32), 2**40), ValueError, r"'y' has values outside int32"),
])
def test_generator_yielding_the_wrong_structure_raises(element, error, message):
    d = Dataset.from_generator(lambda: iter([element]),
                               (TensorSpec((3,), "float32"), TensorSpec((), "int32")))
    with pytest.raises(error, match=message):
        list(d)


def test_generator_errors_reach_the_consumer():
    def gen():
        yield np.zeros(2, np.float32)
        raise RuntimeError("the source broke")

    d = Dataset.from_generator(gen, TensorSpec((2,)))
    with pytest.raises(RuntimeError, match="the source broke"):
        list(d.prefetch(2))


@pytest.mark.parametrize("call, error", [
    (lambda: Dataset.from_generator(42, TensorSpec(())), TypeError),
    (lambda: Dataset.from_generator(lambda: [], ((3,), "float32")), TypeError),
    (lambda: Dataset.from_generator(lambda: [], TensorSpec((3,)), cardinality=-1), ValueError),
    (lambda: TensorSpec((3,), "int64"), ValueError),
    (lambda: TensorSpec((-1,)), ValueError),
])
def test_bad_generator_arguments_are_refused(call, error):
    with pytest.raises(error):
        call()


_BREAK_OUT_OF_A_PREFETCHED_PYTHON_MAP = """
import time
import tandem
from tandem.data import Dataset
d = Dataset.range(1000).map(lambda x: (time.sleep(0.02), x)[1]).prefetch(8)
for _ in range(3):
    for i, x in enumerate(d):
        if i == 2:
            break
print("ended")
"""


def test_leaving_a_pass_over_a_python_map_early_does_not_hang():
    # Ending the pass joined the prefetch's producer while holding the GIL
    # the producer waited for to call the map: a hang, every time.
    import os
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _BREAK_OUT_OF_A_PREFETCHED_PYTHON_MAP],
                          capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ended"


_EXIT_WITH_A_PASS_OPEN = """
import numpy as np
import tandem
from tandem.data import Dataset
x = np.arange(2000, dtype=np.float32).reshape(1000, 2)
slow = Dataset.from_tensor_slices(x).map(lambda a: a, num_parallel_calls=2).prefetch(8)
generated = Dataset.from_generator(lambda: iter(x), tandem.data.TensorSpec((2,))).prefetch(8)
kept = [iter(slow), iter(generated)]
for it in kept:
    next(it)
print("exiting")
"""


def test_exiting_with_a_pass_open_over_python_calls_ends_cleanly():
    # At interpreter exit the pipeline's threads, waiting for the GIL to call
    # the map or generator, were ended by pthread_exit in the middle of the
    # call: "FATAL: exception not rethrown" or a segfault, most exits.
    import os
    import subprocess
    import sys
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", _EXIT_WITH_A_PASS_OPEN],
                              capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "exiting"


def test_a_map_cannot_change_a_single_elements_structure():
    # (a, a) was stacked into one (2, ...) array.
    d = Dataset.from_tensor_slices(np.arange(4, dtype=np.float32)).map(lambda a: (a, a))
    with pytest.raises(TypeError, match="must return one tensor, got a tuple"):
        list(d)


def test_int64_tensor_columns_are_carried_as_int32():
    labels = tandem.tensor(np.array([0, 1, 2], np.int64), dtype="int64")
    got = [y for _, y in Dataset.from_tensor_slices((np.zeros((3, 2), np.float32), labels))]
    assert [int(y) for y in got] == [0, 1, 2] and all(y.dtype == np.int32 for y in got)


def test_elements_cannot_write_into_the_datasets_memory():
    # Iteration gave views of the source arrays: `x /= 2` in a loop halved
    # the data of every later epoch.
    x = np.ones((4, 2), np.float32)
    d = Dataset.from_tensor_slices(x)
    first = next(iter(d))
    with pytest.raises(ValueError, match="read-only"):
        first /= 2
    assert [float(v.sum()) for v in d] == [2.0] * 4 and x.sum() == 8.0


@pytest.mark.parametrize("name, keywords, error, message", [
    ("random_crop", dict(pading=2, seed=1), ValueError, "takes no 'pading' (it takes padding"),
    ("resize", dict(heigth=4, width=4), ValueError, "takes no 'heigth'"),
    ("random_flip", dict(sed=5), ValueError, "takes no 'sed'"),
    ("cast", {}, ValueError, "transform 'cast' needs 'dtype'"),
    ("resize", dict(height=2.5, width=2), TypeError, "'height' has the wrong type"),
])
def test_built_in_transforms_refuse_keywords_they_do_not_take(name, keywords, error, message):
    # A misspelt keyword was ignored: random_crop(pading=2) cropped nothing.
    d = Dataset.from_tensor_slices({"image": np.zeros((4, 8, 8, 1), np.float32)})
    with pytest.raises(error, match=message.replace("(", r"\(")):
        d.map_transform(name, **keywords)
