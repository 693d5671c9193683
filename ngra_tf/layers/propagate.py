"""GCN propagation without weights: the propagation step of APPNP (Klicpera et al.).

ApplyEdge scales the source row by the edge's static weight (the graph's
edge_data, e.g. graph.gcn_norm() of a graph with self loops), as GCN's does;
Gather sums; ApplyVertex returns the sum: out = A_hat x. There are no
weights, so APPNP is a functional model around it:

    h = mlp(x); z = h
    for _ in range(K):
        z = keras.layers.Add()([keras.layers.Rescaling(1 - alpha)(GCNPropagate()(z, graph=graph)),
                                keras.layers.Rescaling(alpha)(h)])

Compiled (`layer.explain()`): the edge stage fuses into one fused_gather
(program src_mul_edge), with no per-edge tensor; nothing is left to hoist
and nothing to narrow (there is no matmul).
"""

import keras

from ngra_tf.layers.gcn import weighted_source
from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class GCNPropagate(SAGALayer):
    accumulator = "sum"

    def apply_edge(self, edge):
        return weighted_source(edge)

    def apply_vertex(self, vertex, accum):
        return accum
