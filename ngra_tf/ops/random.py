"""Stateless uniforms at chosen flat positions: what tf.random.stateless_uniform would draw there.

    u = uniform_at(seed, positions, tf.float32)
    # == tf.gather(tf.reshape(tf.random.stateless_uniform(shape, seed), [-1]), positions) for any shape that
    #    holds the positions, without drawing the rest

Dropout on sparse rows draws at the stored entries only and still drops what
dense dropout drops there (ngra_tf.layers.Dropout). Without the compiled
library the reference draws every position up to the largest and gathers.
"""

import tensorflow as tf

from ngra_tf.ops._loader import library

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def uniform_at(seed, positions, dtype=tf.float32):
    """[len(positions)] values in [0, 1): those of stateless_uniform(shape, seed, dtype) at these flat positions.

    seed: shape [2], int32 or int64, as stateless_uniform takes it; positions: int64 >= 0."""
    dtype = tf.as_dtype(dtype)
    if dtype not in DTYPES:
        raise ValueError(f"uniform_at: dtype must be one of {', '.join(d.name for d in DTYPES)}, got {dtype.name}")
    positions = tf.convert_to_tensor(positions, tf.int64)
    lib = library()
    if lib is None:
        size = tf.reduce_max(tf.concat([positions + 1, [0]], 0))
        return tf.gather(tf.random.stateless_uniform([size], seed, dtype=dtype), positions)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)  # as stateless_uniform derives them
    return lib.ngra_uniform_at(key, counter, positions, dtype=dtype)
