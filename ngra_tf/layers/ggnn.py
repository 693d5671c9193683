"""Gated graph neural network (GG-NN, Li et al.; NGra Fig. 12) in SAGA form.

ApplyEdge transforms the source row by its edge type's own matrix,
A(edge.data) edge.src; Gather sums; ApplyVertex is a GRU step whose state is
the vertex and whose input is the sum. The state width is `units`, so the
input must already be `units` wide (put a Dense before the first GG-NN layer).
Edge data must hold integer edge types in [0, num_edge_types).
"""

import keras
import tensorflow as tf

from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class GGNN(SAGALayer):
    accumulator = "sum"

    def __init__(self, units, num_edge_types, kernel_initializer="glorot_uniform", kernel_regularizer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.num_edge_types = int(num_edge_types)
        if self.units < 1 or self.num_edge_types < 1:
            raise ValueError(f"units and num_edge_types must be positive, got {units} and {num_edge_types}")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        # reset_after=False: the reset gate scales the state before its matmul, as in Li et al.
        self.gru = keras.layers.GRUCell(self.units, reset_after=False, name="gru", dtype=self.dtype_policy)

    def build(self, input_shape):
        if input_shape[-1] != self.units:
            raise ValueError(f"{self.name}: GG-NN keeps a state of width units={self.units}, but the input "
                             f"is {input_shape[-1]} wide; project it first (e.g. keras.layers.Dense)")
        self.edge_kernels = self.add_weight(
            name="edge_kernels", shape=(self.num_edge_types, self.units, self.units),
            initializer=self.kernel_initializer, regularizer=self.kernel_regularizer)
        super().build(input_shape)

    def apply_edge(self, edge):
        # A(type) h_src, written as "h_src times every type's matrix, then the
        # edge's own": the product is source-only, so the compiler hoists it
        # (once per vertex) and the selection fuses into type_select.
        per_type = tf.einsum("ef,tfg->etg", edge.src, self.edge_kernels)
        return tf.gather(per_type, tf.cast(edge.data, tf.int32), batch_dims=1)

    def apply_vertex(self, vertex, accum):
        state, _ = self.gru(accum, [vertex])
        return state

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, num_edge_types=self.num_edge_types,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer))
        return config
