"""On a Graph, the ops take and return per-edge tensors in the order the user
gave the edges, on the compiled kernels and on the pure-TF reference path
alike; a Chunk or a bare Adjacency keeps its own CSC order.

The expected values are computed from the user's arrays (SRC, DST, WEIGHTS)
with numpy and scipy, never from the graph's stored order.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import fused_gather, gather, propagation, scatter
from ngra_tf.ops.softmax import edge_softmax
from ngra_testlib import oracle_reduce, to_int64

# Edges deliberately not in CSC order, with a multi-edge (0 -> 2 twice), a
# self loop (4 -> 4), an isolated vertex (5) and distinct weights.
SRC = np.array([3, 0, 4, 1, 0, 2, 3, 1, 4])
DST = np.array([1, 2, 0, 1, 2, 2, 4, 0, 4])
WEIGHTS = np.array([0.5, -1.0, 2.0, 3.0, 0.25, -0.75, 1.5, 4.0, -2.5])
N, E = 6, len(SRC)


@pytest.fixture(params=["kernels", "reference"])
def path(request, monkeypatch):
    """Runs a test on the compiled kernels, then on the pure-TF references."""
    if request.param == "reference":
        monkeypatch.setattr(propagation, "library", lambda: None)
    elif ngra_tf.ops.library() is None:
        pytest.skip("the op library is not built")
    return request.param


@pytest.fixture(params=[np.int32, np.int64], ids=["int32", "int64"])
def graph(request):
    """The graph of SRC -> DST, with int32 or int64 index arrays."""
    g = ngra_tf.Graph.from_edges(SRC, DST, N)
    if request.param == np.int64:
        g = ngra_tf.Graph(to_int64(g.adjacency), None, g.edge_order)
    return g


def weighted_matrix(weights):
    """A [N, N] with A[v, u] = the summed weight of the edges u -> v (scipy)."""
    return sp.csr_matrix((weights, (DST, SRC)), shape=(N, N))


def features(rows, width=3, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, width))


def test_the_graph_gives_the_edges_back_as_given(graph):
    assert not np.array_equal(graph.edge_order, np.arange(E))  # stored order differs
    weighted = graph.with_edge_data(WEIGHTS)
    np.testing.assert_array_equal(weighted.src, SRC)
    np.testing.assert_array_equal(weighted.dst, DST)
    np.testing.assert_array_equal(weighted.edge_data, WEIGHTS)
    degree = np.bincount(DST, minlength=N)
    inv_sqrt = np.where(degree > 0, 1 / np.sqrt(np.maximum(degree, 1)), 0.0)
    np.testing.assert_allclose(weighted.gcn_norm(np.float64), inv_sqrt[SRC] * inv_sqrt[DST], rtol=1e-15)


def test_scatter_row_e_is_the_given_edge_e(graph, path):
    x, y = features(N), features(N, seed=1)
    src_rows, dst_rows = scatter(graph, x, y)
    np.testing.assert_array_equal(src_rows.numpy(), x[SRC])
    np.testing.assert_array_equal(dst_rows.numpy(), y[DST])
    traced = tf.function(lambda v: scatter(graph, v))
    np.testing.assert_array_equal(traced(tf.constant(x)).numpy(), x[SRC])


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_gather_reads_edge_values_in_the_given_order(graph, path, reduce):
    values = features(E, seed=2)
    incidence = sp.csr_matrix((np.ones(E), (DST, np.arange(E))), shape=(N, E))  # D[v, e] = 1 if e enters v
    if reduce in ("sum", "mean"):
        expected = incidence @ values
        if reduce == "mean":
            expected /= np.maximum(np.bincount(DST, minlength=N), 1)[:, None]
    else:
        expected = np.zeros((N, 3))
        for v in np.unique(DST):
            expected[v] = (np.max if reduce == "max" else np.min)(values[DST == v], axis=0)
    np.testing.assert_allclose(gather(graph, values, reduce).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("weight_shape", [(), (3,)])
def test_src_mul_edge_with_the_given_weights(graph, path, weight_shape):
    x = features(N)
    weights = WEIGHTS.reshape(-1, *(1,) * len(weight_shape)) * np.arange(1, 1 + np.prod(weight_shape, dtype=int))
    weights = weights.reshape((E,) + weight_shape)
    per_feature = np.broadcast_to(weights.reshape(E, -1), (E, 3))
    expected = np.stack([weighted_matrix(per_feature[:, f]) @ x[:, f] for f in range(3)], axis=1)
    own = fused_gather(graph.with_edge_data(weights), x, program="src_mul_edge").numpy()
    explicit = fused_gather(graph, x, edge_data=weights, program="src_mul_edge").numpy()
    unfused = gather(graph, scatter(graph, x) * per_feature).numpy()
    for name, got in (("graph's edge data", own), ("explicit edge_data", explicit), ("unfused", unfused)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_type_select_with_the_given_types(graph, path):
    types = np.array([0, 1, 2, 1, 0, 2, 2, 0, 1], np.int32)
    x = np.random.default_rng(3).normal(size=(N, 3, 2))
    expected = np.zeros((N, 2))
    np.add.at(expected, DST, x[SRC, types])
    for got in (fused_gather(graph, x, edge_data=types, program="type_select"),
                fused_gather(graph.with_edge_data(types), x, program="type_select")):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_gradients_come_back_in_the_given_order(graph, path):
    x, upstream = features(N), features(N, seed=4)
    # d/dw[e] of sum(upstream * out) is upstream[dst[e]] . x[src[e]], edge by edge as given.
    expected_dw = np.sum(upstream[DST] * x[SRC], axis=1)
    w = tf.constant(WEIGHTS)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(w)
        fused = fused_gather(graph, x, edge_data=w, program="src_mul_edge")
        values = scatter(graph, tf.constant(x))
        tape.watch(values)
        gathered = gather(graph, values * w[:, None])
    np.testing.assert_allclose(tape.gradient(fused, w, output_gradients=upstream).numpy(), expected_dw, rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(gathered, w, output_gradients=upstream).numpy(), expected_dw,
                               rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(gathered, values, output_gradients=upstream).numpy(),
                               upstream[DST] * WEIGHTS[:, None], rtol=1e-12)
    # scatter's gradient sums the given edges' rows into their endpoints.
    xt, edge_upstream = tf.constant(x), features(E, seed=5)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        src_rows, dst_rows = scatter(graph, xt, xt)
    expected_dx = np.zeros((N, 3))
    np.add.at(expected_dx, SRC, edge_upstream)
    np.add.at(expected_dx, DST, 2 * edge_upstream)
    d_x = tape.gradient([src_rows, dst_rows], xt, output_gradients=[edge_upstream, 2 * edge_upstream])
    np.testing.assert_allclose(tf.convert_to_tensor(d_x).numpy(), expected_dx, rtol=1e-12)  # the reference's is sparse
    # And against finite differences, through every op at once.
    theoretical, numerical = tf.test.compute_gradient(
        lambda w: gather(graph, scatter(graph, x) * w[:, None], "mean")
        + fused_gather(graph, x, edge_data=w, program="src_mul_edge", reduce="max"), [w])
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-6, atol=1e-8)


def test_edge_softmax_on_a_graph_uses_the_given_order(graph, path):
    scores = np.random.default_rng(5).normal(size=E)
    expected = np.exp(scores)
    expected /= np.bincount(DST, weights=expected, minlength=N)[DST]
    np.testing.assert_allclose(edge_softmax(graph, scores).numpy(), expected, rtol=1e-12)


def test_chunks_and_adjacencies_keep_their_own_csc_order(path):
    graph = ngra_tf.Graph.from_edges(SRC, DST, N, edge_data=WEIGHTS)
    adjacency = graph.adjacency
    x = features(N)
    np.testing.assert_array_equal(scatter(adjacency, x).numpy(), x[adjacency.src])
    np.testing.assert_allclose(fused_gather(adjacency, x, edge_data=graph.stored_edge_data, program="src_mul_edge"),
                               weighted_matrix(WEIGHTS) @ x, rtol=1e-12)
    partition = graph.partition(2)
    for i in range(2):
        for j in range(2):
            chunk = partition.chunk(i, j)
            # edge_ids relates the chunk's edges to the user's arrays.
            np.testing.assert_array_equal(partition.vertices(i)[chunk.adjacency.src], SRC[chunk.edge_ids])
            np.testing.assert_array_equal(partition.vertices(j)[chunk.adjacency.dst], DST[chunk.edge_ids])
            np.testing.assert_array_equal(chunk.edge_data, WEIGHTS[chunk.edge_ids])
            rows = scatter(chunk, x[partition.vertices(i)]).numpy()
            np.testing.assert_array_equal(rows, x[SRC[chunk.edge_ids]])
            np.testing.assert_allclose(gather(chunk, rows, "max").numpy(),
                                       oracle_reduce(rows, chunk.adjacency, "max"), rtol=1e-12)
