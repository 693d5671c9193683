"""Graph generators and invariant checks shared by the tests in tests/graph."""

import numpy as np

from ngra_tf.graph import Graph


def uniform_graph(rng, num_vertices, num_edges, edge_dims=()):
    """Random multigraph (duplicates and self loops allowed) with float32 edge data."""
    src = rng.integers(0, num_vertices, num_edges)
    dst = rng.integers(0, num_vertices, num_edges)
    data = rng.normal(size=(num_edges,) + tuple(edge_dims)).astype(np.float32)
    return Graph.from_edges(src, dst, num_vertices, edge_data=data)


def power_law_endpoints(rng, num_vertices, num_edges, exponent=1.0):
    """Edge endpoints drawn with P(v) ~ (v + 1)^-exponent: low ids have the highest degrees."""
    weights = 1.0 / np.arange(1, num_vertices + 1) ** exponent
    weights /= weights.sum()
    return rng.choice(num_vertices, num_edges, p=weights), rng.choice(num_vertices, num_edges, p=weights)


def power_law_graph(rng, num_vertices, num_edges, exponent=1.0, shuffle=True):
    """Zipf-like degrees; with shuffle=False, ids are sorted by falling expected degree."""
    src, dst = power_law_endpoints(rng, num_vertices, num_edges, exponent)
    if shuffle:
        relabel = rng.permutation(num_vertices)
        src, dst = relabel[src], relabel[dst]
    data = rng.normal(size=num_edges).astype(np.float32)
    return Graph.from_edges(src, dst, num_vertices, edge_data=data)


def isolated_graph(rng, num_vertices=120, num_edges=300, connected=40):
    """Only `connected` randomly chosen vertices have edges; the rest are isolated."""
    active = rng.choice(num_vertices, connected, replace=False)
    src, dst = active[rng.integers(0, connected, num_edges)], active[rng.integers(0, connected, num_edges)]
    return Graph.from_edges(src, dst, num_vertices, edge_data=rng.normal(size=num_edges).astype(np.float32))


def segment_ids(indptr):
    """The segment of every position of a CSC/CSR index array."""
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def check_indptr(indptr, num_segments, total, ids):
    assert indptr.shape == (num_segments + 1,)
    assert indptr[0] == 0 and indptr[-1] == total
    assert np.all(np.diff(indptr) >= 0)
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(ids, minlength=num_segments)[:num_segments])


def check_adjacency(adj):
    """The CSC and CSR arrays of an Adjacency describe the same, correctly sorted, edges."""
    E = adj.num_edges
    src, dst = np.asarray(adj.src), np.asarray(adj.dst)
    assert src.shape == dst.shape == (E,)
    assert adj.csc_src.dtype == adj.csc_indptr.dtype == adj.csr_indptr.dtype == adj.csr_dst.dtype == adj.csr_edge.dtype
    if E:
        assert 0 <= src.min() and src.max() < adj.num_src
        assert 0 <= dst.min() and dst.max() < adj.num_dst
    # CSC: sorted by (dst, src); dst is the segment of each position.
    check_indptr(adj.csc_indptr, adj.num_dst, E, dst)
    np.testing.assert_array_equal(dst, segment_ids(adj.csc_indptr))
    key = dst.astype(np.int64) * max(adj.num_src, 1) + src
    assert np.all(np.diff(key) >= 0), "CSC order is not sorted by (dst, src)"
    # CSR: csr_edge is a permutation of edge ids grouped by source.
    check_indptr(adj.csr_indptr, adj.num_src, E, src)
    np.testing.assert_array_equal(np.sort(adj.csr_edge), np.arange(E))
    np.testing.assert_array_equal(adj.csr_dst, dst[adj.csr_edge])
    np.testing.assert_array_equal(src[adj.csr_edge], segment_ids(adj.csr_indptr))
    # Within one source, CSR keeps edge-id order (so it is sorted by dst too).
    seg = segment_ids(adj.csr_indptr)
    same = seg[1:] == seg[:-1]
    assert np.all(np.diff(adj.csr_edge.astype(np.int64))[same] > 0)
    np.testing.assert_array_equal(adj.in_degree(), np.bincount(dst, minlength=adj.num_dst))
    np.testing.assert_array_equal(adj.out_degree(), np.bincount(src, minlength=adj.num_src))


def check_graph(graph, src_in, dst_in, data_in=None):
    """graph was built from edges src_in[i] -> dst_in[i] (with edge data data_in)."""
    src_in, dst_in = np.asarray(src_in, np.int64), np.asarray(dst_in, np.int64)
    E, n = len(src_in), graph.num_vertices
    assert graph.num_edges == E
    # The public per-edge arrays are in the user's order: the input's.
    np.testing.assert_array_equal(graph.src, src_in)
    np.testing.assert_array_equal(graph.dst, dst_in)
    # Stored order: edge_order[k] is the input position of stored edge k.
    order = graph.edge_order
    np.testing.assert_array_equal(np.sort(order), np.arange(E))
    np.testing.assert_array_equal(graph.adjacency.src, src_in[order])
    np.testing.assert_array_equal(graph.adjacency.dst, dst_in[order])
    if data_in is None:
        assert graph.edge_data is None and graph.stored_edge_data is None
    else:
        np.testing.assert_array_equal(graph.edge_data, data_in)
        np.testing.assert_array_equal(graph.stored_edge_data, np.asarray(data_in)[order])
    # Ties (multi-edges) keep input order.
    pair = graph.adjacency.dst.astype(np.int64) * max(n, 1) + graph.adjacency.src
    tie = pair[1:] == pair[:-1]
    assert np.all(np.diff(order)[tie] > 0)
    check_adjacency(graph.adjacency)
    np.testing.assert_array_equal(graph.in_degree(), np.bincount(dst_in, minlength=n))
    np.testing.assert_array_equal(graph.out_degree(), np.bincount(src_in, minlength=n))


def check_partition(graph, partition):
    """Every structural invariant of a Partition of `graph`."""
    n, E, P = graph.num_vertices, graph.num_edges, partition.num_parts
    bounds = partition.bounds
    assert bounds.shape == (P + 1,) and bounds[0] == 0 and bounds[-1] == n
    sizes = np.diff(bounds)
    assert np.all(sizes >= 0) and sizes.max() - sizes.min() <= 1
    # order / position are inverse permutations; intervals tile the new ids.
    np.testing.assert_array_equal(np.sort(partition.order), np.arange(n))
    np.testing.assert_array_equal(partition.position[partition.order], np.arange(n))
    vertices = [partition.vertices(i) for i in range(P)]
    assert [len(v) for v in vertices] == list(sizes)
    np.testing.assert_array_equal(np.concatenate(vertices) if n else np.zeros(0), partition.order)
    # Each chunk: local ids map back to the graph's edges, all edges exactly once.
    assert len(partition.chunks) == P and all(len(row) == P for row in partition.chunks)
    all_ids = []
    counts = np.zeros((P, P), np.int64)
    for i in range(P):
        for j in range(P):
            chunk = partition.chunk(i, j)
            assert chunk is partition.chunks[i][j]
            assert (chunk.src_part, chunk.dst_part) == (i, j)
            adj = chunk.adjacency
            assert (adj.num_src, adj.num_dst) == (sizes[i], sizes[j])
            check_adjacency(adj)
            ids = np.asarray(chunk.edge_ids)  # positions in the user's order
            assert chunk.num_edges == len(ids)
            np.testing.assert_array_equal(vertices[i][adj.src], graph.src[ids])
            np.testing.assert_array_equal(vertices[j][adj.dst], graph.dst[ids])
            if graph.edge_data is None:
                assert chunk.edge_data is None
            else:
                np.testing.assert_array_equal(chunk.edge_data, graph.edge_data[ids])
            counts[i, j] = len(ids)
            all_ids.append(ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(all_ids)), np.arange(E))
    np.testing.assert_array_equal(partition.edge_counts, counts)
    # split / merge.
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    blocks = partition.split(x)
    assert len(blocks) == P
    for i in range(P):
        np.testing.assert_array_equal(blocks[i], x[vertices[i]])
    np.testing.assert_array_equal(partition.merge(blocks), x)
    y = np.arange(n) * 7
    np.testing.assert_array_equal(partition.merge(partition.split(y)), y)
    # balance: max over mean of chunk counts, never worse than identity intervals.
    balance = partition.balance()
    assert balance["after"] <= balance["before"]
    expected = counts.max() / counts.mean() if E else 1.0
    assert np.isclose(balance["after"], expected)
    assert balance["after"] >= 1.0 - 1e-12
