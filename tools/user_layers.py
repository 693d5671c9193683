"""Edge stages a user might write, each one op away from a built-in model (tools/bench_models.py --variants).

Each is a SAGA layer like G-GCN (ngra_tf.layers.GatedGCN): two hoisted
projections of the endpoints meet in an element-wise edge stage, Gather sums,
ApplyVertex is act(accum W + b). None matches a specialised fused_gather
program; all compile to edge code.
"""

import keras
import tensorflow as tf

from ngra_tf.layers.dense import DenseVertexMixin
from ngra_tf.layers.saga import SAGALayer


class _TwoProjections(DenseVertexMixin, SAGALayer):
    accumulator = "sum"

    def build(self, input_shape):
        width = input_shape[-1]
        self.a = self.linear(width, name="a")
        self.b = self.linear(width, name="b")
        super().build(input_shape)

    def apply_vertex(self, vertex, accum):
        return self.activation(self.dense(accum))


class TanhDifferenceGate(_TwoProjections):
    """G-GCN with tanh of a difference: tanh(a(src) - b(dst)) * src."""

    def apply_edge(self, edge):
        return tf.tanh(self.a(edge.src) - self.b(edge.dst)) * edge.src


class EdgeWeightedGate(_TwoProjections):
    """G-GCN times a weight per edge (the graph's GCN normalisation): sigmoid(a(src) + b(dst)) * src * w."""

    def apply_edge(self, edge):
        return tf.sigmoid(self.a(edge.src) + self.b(edge.dst)) * edge.src * edge.data[:, None]


class ExpDivScore(_TwoProjections):
    """An attention-like score without normalisation: s = exp(tanh(a(src) + b(dst))), s / (1 + s) * src."""

    def apply_edge(self, edge):
        score = tf.exp(tf.tanh(self.a(edge.src) + self.b(edge.dst)))
        return score / (1.0 + score) * edge.src


class LeakyReluMessage(_TwoProjections):
    """A message without a gate: leaky_relu(a(src) + b(dst), 0.2)."""

    def apply_edge(self, edge):
        return tf.nn.leaky_relu(self.a(edge.src) + self.b(edge.dst), 0.2)


class RbfScore(_TwoProjections):
    """A radial-basis score of the endpoints' difference: exp(-(a(src) - b(dst))^2) * src."""

    def apply_edge(self, edge):
        return tf.exp(-tf.square(self.a(edge.src) - self.b(edge.dst))) * edge.src


class LeakyProduct(_TwoProjections):
    """A product message: leaky_relu(a(src) * b(dst), 0.2)."""

    def apply_edge(self, edge):
        return tf.nn.leaky_relu(self.a(edge.src) * self.b(edge.dst), 0.2)


class DistanceRatio(_TwoProjections):
    """The source damped by the endpoints' distance: src / (1 + |a(src) - b(dst)|)."""

    def apply_edge(self, edge):
        return edge.src / (1.0 + tf.abs(self.a(edge.src) - self.b(edge.dst)))


VARIANTS = {"tanh-gate": TanhDifferenceGate, "weighted-gate": EdgeWeightedGate, "exp-div": ExpDivScore,
            "leaky-message": LeakyReluMessage, "rbf-score": RbfScore, "leaky-product": LeakyProduct,
            "distance-ratio": DistanceRatio}


def variant_stack(name, hidden, classes):
    """[Dense(hidden), variant(hidden, relu), variant(classes)], shaped like bench_models' G-GCN."""
    layer = VARIANTS[name]
    return [keras.layers.Dense(hidden), layer(hidden, activation="relu"), layer(classes)]
