"""uniform_at: the values tf.random.stateless_uniform draws at chosen flat positions, bit for bit, for every
dtype it draws, any shape and any order of positions; the reference (no library) gives the same; bad input is
refused with the argument named."""

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.ops import random as ops
from ngra_testlib import lib

SEEDS = [(0, 0), (3, 7), (123_456_789, 2**31 - 3), (-5, 11)]


@pytest.fixture(params=["kernel", "reference"])
def uniform_at(request, monkeypatch):
    if request.param == "kernel":
        assert lib() is not None
    else:
        monkeypatch.setattr(ops, "library", lambda: None)
    return ops.uniform_at


@pytest.mark.parametrize("dtype", ops.DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("seed", SEEDS)
def test_equals_stateless_uniform_at_the_positions(uniform_at, dtype, seed):
    shape = (37, 41)  # 1517 values: not a whole number of Philox groups
    full = tf.random.stateless_uniform(shape, seed, dtype=dtype).numpy().ravel()
    rng = np.random.default_rng(seed[0] & 0xFFFF)
    positions = np.concatenate([rng.permutation(full.size)[:700], [0, full.size - 1, 5, 5]])  # unsorted, repeated
    got = uniform_at(tf.constant(seed, tf.int64), positions, dtype)
    assert got.dtype == dtype and got.shape == (len(positions),)
    np.testing.assert_array_equal(got.numpy(), full[positions])


def test_does_not_depend_on_the_shape_or_the_seeds_integer_type(uniform_at):
    seed = (9, 4)
    wide = tf.random.stateless_uniform((3, 1000), seed).numpy().ravel()
    got32 = uniform_at(tf.constant(seed, tf.int32), np.arange(2000, 2400))
    got64 = uniform_at(tf.constant(seed, tf.int64), np.arange(2000, 2400))
    np.testing.assert_array_equal(got32.numpy(), wide[2000:2400])
    np.testing.assert_array_equal(got64.numpy(), wide[2000:2400])


def test_positions_past_two_to_the_32():
    """A 100k x 100k matrix's positions: checked against TensorFlow's own draw of the vector from there on
    (StatelessRandomUniformV2 with the counter moved on by position // 4 groups; alg 1 is Philox)."""
    assert lib() is not None  # (the reference would draw every position before them)
    seed = tf.constant((1, 2), tf.int64)
    start = 10_000_000_000  # a multiple of 4: it begins a group
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    low, high = (int(c) for c in counter.numpy())
    low += start // 4
    counter = tf.constant([low % 2**64, high + low // 2**64], tf.uint64)  # the 128-bit counter's carry
    tail = tf.raw_ops.StatelessRandomUniformV2(shape=[1000], key=key, counter=counter, alg=1)
    np.testing.assert_array_equal(ops.uniform_at(seed, np.arange(start, start + 1000)).numpy(), tail.numpy())


def test_empty_positions(uniform_at):
    assert uniform_at((1, 2), np.zeros([0], np.int64)).shape == (0,)


def test_in_a_traced_function_it_runs_each_call():
    positions = tf.constant([4, 0, 9], tf.int64)
    draw = tf.function(lambda seed: ops.uniform_at(seed, positions))
    a, b = draw(tf.constant([1, 1], tf.int64)), draw(tf.constant([1, 2], tf.int64))
    assert not np.array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(draw(tf.constant([1, 1], tf.int64)).numpy(), a.numpy())


def test_negative_positions_are_refused():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"positions must be >= 0, got positions\[1\] = -3"):
        ops.uniform_at((1, 2), [4, -3, 2])


def test_an_integer_dtype_is_refused():
    with pytest.raises(ValueError, match="uniform_at: dtype must be one of float16, bfloat16, float32, float64, "
                                         "got int32"):
        ops.uniform_at((1, 2), [0], tf.int32)


def test_a_malformed_key_is_refused():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"key must hold 1 uint64"):
        lib().ngra_uniform_at(tf.zeros([2], tf.uint64), tf.zeros([2], tf.uint64), tf.zeros([1], tf.int64),
                              dtype=tf.float32)


@pytest.mark.parametrize("dtype", ops.DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("row_shape", [(3,), (2, 5), (1,)])
def test_dropout_rows_is_keras_dropout_of_the_whole_tensor_at_those_rows(uniform_at, dtype, row_shape):
    """dropout_rows(rows `ids` of a tensor) == keras.random.dropout(the tensor)[ids], bit for bit, with the mask
    kernel (NgraDropoutMask) and without the library; rows in any order, repeated."""
    import keras

    rate, state = 0.6, np.array([12345, 6], np.int64)
    whole = tf.cast(tf.random.stateless_normal((53,) + row_shape, (1, 2)), dtype)
    generator = keras.random.SeedGenerator()
    generator.state.assign(state)
    want = keras.random.dropout(whole, rate, seed=generator).numpy()
    # A few rows at random; every row in shuffled order with some twice (narrow rows then draw the range once)
    for ids in (np.array([52, 0, 7, 7, 30, 1]), np.concatenate([np.random.default_rng(0).permutation(53), [9, 9]])):
        got = ops.dropout_rows(tf.gather(whole, ids), rate, ops.dropout_seed(tf.constant(state)), ids)
        np.testing.assert_array_equal(got.numpy(), want[ids])
    assert 0 < np.mean(want == 0) < 1


def test_dropout_rows_of_wide_rows_split_across_threads_are_keras_dropout():
    """Rows wide enough that the mask kernel splits them across threads (it weighs a row by its width) draw what
    keras.random.dropout of the whole tensor draws there."""
    import keras

    rate, state = 0.5, np.array([7, 3], np.int64)
    whole = tf.random.stateless_normal((53, 1400), (1, 2))
    generator = keras.random.SeedGenerator()
    generator.state.assign(state)
    want = keras.random.dropout(whole, rate, seed=generator).numpy()
    ids = np.concatenate([np.arange(53)[::-1], np.arange(53)])
    got = ops.dropout_rows(tf.gather(whole, ids), rate, ops.dropout_seed(tf.constant(state)), ids)
    np.testing.assert_array_equal(got.numpy(), want[ids])


def test_dropout_mask_refuses_negative_ids():
    assert lib() is not None
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([1, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ids must be >= 0 .* got ids\[1\] = -3 with width 2"):
        lib().ngra_dropout_mask(key, counter, tf.constant([0, -3], tf.int64), 0.5, 2.0, width=2)


@pytest.mark.parametrize("dtype", ops.DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(53, 3), (7, 602), (2, 5, 9), (4097,), (0, 6), (301, 602)])
def test_dropout_is_stateless_dropout_forward_and_backward(uniform_at, dtype, shape):
    """dropout(x) == tf.nn.experimental.stateless_dropout(x) bit for bit, and so is its gradient (the mask drawn
    again, none kept), with the one-pass kernel (NgraDropout) and without the library; sizes that end inside a
    Philox group and inside a 4096-entry stretch, and one the kernel splits across threads."""
    x = tf.cast(tf.random.stateless_normal(shape, (1, 2)), dtype)
    dy = tf.cast(tf.random.stateless_normal(shape, (3, 4)), dtype)
    seed = tf.constant([12345, 6], tf.int32)
    results = []
    for drop in (ops.dropout, tf.nn.experimental.stateless_dropout):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = drop(x, 0.6, seed)
        results.append((y.numpy(), tape.gradient(y, x, output_gradients=dy).numpy()))
    (y, dx), (want_y, want_dx) = results
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(dx, want_dx)
    if y.size:
        assert 0 < np.mean(y == 0) < 1 and np.array_equal(y == 0, dx == 0)


def test_dropout_runs_one_op_when_traced():
    """Traced, the dropout is NgraDropout (so the equality above tests the kernel, not TensorFlow's fallback)."""
    assert lib() is not None
    graph = tf.function(lambda x: ops.dropout(x, 0.5, tf.constant([1, 2]))).get_concrete_function(
        tf.TensorSpec([10, 4])).graph
    assert [op.type for op in graph.get_operations()].count("NgraDropout") == 1
