"""Dropout that also takes sparse rows: bag-of-words features kept sparse up to the first matmul."""

import keras
import tensorflow as tf

from ngra_tf.compiler.replay import sparse_with_values
from ngra_tf.ops.random import uniform_at


@keras.saving.register_keras_serializable(package="ngra_tf")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout, which on a tf.SparseTensor drops its stored values only, and exactly those that
    keras.layers.Dropout with the same seed drops from the dense rows: the uniforms are drawn at the stored
    entries' positions alone (ngra_tf.ops.random.uniform_at), so the cost is the non-zeros' and training does
    not change with how the features are held (sparse on one device, dense over several or from a store)."""

    def compute_output_spec(self, inputs, *args, **kwargs):
        return keras.KerasTensor(inputs.shape, inputs.dtype, sparse=getattr(inputs, "sparse", False))

    def call(self, inputs, training=False):
        if not isinstance(inputs, tf.SparseTensor):
            return super().call(inputs, training=training)
        if self.noise_shape is not None:
            raise ValueError(f"{self.name}: noise_shape applies to dense rows; sparse rows drop each value alone")
        if not training or self.rate == 0:
            return inputs
        values = inputs.values
        if self.rate == 1:
            return sparse_with_values(inputs, tf.zeros_like(values))
        # keras's dense dropout: stateless_dropout(x, rate, seed) with the generator's next state, which keras
        # casts to int32 by a floormod (a no-op below 2**31 - 2, where its seeds and counters stay).
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        strides = tf.math.cumprod(inputs.dense_shape, exclusive=True, reverse=True)
        positions = tf.reduce_sum(inputs.indices * strides, axis=1)
        # (rate and scale made in the values' dtype, not cast from float32: as stateless_dropout makes them)
        kept = uniform_at(seed, positions, values.dtype) >= tf.constant(self.rate, values.dtype)
        scaled = values * tf.constant(1 / (1 - self.rate), values.dtype)
        return sparse_with_values(inputs, tf.where(kept, scaled, tf.zeros_like(values)))
