"""keras.layers.Dropout in one pass on dense rows, and on sparse rows too (bag-of-words features kept sparse up
to the first matmul): the same entries dropped either way."""

import keras
import tensorflow as tf

from ngra_tf.compiler.replay import sparse_with_values
from ngra_tf.ops.random import dropout, dropout_seed, uniform_at
from ngra_tf.tf_compat import traced_for_xla


@keras.saving.register_keras_serializable(package="ngra_tf")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout, which on a tf.SparseTensor drops its stored values only, and exactly those that
    keras.layers.Dropout with the same seed drops from the dense rows: the uniforms are drawn at the stored
    entries' positions alone (ngra_tf.ops.random.uniform_at), so the cost is the non-zeros' and training does
    not change with how the features are held (sparse on one device, dense over several or from a store).

    Dense rows on a machine without GPUs drop in one pass (ngra_tf.ops.random.dropout, bit-equal to keras's
    dropout, which takes several passes and keeps the mask for the backward); traced for XLA (Keras's
    jit_compile=True), keras's own, which XLA fuses."""

    def compute_output_spec(self, inputs, *args, **kwargs):
        return keras.KerasTensor(inputs.shape, inputs.dtype, sparse=getattr(inputs, "sparse", False))

    def call(self, inputs, training=False):
        if not isinstance(inputs, tf.SparseTensor):
            if training and 0 < self.rate < 1 and self.noise_shape is None and _one_pass_applies():
                return dropout(inputs, self.rate, dropout_seed(self.seed_generator.next()))
            return super().call(inputs, training=training)
        if self.noise_shape is not None:
            raise ValueError(f"{self.name}: noise_shape applies to dense rows; sparse rows drop each value alone")
        if not training or self.rate == 0:
            return inputs
        values = inputs.values
        if self.rate == 1:
            return sparse_with_values(inputs, tf.zeros_like(values))
        # keras's dense dropout: stateless_dropout(x, rate, seed) with the generator's next state
        seed = dropout_seed(self.seed_generator.next())
        strides = tf.math.cumprod(inputs.dense_shape, exclusive=True, reverse=True)
        positions = tf.reduce_sum(inputs.indices * strides, axis=1)
        # (rate and scale made in the values' dtype, not cast from float32: as stateless_dropout makes them)
        kept = uniform_at(seed, positions, values.dtype) >= tf.constant(self.rate, values.dtype)
        scaled = values * tf.constant(1 / (1 - self.rate), values.dtype)
        return sparse_with_values(inputs, tf.where(kept, scaled, tf.zeros_like(values)))


def _one_pass_applies() -> bool:
    # NgraDropout has a CPU kernel only (with a GPU in use, keras's own dropout stays on the device) and no XLA
    # lowering.
    return not tf.config.list_logical_devices("GPU") and not traced_for_xla()
