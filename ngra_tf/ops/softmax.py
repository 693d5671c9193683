"""Edge softmax: attention weights normalised over each destination's in-edges."""

import tensorflow as tf

from ngra_tf.ops.propagation import gather, scatter_side


def edge_softmax(graph, scores):
    """softmax of per-edge `scores` ([E] or [E, heads...]) within each destination.

    out[e] = exp(scores[e]) / sum of exp(scores[e']) over the in-edges e' of
    dst(e). Computed stably: each destination's maximum is subtracted first
    (softmax does not change under that shift, so no gradient flows through it).
    scores and the result are in the edge order of the propagation ops: the
    user's for a Graph, its own CSC order for a Chunk or an Adjacency.
    """
    with tf.name_scope("EdgeSoftmax"):
        scores = tf.convert_to_tensor(scores)
        peak = tf.stop_gradient(gather(graph, scores, reduce="max"))
        weights = tf.exp(scores - scatter_side(graph, peak, "dst"))
        total = gather(graph, weights, reduce="sum")
        return weights / scatter_side(graph, total, "dst")
