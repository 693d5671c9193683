"""What apply_edge sees while it is traced: symbolic edge rows."""

import tensorflow as tf

NO_EDGE_DATA = ("apply_edge reads edge.data, but the graph has no edge data; "
                "build it with Graph.from_edges(..., edge_data=...) or graph.with_edge_data(...)")


class TracedEdgeView:
    """edge.src / edge.dst / edge.data as trace inputs; edge.softmax as a marker the plan evaluates."""

    def __init__(self, src, dst, data, markers: dict):
        self.src, self.dst, self._data, self._markers = src, dst, data, markers

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
