"""GCN (Kipf & Welling; NGra Fig. 10) in SAGA form.

ApplyEdge scales the source row by the edge's static weight (the graph's
edge_data, e.g. graph.gcn_norm()); Gather sums; ApplyVertex is a dense
transform: act(accum W + b).
"""

import keras
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


def weighted_source(edge):
    """GCN's message: the source row times the edge's scalar weight (edge.data).

    The compiler fuses it into fused_gather's src_mul_edge program."""
    return edge.src * tf.cast(edge.data, edge.src.dtype)[:, None]


@keras.saving.register_keras_serializable(package="ngra_tf")
class GCN(DenseVertexMixin, SAGALayer):
    accumulator = "sum"

    def apply_edge(self, edge):
        return weighted_source(edge)

    def apply_vertex(self, vertex, accum):
        return self.activation(self.dense(accum))
