"""Each Python op's gradient (tandem's C++ autograd) against central finite
differences of its own forward, and forward values against numpy."""
import numpy as np
import pytest

import tandem
from tandem import ops

rng = np.random.default_rng(7)


def arr(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def away_from_zero(*shape):
    a = arr(*shape)
    return np.where(np.abs(a) < 0.2, a + np.sign(a + 1e-9) * 0.3, a).astype(np.float32)


def gradcheck(fn, *arrays, h=1e-2, rtol=3e-2, atol=3e-3):
    inputs = [tandem.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*inputs)
    weights = np.random.default_rng(1).normal(size=out.shape).astype(np.float32)
    (out * tandem.tensor(weights)).sum().backward() if out.ndim else (out * float(weights)).backward()
    w64 = weights.astype(np.float64)

    def total(values):
        return float((fn(*[tandem.tensor(v) for v in values]).numpy().astype(np.float64) * w64).sum())

    for k, a in enumerate(arrays):
        numeric = np.zeros(a.shape, np.float64)
        for idx in np.ndindex(a.shape):
            plus = [v.copy() for v in arrays]
            minus = [v.copy() for v in arrays]
            plus[k][idx] += h
            minus[k][idx] -= h
            numeric[idx] = (total(plus) - total(minus)) / (2 * h)
        assert inputs[k].grad is not None, f"input {k} got no gradient"
        np.testing.assert_allclose(inputs[k].grad.numpy(), numeric, rtol=rtol, atol=atol,
                                   err_msg=f"input {k}")


LABELS = np.array([2, 0, 1], np.int32)
INDICES = np.array([[0, 3], [3, 1]], np.int32)

CASES = {
    "add": (lambda a, b: a + b, [arr(3, 4), arr(3, 4)]),
    "add_broadcast": (lambda a, b: a + b, [arr(3, 4), arr(4)]),
    "add_broadcast_reversed": (lambda a, b: b + a, [arr(3, 4), arr(1, 4)]),
    "sub": (lambda a, b: a - b, [arr(3, 4), arr(4)]),
    "rsub_scalar": (lambda a: 2.0 - a, [arr(3, 4)]),
    "rsub_scalar_one_element": (lambda a: 2.0 - a, [arr(1)]),
    "rdiv_scalar_one_element": (lambda a: 1.0 / a, [arr(1, 1, low=0.5, high=2.0)]),
    "mul": (lambda a, b: a * b, [arr(3, 4), arr(3, 4)]),
    "mul_scalar": (lambda a: a * 3.0, [arr(5)]),
    "div": (lambda a, b: a / b, [arr(3, 4), arr(4, low=0.5, high=2.0)]),
    "rdiv": (lambda a, b: a / b, [arr(4), arr(3, 4, low=0.5, high=2.0)]),
    "neg_pow": (lambda a: -(a ** 2), [arr(2, 3)]),
    "matmul": (lambda a, b: a @ b, [arr(3, 5), arr(5, 2)]),
    "batched_matmul": (lambda a, b: ops.matmul(a, b), [arr(2, 3, 4), arr(2, 4, 2)]),
    "batched_matmul_shared": (lambda a, b: a @ b, [arr(2, 3, 4), arr(4, 2)]),
    "relu": (ops.relu, [away_from_zero(3, 4)]),
    "gelu": (ops.gelu, [arr(3, 4)]),
    "gelu_tanh": (ops.gelu_tanh, [arr(3, 4)]),
    "silu": (ops.silu, [arr(3, 4)]),
    "sigmoid": (ops.sigmoid, [arr(3, 4)]),
    "tanh": (ops.tanh, [arr(3, 4)]),
    "exp": (ops.exp, [arr(3, 4)]),
    "log": (ops.log, [arr(3, 4, low=0.5, high=2.0)]),
    "softmax": (ops.softmax, [arr(3, 5)]),
    "log_softmax": (ops.log_softmax, [arr(3, 5)]),
    "sum": (ops.sum, [arr(3, 4)]),
    "mean_axis": (lambda a: ops.mean(a, axis=0, keepdims=True), [arr(3, 4)]),
    "sum_axis": (lambda a: a.sum(axis=-1), [arr(3, 4)]),
    "reshape": (lambda a: a.reshape(4, -1) * a.reshape(4, 3), [arr(3, 4)]),
    "transpose": (lambda a: ops.transpose(a, 0, 1), [arr(3, 4)]),
    "permute": (lambda a: a.permute(2, 0, 1), [arr(2, 3, 4)]),
    "getitem": (lambda a: a[1:, 2] * 2.0, [arr(3, 4)]),
    "getitem_ellipsis": (lambda a: a[..., 1:3], [arr(2, 3, 4)]),
    "split": (lambda a: ops.split(a, [1, 3], axis=1)[1], [arr(2, 4)]),
    "concat": (lambda a, b: ops.concat([a, b], axis=1), [arr(2, 3), arr(2, 2)]),
    "flatten": (ops.flatten, [arr(2, 3, 2)]),
    "linear": (lambda x, w, b: ops.linear(x, w, b), [arr(3, 4), arr(2, 4), arr(2)]),
    "linear_relu": (lambda x, w: ops.linear(x, w, activation="relu"), [arr(3, 4), arr(2, 4)]),
    "conv2d": (lambda x, w, b: ops.conv2d(x, w, b, padding=1), [arr(1, 4, 4, 2), arr(3, 3, 2, 2), arr(2)]),
    "conv2d_stride": (lambda x, w: ops.conv2d(x, w, stride=2), [arr(1, 5, 5, 1), arr(3, 3, 1, 2)]),
    "max_pool2d": (lambda x: ops.max_pool2d(x, 2), [np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2) * 0.1]),
    "avg_pool2d": (lambda x: ops.avg_pool2d(x, 2), [arr(1, 4, 4, 2)]),
    "global_avg_pool": (ops.global_avg_pool, [arr(2, 3, 3, 2)]),
    "layer_norm": (lambda x, g, b: ops.layer_norm(x, g, b), [arr(3, 5), arr(5), arr(5)]),
    "rms_norm": (lambda x, g: ops.rms_norm(x, g), [arr(3, 5), arr(5)]),
    "attention": (lambda q, k, v: ops.attention(q, k, v), [arr(1, 2, 3, 4), arr(1, 2, 3, 4), arr(1, 2, 3, 4)]),
    "attention_packed": (lambda qkv: ops.attention_packed(qkv), [arr(3, 1, 2, 3, 4)]),
    "attention_full": (lambda q, k, v: ops.attention(q, k, v, causal=False), [arr(1, 1, 3, 2), arr(1, 1, 4, 2), arr(1, 1, 4, 2)]),
    "embedding": (lambda w: ops.embedding(w, INDICES), [arr(4, 3)]),
    "softmax_cross_entropy": (lambda x: ops.softmax_cross_entropy(x, LABELS), [arr(3, 4)]),
    "binary_cross_entropy": (lambda x: ops.binary_cross_entropy(x, np.array([[0.0, 1.0], [1.0, 0.3]], np.float32)), [arr(2, 2)]),
    "mean_squared_error": (lambda x: ops.mean_squared_error(x, np.zeros((3, 2), np.float32)), [arr(3, 2)]),
    "mean_absolute_error": (lambda x: ops.mean_absolute_error(x, np.zeros((3, 2), np.float32)), [away_from_zero(3, 2)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    fn, arrays = CASES[name]
    gradcheck(fn, *arrays)


def test_forward_values_against_numpy():
    a, b = arr(3, 4), arr(4, 2)
    np.testing.assert_allclose((tandem.tensor(a) @ tandem.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    x = arr(2, 5)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ops.softmax(x).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    # axis as Keras's (the last one only, named either way).
    np.testing.assert_array_equal(ops.softmax(x, axis=1).numpy(), ops.softmax(x).numpy())
    np.testing.assert_allclose(ops.log_softmax(x, axis=-1).numpy(),
                               np.log(e / e.sum(axis=1, keepdims=True)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="over the last axis only"):
        ops.softmax(x, axis=0)
    np.testing.assert_allclose(ops.mean(x, axis=1).numpy(), x.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(tandem.tensor(x)[1, 2:4].numpy(), x[1, 2:4])


def test_cast_gradient_is_converted_back():
    # Finite differences drown in bf16's rounding: the round trip's gradient
    # is the incoming one, rounded to bf16 and back.
    x = tandem.tensor(arr(3, 3), requires_grad=True)
    w = arr(3, 3)
    (ops.cast(ops.cast(x, "bfloat16"), "float32") * tandem.tensor(w)).sum().backward()
    assert x.grad.dtype == tandem.float32
    np.testing.assert_allclose(x.grad.numpy(), w, rtol=1e-2)


def test_grad_accumulates_and_clears():
    x = tandem.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    x.grad = None
    assert x.grad is None


def test_no_grad_records_nothing():
    x = tandem.tensor([1.0], requires_grad=True)
    with tandem.no_grad():
        y = x * 2.0
    with pytest.raises(tandem.Error):
        y.sum().backward()


def test_numpy_left_operands_defer_to_the_tensor():
    x = arr(4, 3)
    w = tandem.tensor(arr(3, 2), requires_grad=True)
    b = tandem.tensor(arr(2), requires_grad=True)
    out = x @ w + b            # numpy on the left: the tensor's reflected operators
    assert isinstance(out, tandem.Tensor)
    ops.sum(out).backward()
    np.testing.assert_allclose(w.grad.numpy(), np.repeat(x.sum(axis=0)[:, None], 2, axis=1), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [4.0, 4.0])


def test_a_scalar_and_a_one_element_tensor_give_the_tensors_shape():
    # The scalar's shape () won whichever side it stood on: 1.0 - t for t
    # of shape (1,) was a 0-d tensor (numpy's is (1,)).
    t = tandem.tensor([5.0])
    u = tandem.tensor([[5.0]])
    for result, shape in [(1.0 - t, (1,)), (1 + t, (1,)), (2 * t, (1,)), (1 / t, (1,)),
                          (t - 1, (1,)), (1.0 - u, (1, 1)), (ops.add(1.0, t), (1,)),
                          (tandem.tensor(2.0) - t, (1,))]:
        assert result.shape == shape
    assert (2.0 - t).numpy().tolist() == [-3.0]
    assert (1.0 / u).numpy()[0, 0] == pytest.approx(0.2)


def test_indices_are_exact_integers_and_floats_are_refused():
    # An int index went through float (row 16777217 read row 16777216), and
    # float labels and indices were truncated (0.9 read as 0).
    table = tandem.tensor(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="must be integers"):
        ops.embedding(table, np.array([1.7, 0.2]))
    with pytest.raises(TypeError, match="must be integers"):
        ops.softmax_cross_entropy(np.zeros((2, 3), np.float32), np.array([0.9, 1.9]))
    with pytest.raises(tandem.InvalidArgument, match="index 16777217 at position 0"):
        ops.embedding(table, 16777217)
