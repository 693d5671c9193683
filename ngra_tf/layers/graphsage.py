"""GraphSAGE (Hamilton et al.) in SAGA form, as PyTorch Geometric's SAGEConv computes it.

    out_i = act(normalize(lin_l(aggr_{j in N(i)} m_j) + lin_r(x_i)))

lin_l carries the bias and lin_r none (no lin_r with root_weight=False).
With aggregator="mean", m_j = x_j and the mean over no in-neighbours is 0.
With aggregator="max" (the paper's max-pool aggregator, SAGEConv(aggr="max",
project=True)), m_j = relu(x_j W_p + b_p), W_p square in the input width, and
the root term still reads the unprojected x_i; no in-neighbours give 0.
normalize=True divides each output row by max(||row||_2, 1e-12) (F.normalize).
The graph needs no edge data (any is ignored).

ApplyEdge is m_j, which depends on the source row only; Gather is the mean
or max; ApplyVertex is the rest. Compiled (`layer.explain()`), lin_r(x_i)
is vertex-only work, hoisted out of the per-interval vertex stage, and:
- mean: the edge stage is a copy of the source row, fused into one
  fused_gather (program copy_src); apply_vertex begins with lin_l's
  accum @ W, so when units < the input width the rows are narrowed before
  propagating (lin_l's matmul runs on the source rows).
- max: relu(x W_p + b_p) is hoisted (once per vertex, not per edge), what
  is left per edge is a copy, fused (copy_src); max does not commute with
  lin_l, so no narrowing.
"""

import keras
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer

AGGREGATORS = ("mean", "max")


@keras.saving.register_keras_serializable(package="ngra_tf")
class GraphSAGE(DenseVertexMixin, SAGALayer):
    """self.dense is lin_l (with the bias), self.root lin_r, self.project the max-pool projection."""

    def __init__(self, units, aggregator="mean", root_weight=True, normalize=False, **kwargs):
        if aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator must be one of {', '.join(map(repr, AGGREGATORS))}, got {aggregator!r}")
        if "accumulator" in kwargs:
            raise ValueError("GraphSAGE takes aggregator= ('mean' or 'max'), not accumulator=")
        super().__init__(units, accumulator=aggregator, **kwargs)
        self.aggregator = aggregator
        self.root_weight = bool(root_weight)
        self.normalize = bool(normalize)
        self.root = self.linear(name="root") if self.root_weight else None
        self.project = None

    def build(self, input_shape):
        if self.aggregator == "max":
            self.project = self.linear(input_shape[-1], use_bias=True, name="project")
        super().build(input_shape)

    def apply_edge(self, edge):
        if self.aggregator == "max":
            return tf.nn.relu(self.project(edge.src))
        return edge.src

    def apply_vertex(self, vertex, accum):
        out = self.dense(accum)
        if self.root_weight:
            out = out + self.root(vertex)
        if self.normalize:
            out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-24)  # x / max(||x||, 1e-12)
        return self.activation(out)

    def get_config(self):
        config = super().get_config()
        del config["accumulator"]  # it is the aggregator
        config.update(aggregator=self.aggregator, root_weight=self.root_weight, normalize=self.normalize)
        return config
