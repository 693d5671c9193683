"""Gated GCN (G-GCN, Marcheggiani & Titov; NGra Fig. 2) in SAGA form.

ApplyEdge gates each source row by its two endpoints,
sigmoid(edge.src W_H + edge.dst W_C) * edge.src; Gather sums; ApplyVertex is
act(accum W + b).
"""

import keras
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class GatedGCN(DenseVertexMixin, SAGALayer):
    accumulator = "sum"

    def build(self, input_shape):
        width = input_shape[-1]
        self.gate_src = self.linear(width, name="gate_src")  # W_H
        self.gate_dst = self.linear(width, name="gate_dst")  # W_C
        super().build(input_shape)

    def apply_edge(self, edge):
        return tf.sigmoid(self.gate_src(edge.src) + self.gate_dst(edge.dst)) * edge.src

    def apply_vertex(self, vertex, accum):
        return self.activation(self.dense(accum))
