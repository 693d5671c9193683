"""The explicit data-movement ops: real copies, any dtype, gradients that
travel back the way the data came, and exact byte counters."""

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.ops import copy_d2d, copy_d2h, copy_h2d, copy_stats
from ngra_testlib import lib

COPIES = {"h2d": copy_h2d, "d2h": copy_d2h, "d2d": copy_d2d}
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"

VALUES = {
    "float32": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "float64": np.linspace(-1, 1, 5),
    "int64": np.array([[-(2**40), 3], [7, 2**62]], np.int64),
    "int8": np.array([-128, 0, 127], np.int8),
    "bool": np.array([True, False, True]),
    "string": np.array([b"", b"ab", b"\x00\xffxyz"], object),
    "scalar": np.float32(3.5),
    "empty": np.zeros((0, 4), np.float32),
}


@pytest.fixture(autouse=True)
def clean_counters():
    copy_stats(reset=True)
    yield
    copy_stats(reset=True)


@pytest.mark.parametrize("dtype", list(VALUES))
@pytest.mark.parametrize("kind", list(COPIES))
def test_copy_returns_equal_values(kind, dtype):
    x = tf.constant(VALUES[dtype])
    y = COPIES[kind](x)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), x.numpy())


@pytest.mark.parametrize("kind", list(COPIES))
def test_copy_is_a_new_buffer(kind):
    x = tf.constant(np.arange(1000, dtype=np.float32))
    y = COPIES[kind](x)
    # A new buffer, not an alias of the input.
    assert np.asarray(y).ctypes.data != np.asarray(x).ctypes.data  # tf.identity would alias
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    # Mutating a variable read afterwards does not reach an earlier copy.
    v = tf.Variable(np.ones(8, np.float32))
    before = COPIES[kind](v)
    v.assign(np.zeros(8, np.float32))
    np.testing.assert_array_equal(before.numpy(), 1)


@pytest.mark.parametrize("kind", list(COPIES))
def test_copy_stats_count_bytes_exactly(kind):
    COPIES[kind](tf.zeros([1000, 10], tf.float32))
    assert copy_stats(reset=True) == {(kind, CPU): 40000}
    assert copy_stats() == {}
    COPIES[kind](tf.zeros([3], tf.float64))
    COPIES[kind](tf.zeros([2, 5], tf.int8))
    COPIES[kind](tf.constant([b"abc", b"de"]))  # strings count their bytes
    assert copy_stats() == {(kind, CPU): 24 + 10 + 5}
    assert copy_stats(reset=False) == {(kind, CPU): 39}  # reading does not reset


def test_copy_stats_keep_kinds_apart():
    copy_h2d(tf.zeros([10], tf.float32))
    copy_d2h(tf.zeros([10], tf.float64))
    copy_d2h(tf.zeros([1], tf.float64))
    copy_d2d(tf.zeros([7], tf.bool))
    assert copy_stats(reset=True) == {("h2d", CPU): 40, ("d2h", CPU): 88, ("d2d", CPU): 7}


def test_copy_stats_in_tf_function():
    @tf.function
    def move(x):
        return copy_d2h(copy_h2d(x) * 2)

    x = tf.ones([25, 4])
    for _ in range(3):
        np.testing.assert_array_equal(move(x).numpy(), 2)
    assert copy_stats(reset=True) == {("h2d", CPU): 3 * 400, ("d2h", CPU): 3 * 400}


def test_raw_copy_stats_op():
    copy_h2d(tf.zeros([4], tf.float32))
    kinds, devices, counts = lib().ngra_copy_stats(tf.constant(True))
    assert kinds.numpy().tolist() == [b"h2d"] and devices.numpy().tolist() == [CPU.encode()]
    assert counts.numpy().tolist() == [16]
    assert lib().ngra_copy_stats(tf.constant(False))[2].numpy().tolist() == []
    with pytest.raises(tf.errors.InvalidArgumentError, match="reset"):
        lib().ngra_copy_stats(tf.constant([True]))


# The gradient of a copy is the opposite copy (d2d's is a d2d): its bytes show in the counters.
GRADIENT_KIND = {"h2d": "d2h", "d2h": "h2d", "d2d": "d2d"}


@pytest.mark.parametrize("kind", list(COPIES))
def test_gradient_flows_back_through_the_opposite_copy(kind):
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    upstream = tf.constant(np.arange(6, 12, dtype=np.float32).reshape(2, 3))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = COPIES[kind](x)
    copy_stats(reset=True)
    grad = tape.gradient(y, x, output_gradients=upstream)
    np.testing.assert_array_equal(grad.numpy(), upstream.numpy())
    assert copy_stats(reset=True) == {(GRADIENT_KIND[kind], CPU): 24}


def test_gradient_through_a_chain_of_copies():
    x = tf.constant([1.0, 2.0, 3.0], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(copy_d2h(copy_d2d(copy_h2d(x)) ** 2))
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0, 6.0])
