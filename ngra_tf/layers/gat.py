"""Graph attention (GAT, Velickovic et al.) in SAGA form.

ApplyEdge transforms both endpoints per head (z = x W), scores the edge with
LeakyReLU(a_src . z_src + a_dst . z_dst), normalises the scores over each
destination's in-edges (edge.softmax, so nobody hand-rolls the softmax) and
weights z_src by them; Gather sums; ApplyVertex concatenates the heads (or
averages them, for an output layer) and adds the bias.

Compiled, the transforms and the per-head scores are hoisted (once per
vertex) and the rest fuses into attention with an online softmax: a
destination's normalisation runs chunk by chunk through the kernels' init,
with no per-edge tensor. attention_dropout (edge.dropout) draws each weight
at its edge's id and head, so it is a mask the fused kernels load with the
edge, the same whatever the chunking, and dropout on the whole [edges,
heads] tensor of weights in the user's order.
"""

import keras
import tensorflow as tf

from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class GAT(SAGALayer):
    accumulator = "sum"

    def __init__(self, units, heads=1, concat_heads=True, activation=None, attention_dropout=0.0,
                 negative_slope=0.2, kernel_initializer="glorot_uniform", kernel_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.heads = int(units), int(heads)
        if self.units < 1 or self.heads < 1:
            raise ValueError(f"units and heads must be positive, got {units} and {heads}")
        self.concat_heads = bool(concat_heads)
        self.activation = keras.activations.get(activation)
        self.attention_dropout = float(attention_dropout)
        self.negative_slope = float(negative_slope)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        if not 0 <= self.attention_dropout < 1:
            raise ValueError(f"attention_dropout must be in [0, 1), got {attention_dropout}")
        self.attention_seed = keras.random.SeedGenerator(name="attention_seed")

    def build(self, input_shape):
        def weight(name, shape):
            return self.add_weight(name=name, shape=shape, initializer=self.kernel_initializer,
                                   regularizer=self.kernel_regularizer)

        self.kernel = weight("kernel", (input_shape[-1], self.heads * self.units))
        self.attention_src = weight("attention_src", (self.heads, self.units))
        self.attention_dst = weight("attention_dst", (self.heads, self.units))
        width = self.heads * self.units if self.concat_heads else self.units
        self.bias = self.add_weight(name="bias", shape=(width,), initializer="zeros")
        super().build(input_shape)

    def _heads(self, x):
        return tf.reshape(x @ self.kernel, [-1, self.heads, self.units])

    def apply_edge(self, edge):
        z_src, z_dst = self._heads(edge.src), self._heads(edge.dst)
        scores = tf.reduce_sum(z_src * self.attention_src, -1) + tf.reduce_sum(z_dst * self.attention_dst, -1)
        alpha = edge.softmax(tf.nn.leaky_relu(scores, self.negative_slope))  # [E, heads]
        alpha = edge.dropout(alpha, self.attention_dropout, self.attention_seed)
        return tf.reshape(alpha[:, :, None] * z_src, [-1, self.heads * self.units])

    def apply_vertex(self, vertex, accum):
        if not self.concat_heads:
            accum = tf.reduce_mean(tf.reshape(accum, [-1, self.heads, self.units]), axis=1)
        return self.activation(accum + self.bias)

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, heads=self.heads, concat_heads=self.concat_heads,
                      activation=keras.activations.serialize(self.activation),
                      attention_dropout=self.attention_dropout, negative_slope=self.negative_slope,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer))
        return config
