"""Max-pooling GCN (GraphSAGE-pool; NGra Fig. 11) in SAGA form.

ApplyEdge runs a small network on every source row, sigma(edge.src W_pool + b);
Gather takes the element-wise max; ApplyVertex is act(accum W + b).
"""

import keras

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class MaxPoolGCN(DenseVertexMixin, SAGALayer):
    accumulator = "max"

    def __init__(self, units, pool_units=None, pool_activation="relu", **kwargs):
        super().__init__(units, **kwargs)
        self.pool_units = int(pool_units or units)
        self.pool_activation = keras.activations.get(pool_activation)
        self.pool = self.linear(self.pool_units, use_bias=True, name="pool")

    def apply_edge(self, edge):
        return self.pool_activation(self.pool(edge.src))

    def apply_vertex(self, vertex, accum):
        return self.activation(self.dense(accum))

    def get_config(self):
        config = super().get_config()
        config.update(pool_units=self.pool_units,
                      pool_activation=keras.activations.serialize(self.pool_activation))
        return config
