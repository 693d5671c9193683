"""Graphs and equality checks shared by the tests in tests/runtime."""

import numpy as np
import scipy.sparse as sp

from ngra_tf.graph import Graph

INDEX_ARRAYS = ("csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge")


def small_graphs():
    """Graphs that exercise a store: edge data of several shapes or none, empty chunks and intervals."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 60, 500), rng.integers(0, 60, 500)
    active = rng.choice(80, 12, replace=False)  # most vertices isolated: many empty chunks
    weights = 1.0 / np.arange(1, 41) ** 1.2
    hub_src = rng.choice(40, 700, p=weights / weights.sum())
    hub_dst = rng.choice(40, 700, p=weights / weights.sum())
    return {
        "multigraph_2d_data": Graph.from_edges(src, dst, 60, edge_data=rng.normal(size=(500, 2, 3)).astype(np.float32)),
        "power_law_scalar_data": Graph.from_edges(hub_src, hub_dst, 40,
                                                  edge_data=rng.normal(size=700).astype(np.float64)),
        "no_edge_data": Graph.from_edges(src[:300], dst[:300], 60),
        "isolated": Graph.from_edges(active[rng.integers(0, 12, 90)], active[rng.integers(0, 12, 90)], 80,
                                     edge_data=rng.integers(0, 5, 90).astype(np.int32)),
        "tiny": Graph.from_edges([0, 1, 2, 2, 2], [1, 2, 0, 2, 2], 3),  # P = 4 > V: empty intervals
        "edgeless": Graph.from_edges([], [], 5),
    }


def vertex_data(num_vertices, seed=0):
    rng = np.random.default_rng(seed)
    return {"features": rng.normal(size=(num_vertices, 4)).astype(np.float32),
            "labels": rng.integers(0, 3, num_vertices),
            "train_mask": rng.random(num_vertices) < 0.5,
            "pairs": rng.normal(size=(num_vertices, 2, 2))}


def assert_chunks_equal(expected, actual):
    """Two Chunks are the same: adjacency arrays (values and dtypes), edge ids and edge data."""
    assert (actual.src_part, actual.dst_part) == (expected.src_part, expected.dst_part)
    assert (actual.adjacency.num_src, actual.adjacency.num_dst) == (expected.adjacency.num_src,
                                                                    expected.adjacency.num_dst)
    for name in INDEX_ARRAYS:
        want, got = getattr(expected.adjacency, name), getattr(actual.adjacency, name)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert actual.edge_ids.dtype == expected.edge_ids.dtype
    np.testing.assert_array_equal(actual.edge_ids, expected.edge_ids)
    if expected.edge_data is None:
        assert actual.edge_data is None
    else:
        assert actual.edge_data.dtype == expected.edge_data.dtype
        assert actual.edge_data.shape == expected.edge_data.shape
        np.testing.assert_array_equal(actual.edge_data, expected.edge_data)


def assert_store_matches(store, graph, num_parts, reencode=True, vertex_data=None):
    """store holds graph.partition(num_parts, reencode) exactly, and vertex_data in interval order."""
    partition = graph.partition(num_parts, reencode=reencode)
    assert store.num_parts == num_parts
    assert (store.num_vertices, store.num_edges) == (graph.num_vertices, graph.num_edges)
    np.testing.assert_array_equal(store.bounds, partition.bounds)
    np.testing.assert_array_equal(store.order, partition.order)
    np.testing.assert_array_equal(store.position, partition.position)
    np.testing.assert_array_equal(store.edge_counts, partition.edge_counts)
    assert store.partition().balance() == partition.balance()
    for i in range(num_parts):
        for j in range(num_parts):
            assert_chunks_equal(partition.chunk(i, j), store.chunk(i, j))
    vertex_data = vertex_data or {}
    assert store.vertex_names == tuple(vertex_data)
    for name, array in vertex_data.items():
        sparse = sp.issparse(array)  # (stored as CSR: its rows come back as scipy CSR matrices)
        array = sp.csr_matrix(array) if sparse else np.asarray(array)
        assert store.vertex_spec(name) == (array.shape[1:], array.dtype)
        assert store.is_sparse(name) == sparse
        for part in range(num_parts):
            rows = store.vertex_rows(name, part)
            assert rows.dtype == array.dtype
            if sparse:
                expected = array[partition.vertices(part)]
                expected.sort_indices()
                assert sp.isspmatrix_csr(rows) and rows.has_canonical_format
                np.testing.assert_array_equal(rows.indptr, expected.indptr)
                np.testing.assert_array_equal(rows.indices, expected.indices)
                np.testing.assert_array_equal(rows.data, expected.data)
            else:
                np.testing.assert_array_equal(rows, array[partition.vertices(part)])
