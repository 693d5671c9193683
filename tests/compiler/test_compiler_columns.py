"""Column accumulators: chunks reduce into A[j] through the kernels' init, in place.

The stress case for max and min: every message negative, so a chunk that
sends nothing to a vertex must not offer 0 (or anything else) as a
candidate, and vertices without any in-edge still get 0. Checked against a
dense numpy reference at P = 1, 3, 4, fused and unfused, with gradients.
"""

import numpy as np
import pytest
import tensorflow as tf

import compiler_checks as cc
from traced import traced_ops
import ngra_tf


class NegativeExtremes(ngra_tf.SAGALayer):
    """max|min of -softplus(x W) - 1 over the in-edges (every message < -1), then a projection."""

    accumulator = "max|min"

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(input_shape[-1], 3))
        self.out = self.add_weight(name="out", shape=(6, 2))

    def apply_edge(self, edge):
        return -tf.nn.softplus(edge.src @ self.w) - 1.0

    def apply_vertex(self, vertex, accum):
        return accum @ self.out


def sparse_graph(seed=3):
    """The compiler stress graph's vertices with few edges: many rows empty in some chunks, some in all."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, cc.ACTIVE, 30)
    dst = rng.integers(0, cc.ACTIVE, 30)
    return ngra_tf.Graph.from_edges(src, dst, cc.NUM_VERTICES)


def dense_reference(layer, graph, x):
    """max|min per destination, 0 without in-edges, in numpy from the user's edges."""
    messages = (-tf.nn.softplus(x @ layer.w) - 1.0).numpy()[graph.src]
    parts = []
    for reduce in (np.max, np.min):
        accum = np.zeros((graph.num_vertices, 3), np.float32)
        for v in range(graph.num_vertices):
            mine = messages[graph.dst == v]
            if len(mine):
                accum[v] = reduce(mine, axis=0)
        parts.append(accum)
    return np.concatenate(parts, axis=1) @ layer.out.numpy()


@pytest.fixture(scope="module")
def layer_and_graph():
    graph = sparse_graph()
    layer = NegativeExtremes()
    x = cc.features()
    layer(x, graph=graph.partition(1))
    layer.w.assign(np.random.default_rng(4).normal(size=layer.w.shape).astype(np.float32))
    layer.out.assign(np.random.default_rng(5).normal(size=layer.out.shape).astype(np.float32))
    return layer, graph, x


def test_the_graph_stresses_the_columns(layer_and_graph):
    _, graph, _ = layer_and_graph
    assert np.any(graph.in_degree() == 0)
    for parts in (3, 4):
        partition = graph.partition(parts)
        for j in range(parts):  # some vertex gets in-edges only from a chunk after the column's first
            degrees = [partition.chunk(i, j).adjacency.in_degree() for i in range(parts)]
            first = next(d for d in degrees if d.sum())
            if np.any((first == 0) & (sum(degrees) > 0)):
                break
        else:
            pytest.fail(f"P={parts}: every column's first chunk reaches all its vertices")


@pytest.mark.parametrize("parts,rewrites", [(1, True), (3, False), (4, True)])  # each P, rewrites alternating
def test_negative_max_min_columns_match_dense(layer_and_graph, parts, rewrites):
    layer, graph, x = layer_and_graph
    want = dense_reference(layer, graph, x)
    variables = [x, layer.w, layer.out]
    one = graph.partition(1)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out = layer(x, graph=graph.partition(parts), rewrites=rewrites)
        reference = layer(x, graph=one, rewrites=rewrites)
        cotangent = np.random.default_rng(6).normal(size=out.shape).astype(np.float32)
        loss, reference_loss = tf.reduce_sum(out * cotangent), tf.reduce_sum(reference * cotangent)
    cc.assert_close(out.numpy(), want, f"P={parts}")
    for got, expected in zip(tape.gradient(loss, variables), tape.gradient(reference_loss, variables)):
        cc.assert_close(tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(expected).numpy(), f"P={parts} grad")


def gather_ops(model, parts):
    """Every op of the traced stack, and its gathers, at P = parts."""
    stack, graph, x = cc.stack_for(model), cc.graph_for(model), cc.features()
    ops = traced_ops(lambda v: cc.run(stack, graph.partition(parts), v), x)
    return ops, [op for op in ops if op.type in ("NgraFusedGather", "NgraGather", "NgraEdgeCode")]


def init_of(op):
    """A gather's `init` input (not the last one for the fused ops, whose plan follows it)."""
    names = [arg.name for arg in op.op_def.input_arg]
    return op.inputs[names.index("init")]


def producer(tensor):
    """The op behind a tensor, looking through reshapes and identities."""
    while tensor.op.type in ("Reshape", "Identity"):
        tensor = tensor.op.inputs[0]
    return tensor.op


@pytest.mark.parametrize("model", ["gcn", "mpgcn", "gat"])
def test_columns_chain_through_init(model):
    """Each chunk reduces into its column's accumulator through the kernels' init: no partial results combined
    by adds or maxima. The chunk step is compiled once, so the graph is the same at every P."""
    sizes = {}
    for parts in (2, 5):
        ops, gathers = gather_ops(model, parts)
        assert gathers
        for op in gathers:  # init is the column's value so far (or its start), picked when the step runs
            assert producer(init_of(op)).type in ("If", "StatelessIf"), (op.name, producer(init_of(op)).type)
        combining = [op.type for op in ops if op.type in ("AddV2", "AddN", "Maximum", "Minimum")
                     and sum(producer(t) in gathers for t in op.inputs) > 1]
        assert not combining, combining
        sizes[parts] = (len(ops), len(gathers))
    assert sizes[2] == sizes[5]
