"""Graph isomorphism network (GIN, Xu et al.) in SAGA form, as PyTorch Geometric's GINConv computes it.

    out_i = act(MLP((1 + eps) x_i + sum_{j in N(i)} x_j))

The MLP is mlp_layers Dense layers, Dense(hidden or units) ... Dense(units),
with relu between them (none after the last; `activation` follows it) and
no batch normalisation: apply_vertex runs once per interval of vertices
when the graph is chunked, so a batch statistic would differ with P. eps is
a constant, or a trainable scalar weight (initialised to eps) with
train_eps=True. The graph needs no edge data (any is ignored).

ApplyEdge is the source row; Gather sums; ApplyVertex runs the MLP, its
first matmul written as accum W_1 + (1 + eps) (x W_1), which is the same
as ((1 + eps) x + accum) W_1. Compiled (`layer.explain()`): the edge stage
is a copy, fused into one fused_gather (program copy_src); x W_1 is
vertex-only work, hoisted; and since apply_vertex begins with accum @ W_1,
when the first MLP width is below the input width W_1 is applied before
propagating (narrowed), so chunks move hidden-wide rows instead of
input-wide ones, and the (1 + eps) (x W_1) term reuses those rows: x W_1
is computed once.
"""

import math

import keras
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


@keras.saving.register_keras_serializable(package="ngra_tf")
class GIN(DenseVertexMixin, SAGALayer):
    """self.mlp lists the MLP's Dense layers; the last is self.dense (units wide)."""

    accumulator = "sum"

    def __init__(self, units, hidden=None, eps=0.0, train_eps=False, mlp_layers=2, **kwargs):
        super().__init__(units, **kwargs)
        if hidden is not None and (int(hidden) != hidden or hidden < 1):
            raise ValueError(f"hidden must be a positive integer or None, got {hidden!r}")
        if isinstance(mlp_layers, bool) or int(mlp_layers) != mlp_layers or mlp_layers < 1:
            raise ValueError(f"mlp_layers must be a positive integer, got {mlp_layers!r}")
        if hidden is not None and mlp_layers == 1:
            raise ValueError("hidden is the width between MLP layers: it needs mlp_layers >= 2")
        if not math.isfinite(eps):
            raise ValueError(f"eps must be a finite number, got {eps!r}")
        self.hidden = None if hidden is None else int(hidden)
        self.eps = float(eps)  # with train_eps, the initial value: the trained one is self.eps_weight
        self.train_eps = bool(train_eps)
        self.mlp_layers = int(mlp_layers)
        hidden_layers = [self.linear(self.hidden or self.units, use_bias=self.dense.use_bias, name=f"mlp_{i}")
                         for i in range(self.mlp_layers - 1)]
        self.mlp = hidden_layers + [self.dense]
        self.eps_weight = None

    def build(self, input_shape):
        if self.train_eps:
            self.eps_weight = self.add_weight(name="eps", shape=(),
                                              initializer=keras.initializers.Constant(self.eps))
        super().build(input_shape)

    def apply_vertex(self, vertex, accum):
        first = self.mlp[0]
        scale = 1.0 + (self.eps_weight if self.train_eps else self.eps)
        h = first(accum) + scale * (vertex @ first.kernel)  # ((1 + eps) x + accum) W_1 + b_1: accum @ W_1 narrows
        for layer in self.mlp[1:]:
            h = layer(tf.nn.relu(h))
        return self.activation(h)

    def get_config(self):
        config = super().get_config()
        config.update(hidden=self.hidden, eps=self.eps, train_eps=self.train_eps, mlp_layers=self.mlp_layers)
        return config
