"""CommNet (Sukhbaatar et al.; NGra Fig. 9) in SAGA form.

ApplyEdge passes the source row through; Gather sums; ApplyVertex mixes the
vertex's own state and the sum: act(vertex W_H + accum W_C + b).
"""

import keras

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class CommNet(DenseVertexMixin, SAGALayer):
    accumulator = "sum"

    def __init__(self, units, **kwargs):
        super().__init__(units, **kwargs)
        self.self_dense = self.linear(name="self_dense")  # W_H; self.dense is W_C (+ b)

    def apply_edge(self, edge):
        return edge.src

    def apply_vertex(self, vertex, accum):
        return self.activation(self.self_dense(vertex) + self.dense(accum))
