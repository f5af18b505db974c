"""tandem.Tensor with numpy and DLPack: values, dtypes and shared memory."""
import numpy as np
import pytest

import tandem

SHARED = [np.float32, np.float16, np.int32, np.uint8, np.int64]


@pytest.mark.parametrize("np_dtype", SHARED)
def test_numpy_round_trip_shares_memory(np_dtype):
    a = (np.arange(12) % 7).astype(np_dtype).reshape(3, 4)
    t = tandem.from_numpy(a)
    assert t.shape == (3, 4)
    np.testing.assert_array_equal(t.numpy(), a)
    a[1, 2] = 5
    assert t.numpy()[1, 2] == 5                    # the tensor sees the array's write
    view = t.numpy()
    view[0, 0] = 6
    assert a[0, 0] == 6                            # and the array sees the view's
    assert np.shares_memory(np.asarray(t), a)


def test_tensor_keeps_array_alive():
    t = tandem.from_numpy(np.full((1000,), 3.0, np.float32))
    import gc
    gc.collect()
    assert t.numpy().sum() == 3000.0


def test_bfloat16_converts_to_float32_copy():
    a = np.array([[1.0, 2.5], [-3.0, 0.15625]], np.float32)
    t = tandem.tensor(a, dtype="bfloat16")
    assert t.dtype == tandem.bfloat16
    out = t.numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, a)          # exactly representable in bf16
    out[0, 0] = 9.0
    assert t.numpy()[0, 0] == 1.0                  # a copy, documented


@pytest.mark.parametrize("dtype,expected", [(np.float64, tandem.float32), (np.int64, tandem.int32),
                                            (np.bool_, tandem.int32), (np.float16, tandem.float16),
                                            (np.uint8, tandem.uint8)])
def test_copy_dtypes(dtype, expected):
    t = tandem.tensor(np.ones((2, 2), dtype))
    assert t.dtype == expected


def test_int64_out_of_range_is_refused():
    with pytest.raises(ValueError, match="int32"):
        tandem.tensor(np.array([2**40], np.int64))


def test_int64_is_exact_and_converts_saturating():
    big = np.array([2**40 + 1, -(2**53) - 1, 7], np.int64)     # past float's and double's mantissas
    t = tandem.tensor(big, dtype="int64")
    assert t.dtype == tandem.int64 and t.numpy().dtype == np.int64
    np.testing.assert_array_equal(t.numpy(), big)
    assert t.tolist() == big.tolist() and tandem.from_numpy(big[2:]).item() == 7
    assert t.to("int32").tolist() == [2**31 - 1, -(2**31), 7]   # saturated, as to any integer dtype
    assert t.to("float32").dtype == tandem.float32
    assert tandem.tensor([3, 4]).to("int64").to("int32").tolist() == [3, 4]


def test_int64_labels_and_indices_are_converted_or_refused():
    logits = tandem.tensor(np.random.default_rng(0).normal(size=(4, 5)))
    labels = np.array([0, 4, 2, 1], np.int64)
    want = tandem.ops.softmax_cross_entropy(logits, tandem.tensor(labels)).numpy()
    got = tandem.ops.softmax_cross_entropy(logits, tandem.from_numpy(labels)).numpy()
    np.testing.assert_array_equal(got, want)
    table = tandem.tensor(np.arange(12.0).reshape(6, 2))
    np.testing.assert_array_equal(
        tandem.ops.embedding(table, tandem.from_numpy(np.array([5, 0], np.int64))).numpy(),
        [[10.0, 11.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="int64 value 8589934592 at position 1"):
        tandem.ops.embedding(table, tandem.from_numpy(np.array([1, 2**33], np.int64)))
    with pytest.raises(tandem.Error, match="i64"):
        tandem.from_numpy(labels) + tandem.from_numpy(labels)   # arithmetic takes no int64
    with pytest.raises(tandem.Error, match="i64"):
        tandem.from_numpy(labels).sum()
    grid = tandem.tensor(np.arange(6).reshape(2, 3), dtype="int64")   # layout copies do
    assert grid.transpose(0, 1).tolist() == [[0, 3], [1, 4], [2, 5]]
    assert grid[:, 1:].tolist() == [[1, 2], [4, 5]]
    assert tandem.ops.concat([grid, grid], 0).dtype == tandem.int64


def test_from_numpy_refuses_non_contiguous_and_foreign_dtypes():
    with pytest.raises(ValueError, match="contiguous"):
        tandem.from_numpy(np.ones((4, 4), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="float64"):
        tandem.from_numpy(np.ones(3))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "int64"])
def test_dlpack_to_numpy_and_back(dtype):
    t = tandem.tensor(np.arange(6).reshape(2, 3), dtype=dtype)
    if dtype == "bfloat16":
        with pytest.raises(Exception):
            np.from_dlpack(t)                       # numpy has no bfloat16
        return
    a = np.from_dlpack(t)
    assert a.shape == (2, 3)
    np.testing.assert_array_equal(a, t.numpy())
    assert a.__array_interface__["data"][0] == t.data_ptr()   # shared
    back = tandem.from_dlpack(np.arange(4, dtype=a.dtype))
    assert back.data_ptr() != 0 and back.numpy().tolist() == [0, 1, 2, 3]


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype,torch_dtype", [("float32", torch.float32), ("float16", torch.float16),
                                               ("bfloat16", torch.bfloat16), ("int32", torch.int32),
                                               ("uint8", torch.uint8), ("int64", torch.int64)])
def test_dlpack_with_torch_shares_memory(dtype, torch_dtype):
    t = tandem.tensor(np.arange(6).reshape(2, 3), dtype=dtype)
    p = torch.from_dlpack(t)
    assert p.dtype == torch_dtype and tuple(p.shape) == (2, 3)
    p[1, 1] = 42
    assert t.to("float32").numpy()[1, 1] == 42     # PyTorch's write shows in tandem
    u = tandem.from_dlpack(torch.full((3,), 7, dtype=torch_dtype))
    assert u.dtype == tandem.dtype.__members__[dtype]
    assert u.to("float32").numpy().tolist() == [7, 7, 7]


def test_dlpack_refuses_float64_and_strided():
    with pytest.raises(TypeError, match="int64"):
        tandem.from_dlpack(torch.arange(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous"):
        tandem.from_dlpack(torch.ones(4, 4).t())


def test_attributes_and_repr():
    t = tandem.tensor([[1.0, 2.0]], requires_grad=True)
    assert t.shape == (1, 2) and t.ndim == 2 and t.device == "cpu:0" and t.requires_grad
    assert t.is_leaf and t.grad is None
    assert "shape=(1, 2)" in repr(t)
    assert tandem.tensor(3.5).item() == 3.5
    assert len(t) == 1


def test_read_only_and_byte_swapped_arrays_are_not_shared_as_they_are():
    # A read-only array was shared writable (a write through numpy() into a
    # memmap opened "r" crashed), and a big-endian one was read as
    # little-endian numbers.
    frozen = np.arange(4, dtype=np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        tandem.from_numpy(frozen)
    assert tandem.tensor(frozen).tolist() == [0.0, 1.0, 2.0, 3.0]
    swapped = np.arange(4, dtype=">f4")
    with pytest.raises(ValueError, match="not one of tandem's"):
        tandem.from_numpy(swapped)
    assert tandem.tensor(swapped).tolist() == [0.0, 1.0, 2.0, 3.0]
    column = [float(x) for x, _ in tandem.data.Dataset.from_tensor_slices(
        (swapped, np.arange(4)))]
    assert column == [0.0, 1.0, 2.0, 3.0]
    frozen_column = [float(x) for x in tandem.data.Dataset.from_tensor_slices(frozen)]
    assert frozen_column == [0.0, 1.0, 2.0, 3.0]
    # Elements off their alignment (a view at an odd byte offset).
    misaligned = np.frombuffer(bytearray(17), dtype=np.float32, offset=1)
    assert not misaligned.flags.aligned
    with pytest.raises(ValueError, match="not aligned"):
        tandem.from_numpy(misaligned)
    assert tandem.tensor(misaligned).tolist() == [0.0] * 4


def test_comparisons_are_elementwise_and_truth_needs_one_element():
    # == compared identities (always False: Dataset.filter(lambda x, y: y == 1)
    # kept nothing), and truth came from len(): tensor([0.0]) was True.
    t = tandem.tensor([1.0, 2.0, 3.0])
    assert (t == 2.0).tolist() == [False, True, False]
    assert (t != tandem.tensor([1.0, 0.0, 3.0])).tolist() == [False, True, False]
    assert (t < 2).tolist() == [True, False, False] and (t >= 2).tolist() == [False, True, True]
    assert bool(tandem.tensor([0.0])) is False and bool(tandem.tensor(3)) is True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)
    assert len({t, t}) == 1 and hash(t) != hash(tandem.tensor([1.0, 2.0, 3.0]))
    ys = np.array([0, 1, 1, 2], np.int32)
    kept = tandem.data.Dataset.from_tensor_slices((ys, ys)).filter(lambda x, y: y == 1)
    assert [int(y) for _, y in kept] == [1, 1]


def test_values_an_integer_dtype_cannot_hold_are_refused():
    # numpy's cast wrapped them (300 as uint8 was 44) or made up a value
    # (3e9 as int32 was -2**31).
    for values, dtype in [([300, -1], "uint8"), ([3e9], "int32"), ([2.0**64], "int64"),
                          ([float("nan")], "int32"), ([-0.5, 256.0], "uint8")]:
        with pytest.raises(ValueError, match="not fit|cannot be"):
            tandem.tensor(values, dtype=dtype)
    assert tandem.tensor([255.9, -0.9], dtype="uint8").tolist() == [255, 0]  # truncated
    assert tandem.tensor([1.7, -2.2], dtype="int32").tolist() == [1, -2]
    assert tandem.tensor([2**40], dtype="int64").tolist() == [2**40]


def test_arguments_of_the_wrong_type_are_type_errors():
    # pybind11 raised RuntimeError("Unable to cast ...").
    t = tandem.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError):
        t.sum(axis=(0, 1))


def test_numpy_integers_index_and_shape_and_fractions_do_not():
    # numpy's integers were refused as indices and reshape sizes (a loop over
    # np.arange failed); floats and bools are not taken for integers.
    t = tandem.tensor(np.arange(6, dtype=np.float32))
    assert t[np.int64(4)].item() == 4.0
    assert [t[i].item() for i in np.arange(2)] == [0.0, 1.0]
    assert t.reshape(np.int64(2), np.int32(3)).shape == (2, 3)
    assert t.reshape((np.int64(3), -1)).shape == (3, 2)
    for bad in (True, 1.0, np.float32(1)):
        with pytest.raises(TypeError):
            t[bad]
    with pytest.raises(TypeError, match="reshape"):
        t.reshape(2.0, 3)
    with pytest.raises(TypeError, match="input_shape takes integers"):
        tandem.Sequential([tandem.layers.Dense(3)], input_shape=(4.9,))


def test_dlpack_refuses_misaligned_elements_as_from_numpy_does():
    misaligned = np.zeros(17, np.uint8)[1:].view(np.float32)
    with pytest.raises(ValueError, match="not aligned"):
        tandem.from_numpy(misaligned)
    with pytest.raises(ValueError, match="not aligned"):
        tandem.from_dlpack(misaligned)
    assert tandem.tensor(misaligned).shape == (4,)
