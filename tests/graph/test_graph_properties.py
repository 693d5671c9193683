"""Property-based checks of the CSC/CSR views and of partitions, on small random graphs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_checks import check_adjacency, check_graph, check_partition
from ngra_tf import ops
from ngra_tf.graph import Graph

SETTINGS = settings(max_examples=100, derandomize=True, deadline=None)


@st.composite
def edge_lists(draw, max_vertices=12, max_edges=40):
    """(num_vertices, src, dst): any multigraph, self loops and isolated vertices included."""
    n = draw(st.integers(0, max_vertices))
    if n == 0:
        return 0, np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=max_edges))
    src = np.array([u for u, _ in pairs], np.int64)
    dst = np.array([v for _, v in pairs], np.int64)
    return n, src, dst


@SETTINGS
@given(edges=edge_lists(), num_parts=st.integers(1, 8), reencode=st.booleans(), with_data=st.booleans())
def test_views_and_partition_invariants(edges, num_parts, reencode, with_data):
    n, src, dst = edges
    data = np.arange(len(src), dtype=np.float32) * 0.5 if with_data else None
    graph = Graph.from_edges(src, dst, n, edge_data=data)
    check_graph(graph, src, dst, data)
    check_partition(graph, graph.partition(num_parts, reencode=reencode))
    # The derived graphs keep the invariants too.
    for derived in (graph.remove_duplicates(), graph.symmetrize(), graph.add_self_loops()):
        check_adjacency(derived.adjacency)
        check_partition(derived, derived.partition(num_parts))


@settings(max_examples=40, derandomize=True, deadline=None)
@given(edges=edge_lists(max_vertices=10, max_edges=30), num_parts=st.integers(1, 4))
def test_chunk_sums_equal_whole_graph(edges, num_parts):
    n, src, dst = edges
    graph = Graph.from_edges(src, dst, n, edge_data=np.linspace(-1, 1, len(src), dtype=np.float32))
    partition = graph.partition(num_parts)
    x = np.random.default_rng(len(src)).normal(size=(n, 3)).astype(np.float32)
    whole = ops.fused_gather(graph, x, program="src_mul_edge").numpy()
    blocks = []
    for j in range(num_parts):
        out = np.zeros((len(partition.vertices(j)), 3), np.float32)
        for i in range(num_parts):
            out += ops.fused_gather(partition.chunk(i, j), x[partition.vertices(i)], program="src_mul_edge").numpy()
        blocks.append(out)
    np.testing.assert_allclose(partition.merge(blocks), whole, rtol=1e-5, atol=1e-5)
