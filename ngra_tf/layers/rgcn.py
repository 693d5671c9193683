"""Relational GCN (R-GCN, Schlichtkrull et al.) in SAGA form, as PyG's RGCNConv (aggr="mean").

    out_v = x_v W_root + sum over relations r of mean over in-edges (u -> v) of type r of x_u W_r  (+ b)

ApplyEdge multiplies the source row by its relation's matrix and by the edge's
normalisation 1 / |N_r(v)| (its destination's in-degree in that relation);
Gather sums; ApplyVertex adds the self-connection and the bias. Written as
"the source row times every relation's matrix, then the edge's own slot",
the products are source-only, so the compiler hoists them (once per vertex),
and what is left per edge, a typed select times a weight, fuses into edge
code: no per-edge row is ever made.

Edge data is [E, 2]: the relation (an integer in [0, num_relations), stored
as a float) and the normalisation; `relational_edge_data` makes it.
"""

import keras
import numpy as np
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


def relational_edge_data(graph, relations) -> np.ndarray:
    """R-GCN's edge data for `graph`, in its edges' given order: [relation, 1 / |N_relation(dst)|] per edge."""
    relations = np.asarray(relations)
    if relations.shape != (graph.num_edges,) or not np.issubdtype(relations.dtype, np.integer):
        raise ValueError(f"relations must be one integer per edge ({graph.num_edges}), got "
                         f"{relations.dtype} {relations.shape}")
    if relations.size and relations.min() < 0:
        raise ValueError(f"relations must be >= 0, got {int(relations.min())}")
    dst = np.asarray(graph.dst, np.int64)
    key = dst * (int(relations.max(initial=0)) + 1) + relations
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return np.stack([relations.astype(np.float32), 1.0 / counts[inverse].astype(np.float32)], axis=1)


@keras.saving.register_keras_serializable(package="ngra_tf")
class RGCN(DenseVertexMixin, SAGALayer):
    accumulator = "sum"
    probe_edge_data = ((2,), "float32")  # [relation, normalisation]

    def __init__(self, units, num_relations, **kwargs):
        super().__init__(units, **kwargs)
        self.num_relations = int(num_relations)
        if self.num_relations < 1:
            raise ValueError(f"num_relations must be positive, got {num_relations}")

    def build(self, input_shape):
        self.relation_kernels = self.add_weight(
            name="relation_kernels", shape=(self.num_relations, input_shape[-1], self.units),
            initializer=self.dense.kernel_initializer, regularizer=self.dense.kernel_regularizer)
        super().build(input_shape)

    def apply_edge(self, edge):
        per_relation = tf.einsum("ef,rfg->erg", edge.src, self.relation_kernels)
        relation = tf.cast(edge.data[:, 0], tf.int32)
        return tf.gather(per_relation, relation, batch_dims=1) * edge.data[:, 1:2]

    def apply_vertex(self, vertex, accum):
        return self.activation(accum + self.dense(vertex))

    def get_config(self):
        config = super().get_config()
        config.update(num_relations=self.num_relations)
        return config
