"""Stateless uniforms at chosen flat positions: what tf.random.stateless_uniform would draw there.

    u = uniform_at(seed, positions, tf.float32)
    # == tf.gather(tf.reshape(tf.random.stateless_uniform(shape, seed), [-1]), positions) for any shape that
    #    holds the positions, without drawing the rest

Dropout on sparse rows draws at the stored entries only and still drops what
dense dropout drops there (ngra_tf.layers.Dropout). Without the compiled
library the reference draws every position up to the largest and gathers.

The same drawing serves keras's dropout itself, bit for bit: of some rows of a
tensor (dropout_rows, edge.dropout's mask) and of a whole tensor in one pass
(dropout, dense rows in ngra_tf.layers.Dropout).
"""

import numpy as np
import tensorflow as tf

from ngra_tf.ops._loader import library

tf.no_gradient("NgraUniformAt")
tf.no_gradient("NgraDropoutMask")

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def uniform_at(seed, positions, dtype=tf.float32):
    """Values in [0, 1) shaped like `positions`: those of stateless_uniform(shape, seed, dtype) at these flat
    positions.

    seed: shape [2], int32 or int64, as stateless_uniform takes it; positions: int64 >= 0, any shape."""
    dtype = tf.as_dtype(dtype)
    if dtype not in DTYPES:
        raise ValueError(f"uniform_at: dtype must be one of {', '.join(d.name for d in DTYPES)}, got {dtype.name}")
    positions = tf.convert_to_tensor(positions, tf.int64)
    lib = library()
    if lib is None:
        size = tf.reduce_max(tf.concat([tf.reshape(positions, [-1]) + 1, [0]], 0))
        return tf.gather(tf.random.stateless_uniform([size], seed, dtype=dtype), positions)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)  # as stateless_uniform derives them
    return lib.ngra_uniform_at(key, counter, positions, dtype=dtype)


def dropout_seed(state):
    """keras's int32 seed from a SeedGenerator state: what keras.random.dropout draws with (keras casts by a
    floormod, a no-op below 2**31 - 2, where its seeds and counters stay)."""
    return tf.cast(tf.math.floormod(state, tf.int32.max - 1), tf.int32)


def dropout_rows(values, rate: float, seed, ids):
    """Dropout on rows `values` [n, ...] that are rows `ids` [n] of a larger tensor: what
    keras.random.dropout(whole, rate, seed) does to those rows (kept entries scaled by 1 / (1 - rate)).

    The mask is drawn at the rows' flat positions in the whole tensor, so a row drops the same entries whichever
    rows come with it. It is a multiplier (0 or the scale), which edge code loads like edge data."""
    dtype, row_shape = values.dtype, values.shape[1:].as_list()
    width = int(np.prod(row_shape, dtype=np.int64))
    if width == 0:
        return values
    ids = tf.cast(ids, tf.int64)
    # (rate and scale made in the values' dtype, as tf.nn.experimental.stateless_dropout makes them)
    rate_t, scale = tf.constant(rate, dtype), tf.constant(1 / (1 - rate), dtype)
    lib = library()
    if lib is None:
        positions = ids[:, None] * width + tf.range(width, dtype=tf.int64)[None]
        mask = tf.where(uniform_at(seed, positions, dtype) >= rate_t, scale, tf.constant(0, dtype))
    else:
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
        mask = lib.ngra_dropout_mask(key, counter, ids, rate_t, scale, width=width)
    return values * tf.reshape(mask, [-1] + row_shape)


def dropout(x, rate: float, seed):
    """tf.nn.experimental.stateless_dropout(x, rate, seed) (what keras.random.dropout computes with the seed
    dropout_seed gives), bit for bit, in one pass that keeps no mask: the gradient draws the same mask again.

    rate: a number in (0, 1); seed: int32 [2]. Without the compiled library, TensorFlow's own."""
    lib = library()
    if lib is None:
        return tf.nn.experimental.stateless_dropout(x, rate, seed)
    x = tf.convert_to_tensor(x)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    return lib.ngra_dropout(key, counter, x, tf.constant(rate, x.dtype), tf.constant(1 / (1 - rate), x.dtype))


@tf.RegisterGradient("NgraDropout")
def _dropout_grad(op, dy):
    # d(where(keep, x * scale, 0)) / dx = where(keep, dy * scale, 0): the op itself on dy
    key, counter, _, rate, scale = op.inputs
    return None, None, library().ngra_dropout(key, counter, dy, rate, scale), None, None
