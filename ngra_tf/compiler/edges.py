"""What apply_edge sees while it is traced: symbolic edge rows."""

import tensorflow as tf

from ngra_tf.ops.random import dropout_rows, dropout_seed

NO_EDGE_DATA = ("apply_edge reads edge.data, but the graph has no edge data; "
                "build it with Graph.from_edges(..., edge_data=...) or graph.with_edge_data(...)")


def check_dropout(rate, seed):
    """edge.dropout's arguments, checked once for both views: the rate as a float."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise ValueError(f"edge.dropout: rate must be a number in [0, 1), got {rate!r}")
    if not hasattr(seed, "state"):
        raise TypeError("edge.dropout: seed must be a keras.random.SeedGenerator the layer owns (made in its "
                        f"__init__), got {type(seed).__name__}")
    return float(rate)


class TracedEdgeView:
    """edge.src / edge.dst / edge.data / edge.ids as trace inputs; edge.softmax as a marker the plan evaluates;
    edge.dropout drawn at each edge's id."""

    def __init__(self, src, dst, data, markers: dict, ids=None, training=False, pass_seeds=None):
        self.src, self.dst, self._data, self._markers = src, dst, data, markers
        self.ids, self._training = ids, bool(training)
        self._pass_seeds = [] if pass_seeds is None else pass_seeds

    @property
    def data(self):
        if self._data is None:
            raise ValueError(NO_EDGE_DATA)
        return self._data

    @property
    def num_edges(self):
        return tf.shape(self.src)[0]

    def softmax(self, scores):
        """Per-destination softmax of per-edge scores: computed by the plan over each whole column."""
        marked = tf.identity(scores, name="edge_softmax")
        self._markers[marked.op.name] = "softmax"
        return marked

    def dropout(self, values, rate, seed):
        """keras.random.dropout of per-edge rows while training, drawn at each edge's id: an edge drops the same
        entries in every chunk and pass of a step, whatever the chunking. The plan advances `seed` once per
        pass (not per chunk), so the draw is a mask edge code loads like edge data."""
        rate = check_dropout(rate, seed)
        if not self._training or rate == 0:
            return values
        if all(state is not seed.state for state in self._pass_seeds):
            self._pass_seeds.append(seed.state)
        with tf.name_scope("edge_dropout"):
            return dropout_rows(values, rate, dropout_seed(seed.state.value), self.ids)
