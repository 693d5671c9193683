"""Dropout that also takes sparse rows: bag-of-words features kept sparse up to the first matmul."""

import keras
import tensorflow as tf

from ngra_tf.compiler.replay import sparse_with_values


@keras.saving.register_keras_serializable(package="ngra_tf")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout, which on a tf.SparseTensor drops its stored values only: what dense dropout does
    to those rows, since a zero stays zero (the same rate, the same 1 / (1 - rate) scale), at the cost of the
    non-zeros instead of every entry."""

    def compute_output_spec(self, inputs, *args, **kwargs):
        return keras.KerasTensor(inputs.shape, inputs.dtype, sparse=getattr(inputs, "sparse", False))

    def call(self, inputs, training=False):
        if not isinstance(inputs, tf.SparseTensor):
            return super().call(inputs, training=training)
        if self.noise_shape is not None:
            raise ValueError(f"{self.name}: noise_shape applies to dense rows; sparse rows drop each value alone")
        return sparse_with_values(inputs, super().call(inputs.values, training=training))
