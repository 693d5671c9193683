"""The chunk cache ops: a hit returns the inserted tensor itself, misses and erasures are counted and
harmless, a lookup inside a traced loop runs when the loop does (never folded), and a cache goes when
cleared."""

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.ops import cache as ops
from ngra_testlib import lib


@pytest.fixture
def cache():
    assert lib() is not None
    name = ops.new_cache()
    yield name
    ops.cache_clear(name)


def test_hits_return_the_inserted_tensor_without_a_copy(cache):
    value = tf.constant(np.arange(12, dtype=np.int32).reshape(3, 4))
    found, empty = ops.cache_lookup(cache, 7, tf.int32)
    assert not found and empty.shape == (0,)
    ops.cache_insert(cache, 7, value)
    found, hit = ops.cache_lookup(cache, 7, tf.int32)
    assert found
    np.testing.assert_array_equal(hit, value)
    assert np.asarray(hit).ctypes.data == np.asarray(value).ctypes.data  # the same buffer
    assert ops.cache_stats(cache) == {"entries": 1, "bytes": 48, "hits": 1, "misses": 1}


def test_insert_replaces_and_erase_skips_absent_and_negative_keys(cache):
    ops.cache_insert(cache, 1, tf.zeros([4]))
    ops.cache_insert(cache, 1, tf.ones([2]))
    ops.cache_insert(cache, 2, tf.ones([3]))
    assert ops.cache_stats(cache)["bytes"] == 4 * (2 + 3)
    ops.cache_erase(cache, tf.constant([2, -1, 9], tf.int64))
    np.testing.assert_array_equal(ops.cache_lookup(cache, 1, tf.float32)[1], [1, 1])
    assert not ops.cache_lookup(cache, 2, tf.float32)[0]
    assert ops.cache_stats(cache, reset=True)["entries"] == 1
    assert ops.cache_stats(cache)["hits"] == 0
    assert ops.cache_clear(cache) == 1 and ops.cache_stats(cache)["entries"] == 0


def test_a_lookup_as_another_dtype_is_refused(cache):
    ops.cache_insert(cache, 3, tf.zeros([2], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="cache entry 3 holds int64, looked up as int32"):
        ops.cache_lookup(cache, 3, tf.int32)


def test_lookups_in_a_loop_see_inserts_ordered_before_them(cache):
    """A stateless lookup with constant inputs runs when the function runs, not when it is optimised."""

    @tf.function
    def loop():
        def body(s, total):
            token = ops.cache_insert(cache, s, tf.fill([s + 1], tf.cast(s, tf.float32)))
            found, value = ops.cache_lookup(cache, s, tf.float32, after=token)
            return s + 1, total + tf.reduce_sum(value) * tf.cast(found, tf.float32)

        return tf.while_loop(lambda s, _: s < 4, body, (tf.constant(0, tf.int64), tf.constant(0.0)))[1]

    @tf.function
    def constant_lookup():
        return ops.cache_lookup(cache, 0, tf.float32)

    assert not constant_lookup()[0]  # traced and optimised while the cache is empty
    assert float(loop()) == 0 * 1 + 1 * 2 + 2 * 3 + 3 * 4
    assert constant_lookup()[0]
