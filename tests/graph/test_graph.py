"""Graph.from_edges, its CSC/CSR views, the user's edge order, and the edge-set helpers."""

import numpy as np
import pytest
import scipy.sparse as sp

from graph_checks import check_graph, uniform_graph
from ngra_tf.graph import Graph


# ---- from_edges: inputs ----


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.float64])
def test_from_numpy_arrays(dtype):
    src = np.array([3, 0, 1, 3, 2, 0], dtype)
    dst = np.array([0, 1, 2, 0, 2, 3], dtype)
    g = Graph.from_edges(src, dst)
    assert (g.num_vertices, g.num_edges) == (4, 6)
    check_graph(g, src, dst)


def test_from_lists_and_explicit_num_vertices():
    g = Graph.from_edges([0, 1, 1], [1, 2, 0], num_vertices=7)
    assert (g.num_vertices, g.num_edges) == (7, 3)
    check_graph(g, [0, 1, 1], [1, 2, 0])
    np.testing.assert_array_equal(g.in_degree(), [1, 1, 1, 0, 0, 0, 0])


def test_default_num_vertices_is_one_past_the_largest_id():
    assert Graph.from_edges([0, 5], [2, 1]).num_vertices == 6
    assert Graph.from_edges([0], [9]).num_vertices == 10
    assert Graph.from_edges([], []).num_vertices == 0


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy_matrix(fmt):
    rng = np.random.default_rng(0)
    dense = (rng.random((9, 9)) < 0.3) * rng.integers(1, 100, (9, 9))
    matrix = sp.csr_matrix(dense.astype(np.float32)).asformat(fmt)
    g = Graph.from_edges(matrix)
    assert g.num_vertices == 9 and g.num_edges == np.count_nonzero(dense)
    # entry (u, v) is the edge u -> v, its value the edge's data.
    np.testing.assert_array_equal(dense[g.src, g.dst], g.edge_data)
    assert np.all(dense[g.src, g.dst] != 0)
    np.testing.assert_array_equal(g.to_scipy().toarray(), dense)
    coo = sp.coo_matrix(matrix)  # the input edges, in input order
    check_graph(g, coo.row, coo.col, coo.data)


def test_from_scipy_matrix_with_explicit_edge_data():
    matrix = sp.coo_matrix((np.ones(3), ([0, 1, 2], [1, 2, 0])), shape=(3, 3))
    g = Graph.from_edges(matrix, edge_data=np.array([10.0, 20.0, 30.0]))
    pairs = {(int(u), int(v)): float(w) for u, v, w in zip(g.src, g.dst, g.edge_data)}
    assert pairs == {(0, 1): 10.0, (1, 2): 20.0, (2, 0): 30.0}


def test_from_scipy_matrix_errors():
    square = sp.eye(3, format="csr")
    with pytest.raises(ValueError, match="dst"):
        Graph.from_edges(square, [0, 1, 2])
    with pytest.raises(ValueError, match="square"):
        Graph.from_edges(sp.csr_matrix((3, 4)))
    with pytest.raises(ValueError, match="num_vertices"):
        Graph.from_edges(square, num_vertices=4)


# ---- from_edges: validation ----


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(src=[0, -1], dst=[1, 0], num_vertices=3), "src"),
        (dict(src=[0, 1], dst=[1, -2], num_vertices=3), "dst"),
        (dict(src=[-3], dst=[-2]), "src"),  # no num_vertices: still reported as bad ids
        (dict(src=[0, 3], dst=[1, 0], num_vertices=3), "src"),
        (dict(src=[0, 1], dst=[1, 3], num_vertices=3), "dst"),
        (dict(src=[0, 1, 2], dst=[1, 0], num_vertices=3), "same length"),
        (dict(src=[0.5, 1], dst=[1, 0], num_vertices=3), "src"),
        (dict(src=[0, 1], dst=[1, np.nan], num_vertices=3), "dst"),
        (dict(src=["a", "b"], dst=[1, 0], num_vertices=3), "src"),
        (dict(src=[[0, 1]], dst=[[1, 0]], num_vertices=3), "src"),
        (dict(src=[0, 1], dst=np.zeros((2, 1), int), num_vertices=3), "dst"),
        (dict(src=[0, 1], dst=[1, 0], num_vertices=3, edge_data=[1.0, 2.0, 3.0]), "edge_data"),
        (dict(src=[0, 1], dst=[1, 0], num_vertices=3, edge_data=np.ones((1, 4))), "edge_data"),
        (dict(src=[0, 1], dst=[1, 0], num_vertices=3, edge_data=1.0), "edge_data"),
        (dict(src=[], dst=[], num_vertices=-1), "num_vertices"),
        (dict(src=[0], dst=[0], num_vertices=2.5), "num_vertices"),
        (dict(src=[0, 1], dst=None), "dst"),
    ],
)
def test_from_edges_validation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Graph.from_edges(**kwargs)


def test_arrays_are_read_only_and_not_aliased():
    src = np.array([0, 1, 2, 2])
    dst = np.array([1, 2, 0, 0])
    data = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    g = Graph.from_edges(src, dst, edge_data=data)
    adj = g.adjacency
    arrays = [g.src, g.dst, g.edge_data, g.stored_edge_data, g.edge_order, adj.csc_indptr, adj.csc_src,
              adj.csr_indptr, adj.csr_dst, adj.csr_edge]
    for array in arrays:
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[0] = array[0]
    # The caller's arrays are neither frozen nor shared.
    src[0], dst[0], data[0] = 2, 2, 99.0
    assert data.flags.writeable
    check_graph(g, [0, 1, 2, 2], [1, 2, 0, 0], [1.0, 2.0, 3.0, 4.0])

    weights = np.arange(4, dtype=np.float32)
    h = g.with_edge_data(weights)
    assert weights.flags.writeable and not h.edge_data.flags.writeable
    weights[:] = -1
    np.testing.assert_array_equal(h.edge_data, np.arange(4))


# ---- views ----


def test_views_on_a_random_multigraph():
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 30, 400), rng.integers(0, 30, 400)
    data = rng.normal(size=(400, 2, 3))
    g = Graph.from_edges(src, dst, 40, edge_data=data)  # ids 30..39 have no edges
    check_graph(g, src, dst, data)
    assert np.all(g.in_degree()[30:] == 0) and np.all(g.out_degree()[30:] == 0)
    assert np.any(g.src == g.dst)


def test_views_with_multi_edges_and_self_loops():
    src = [2, 0, 2, 1, 1, 2, 0]
    dst = [0, 0, 0, 1, 2, 0, 2]
    g = Graph.from_edges(src, dst, 4, edge_data=np.arange(7))
    check_graph(g, src, dst, np.arange(7))
    np.testing.assert_array_equal(g.src, src)  # the user's order
    np.testing.assert_array_equal(g.edge_data, np.arange(7))
    # Stored (CSC): dst 0 has (0->0), (2->0) x3 in input order; dst 1 has (1->1); dst 2 has (0->2), (1->2).
    np.testing.assert_array_equal(g.adjacency.src, [0, 2, 2, 2, 1, 0, 1])
    np.testing.assert_array_equal(g.adjacency.dst, [0, 0, 0, 0, 1, 2, 2])
    np.testing.assert_array_equal(g.edge_order, [1, 0, 2, 5, 3, 6, 4])
    np.testing.assert_array_equal(g.stored_edge_data, [1, 0, 2, 5, 3, 6, 4])
    np.testing.assert_array_equal(g.adjacency.csc_indptr, [0, 4, 5, 7, 7])
    np.testing.assert_array_equal(g.adjacency.csr_indptr, [0, 2, 4, 7, 7])
    np.testing.assert_array_equal(g.adjacency.csr_edge, [0, 5, 4, 6, 1, 2, 3])


def test_empty_graphs():
    for g in (Graph.from_edges([], [], 0), Graph.from_edges(np.zeros(0, int), np.zeros(0, int))):
        assert (g.num_vertices, g.num_edges) == (0, 0)
        check_graph(g, [], [])
        np.testing.assert_array_equal(g.adjacency.csc_indptr, [0])
        assert g.to_scipy().shape == (0, 0)
    g = Graph.from_edges([], [], 5, edge_data=np.zeros((0, 2)))
    check_graph(g, [], [], np.zeros((0, 2)))
    np.testing.assert_array_equal(g.adjacency.csr_indptr, np.zeros(6))


def test_user_order_arrays_are_made_once_and_only_when_needed():
    data = np.array([5.0, 6.0, 7.0])
    given_in_csc_order = Graph.from_edges([2, 0, 1], [0, 1, 1], 3, edge_data=data)
    assert given_in_csc_order.src is given_in_csc_order.adjacency.src  # nothing to permute: no copy
    assert given_in_csc_order.edge_data is given_in_csc_order.stored_edge_data
    assert given_in_csc_order.user_edge_ids() is None
    g = Graph.from_edges([0, 2, 1], [1, 0, 1], 3, edge_data=data)
    assert g.src is g.src and g.edge_data is g.edge_data  # cached
    np.testing.assert_array_equal(g.src, [0, 2, 1])
    np.testing.assert_array_equal(g.edge_data, data)
    np.testing.assert_array_equal(g.stored_edge_data, [6.0, 5.0, 7.0])
    ids = g.user_edge_ids()
    np.testing.assert_array_equal(ids.csc.numpy(), g.edge_order)
    np.testing.assert_array_equal(ids.csr.numpy(), g.edge_order[g.adjacency.csr_edge])
    assert ids.csc.dtype == ids.csr.dtype == g.adjacency.index_dtype and g.user_edge_ids() is ids


def test_rebuilding_from_the_public_arrays_gives_the_same_graph():
    """What model saving relies on: from_edges(src, dst, n, edge_data) of a graph is that graph."""
    g = uniform_graph(np.random.default_rng(6), 30, 200, edge_dims=(2,))
    h = Graph.from_edges(g.src, g.dst, g.num_vertices, g.edge_data)
    for name in ("src", "dst", "edge_data", "edge_order", "stored_edge_data"):
        np.testing.assert_array_equal(getattr(h, name), getattr(g, name), err_msg=name)
    for name in ("csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge"):
        np.testing.assert_array_equal(getattr(h.adjacency, name), getattr(g.adjacency, name), err_msg=name)


# ---- helpers ----


def _pairs(g):
    return sorted(zip(g.src.tolist(), g.dst.tolist()))


def test_add_self_loops_without_edge_data():
    g = Graph.from_edges([0, 1, 2], [1, 1, 0], 4)  # 1 -> 1 already there
    h = g.add_self_loops()
    assert h.edge_data is None and h.num_edges == 3 + 4
    assert _pairs(h) == sorted(_pairs(g) + [(v, v) for v in range(4)])
    # The user's order: the edges as they were, then the loops.
    np.testing.assert_array_equal(h.src, [0, 1, 2, 0, 1, 2, 3])
    np.testing.assert_array_equal(h.dst, [1, 1, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(h.in_degree(), g.in_degree() + 1)


@pytest.mark.parametrize("fill", [1.0, 0.25])
def test_add_self_loops_with_edge_data(fill):
    g = Graph.from_edges([0, 1, 2], [1, 2, 0], 3, edge_data=np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    h = g.add_self_loops(fill_value=fill)
    assert h.edge_data.shape == (6, 2) and h.edge_data.dtype == np.float32
    loops = h.src == h.dst
    assert loops.sum() == 3
    np.testing.assert_array_equal(h.edge_data[loops], np.full((3, 2), fill))
    for u, v, w in zip(h.src[~loops], h.dst[~loops], h.edge_data[~loops]):
        np.testing.assert_array_equal(w, g.edge_data[(g.src == u) & (g.dst == v)][0])
    np.testing.assert_array_equal(h.edge_data, np.concatenate([g.edge_data, np.full((3, 2), fill)]))
    np.testing.assert_array_equal(h.src, [0, 1, 2, 0, 1, 2])


def test_remove_self_loops():
    g = Graph.from_edges([0, 1, 1, 2, 2], [0, 2, 1, 0, 2], 3, edge_data=np.arange(5))
    h = g.remove_self_loops()
    assert not np.any(h.src == h.dst)
    assert _pairs(h) == [(1, 2), (2, 0)]
    # The survivors in their order (stored order would put 2 -> 0 first).
    np.testing.assert_array_equal(h.src, [1, 2])
    np.testing.assert_array_equal(h.dst, [2, 0])
    np.testing.assert_array_equal(h.edge_data, [1, 3])
    assert Graph.from_edges([0], [0]).remove_self_loops().num_edges == 0


def test_remove_duplicates_keeps_the_first():
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 6, 80), rng.integers(0, 6, 80)
    g = Graph.from_edges(src, dst, 6, edge_data=np.arange(80))  # data = input position
    h = g.remove_duplicates()
    assert len(set(_pairs(h))) == h.num_edges
    assert set(_pairs(h)) == set(zip(src.tolist(), dst.tolist()))
    for u, v, first in zip(h.src, h.dst, h.edge_data):
        assert first == np.flatnonzero((src == u) & (dst == v))[0]
    # The survivors keep their relative order: the first occurrences, by input position.
    _, first_positions = np.unique(src * 6 + dst, return_index=True)
    np.testing.assert_array_equal(h.edge_data, np.sort(first_positions))
    check_graph(h, src[h.edge_data], dst[h.edge_data], h.edge_data)
    assert Graph.from_edges([], [], 3).remove_duplicates().num_edges == 0


def test_symmetrize():
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 10, 60), rng.integers(0, 10, 60)
    g = Graph.from_edges(src, dst, 12, edge_data=np.arange(60))
    h = g.symmetrize()
    pairs = set(zip(src.tolist(), dst.tolist()))
    both = pairs | {(v, u) for u, v in pairs}
    assert h.num_edges == len(both) and set(_pairs(h)) == both
    assert {(v, u) for u, v in _pairs(h)} == set(_pairs(h))
    # Data: from the first u -> v edge if there is one, else from the first v -> u edge.
    for u, v, w in zip(h.src, h.dst, h.edge_data):
        forward = np.flatnonzero((src == u) & (dst == v))
        assert w == (forward[0] if forward.size else np.flatnonzero((src == v) & (dst == u))[0])
    # The user's order: the edges, then their reverses, each pair where it first occurs.
    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    _, first = np.unique(both_src * 12 + both_dst, return_index=True)
    kept = np.sort(first)
    np.testing.assert_array_equal(h.src, both_src[kept])
    np.testing.assert_array_equal(h.dst, both_dst[kept])
    np.testing.assert_array_equal(h.edge_data, np.concatenate([np.arange(60), np.arange(60)])[kept])


def test_with_edge_data_uses_the_user_order_and_validates():
    g = Graph.from_edges([0, 2, 1], [1, 0, 1], 3)  # stored order: 2 -> 0, 0 -> 1, 1 -> 1
    h = g.with_edge_data(np.array([5.0, 6.0, 7.0]))
    assert h.adjacency is g.adjacency
    np.testing.assert_array_equal(h.edge_data, [5.0, 6.0, 7.0])
    np.testing.assert_array_equal(h.stored_edge_data, [6.0, 5.0, 7.0])
    np.testing.assert_array_equal(h.to_scipy().toarray(), [[0, 5, 0], [0, 7, 0], [6, 0, 0]])
    with pytest.raises(ValueError, match="edge_data"):
        g.with_edge_data(np.ones(2))


def test_gcn_norm_matches_dense_formula():
    rng = np.random.default_rng(4)
    n = 25
    g = Graph.from_edges(rng.integers(0, n, 70), rng.integers(0, n, 70), n).symmetrize().add_self_loops()
    w = g.gcn_norm()
    assert w.dtype == np.float32 and w.shape == (g.num_edges,)
    A = np.zeros((n, n))
    np.add.at(A, (g.dst, g.src), 1.0)  # A[v, u] = number of edges u -> v
    d = A.sum(axis=1)
    expected = A / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    got = np.zeros((n, n))
    np.add.at(got, (g.dst, g.src), w.astype(np.float64))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(expected, expected.T)
    assert g.gcn_norm(np.float64).dtype == np.float64


def test_gcn_norm_degree_zero_gives_zero():
    # 0 -> 1 and 3 -> 1: vertices 0 and 3 have in-degree 0, so their edges weigh 0; 2 is isolated.
    g = Graph.from_edges([0, 3, 1], [1, 1, 1], 4)
    w = g.gcn_norm()
    assert np.all(np.isfinite(w)) and w.flags.writeable  # the caller's array
    np.testing.assert_array_equal(w[g.src != 1], 0.0)
    np.testing.assert_allclose(w[g.src == 1], 1.0 / 3.0)
    assert Graph.from_edges([], [], 3).gcn_norm().shape == (0,)


def test_to_scipy_round_trip():
    rng = np.random.default_rng(5)
    g = uniform_graph(rng, 30, 200).remove_duplicates()
    m = g.to_scipy()
    assert isinstance(m, sp.csr_matrix) and m.shape == (30, 30) and m.nnz == g.num_edges
    h = Graph.from_edges(m)  # the same edges in the matrix's order: stored alike, as no pair repeats
    np.testing.assert_array_equal(h.adjacency.src, g.adjacency.src)
    np.testing.assert_array_equal(h.adjacency.dst, g.adjacency.dst)
    np.testing.assert_array_equal(h.stored_edge_data, g.stored_edge_data)
    np.testing.assert_array_equal(h.src, m.tocoo().row)
    # Without scalar edge data, entries count edges (multi-edges add up).
    multi = Graph.from_edges([0, 0, 1], [1, 1, 1], 2, edge_data=np.ones((3, 2)))
    np.testing.assert_array_equal(multi.to_scipy().toarray(), [[0, 2], [0, 1]])


def test_repr():
    assert repr(Graph.from_edges([0], [1], edge_data=np.ones((1, 3), np.float32))) == (
        "Graph(num_vertices=2, num_edges=1, edge_data=float32[1, 3])")
