"""A cache of tensors in host memory, kept across training steps: what the plan says will be read again.

    cache = new_cache()                                   # a name (an int) for a new, empty cache
    found, value = cache_lookup(cache, key, tf.int32, after=token)
    token = cache_insert(cache, key, value, after=token)
    token = cache_erase(cache, keys, after=token)         # keys < 0 are skipped
    cache_stats(cache)                                    # {"entries", "bytes", "hits", "misses"}
    cache_clear(cache)                                    # frees it (an executor does when it is released)

A hit returns the inserted tensor itself (no copy). The lookup is stateless,
so a loop's next step looks up while this one computes: `after` (the token
of the inserts it must follow) is its only ordering. Without the compiled
library there is no cache: every lookup misses and inserts are dropped, which
gives the same results (everything is read again).
"""

from __future__ import annotations

import itertools

import tensorflow as tf

from ngra_tf.ops._loader import library

_names = itertools.count(1)


def new_cache() -> int:
    """A name for a new cache of this process (it is made by its first insert)."""
    return next(_names)


def cache_lookup(cache, key, dtype, after=0):
    """(found, value): the tensor cached under `key` as `dtype`, or (False, an empty vector)."""
    lib = library()
    after = tf.cast(after, tf.int64)
    if lib is None:
        return tf.constant(False), tf.zeros([0], dtype)
    return lib.ngra_cache_lookup(tf.cast(cache, tf.int64), tf.cast(key, tf.int64), after, dtype=dtype)


def cache_insert(cache, key, value, after=0):
    """Caches `value` under `key`; returns a token for what must follow."""
    lib = library()
    after = tf.cast(after, tf.int64)
    if lib is None:
        return after
    return lib.ngra_cache_insert(tf.cast(cache, tf.int64), tf.cast(key, tf.int64), value, after)


def cache_erase(cache, keys, after=0):
    """Drops the entries of `keys` (a vector; negative keys are skipped); returns a token."""
    lib = library()
    after = tf.cast(after, tf.int64)
    if lib is None:
        return after
    return lib.ngra_cache_erase(tf.cast(cache, tf.int64), tf.cast(keys, tf.int64), after)


def cache_stats(cache, reset=False) -> dict:
    """{"entries", "bytes", "hits", "misses"} of a cache (hits and misses since the last reset)."""
    lib = library()
    if lib is None:
        return {"entries": 0, "bytes": 0, "hits": 0, "misses": 0}
    with tf.init_scope(), tf.device("/cpu:0"):  # (eagerly, even from inside a trace)
        values = lib.ngra_cache_stats(tf.constant(int(cache), tf.int64), tf.constant(bool(reset)))
    return dict(zip(("entries", "bytes", "hits", "misses"), (int(v) for v in values)))


def cache_clear(cache) -> int:
    """Frees a cache and its entries; returns how many there were."""
    lib = library()
    if lib is None:
        return 0
    with tf.init_scope(), tf.device("/cpu:0"):  # (eagerly: a finalizer may run it while a function is traced)
        return int(lib.ngra_cache_clear(tf.constant(int(cache), tf.int64)))


__all__ = ["cache_clear", "cache_erase", "cache_insert", "cache_lookup", "cache_stats", "new_cache"]
