"""Partition: intervals, chunks, split/merge and edge balance."""

import numpy as np
import pytest

from graph_checks import check_partition, isolated_graph, power_law_graph, uniform_graph
from ngra_tf.graph import Graph, Partition

PARTS = [1, 2, 3, 5, 8]


def _graphs():
    rng = np.random.default_rng(10)
    return {
        "uniform": uniform_graph(rng, 97, 600),
        "uniform_2d_data": uniform_graph(rng, 40, 300, edge_dims=(2, 3)),
        "power_law": power_law_graph(rng, 300, 3000, exponent=1.0),
        "power_law_sorted": power_law_graph(rng, 300, 3000, exponent=1.0, shuffle=False),
        "isolated": isolated_graph(rng),
        "no_edge_data": Graph.from_edges(rng.integers(0, 50, 200), rng.integers(0, 50, 200), 50),
        "tiny": Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 2], 3),  # P > num_vertices for P >= 5
        "edgeless": Graph.from_edges([], [], 10),
        "empty": Graph.from_edges([], [], 0),
    }


GRAPHS = _graphs()


@pytest.mark.parametrize("reencode", [True, False])
@pytest.mark.parametrize("num_parts", PARTS)
@pytest.mark.parametrize("name", list(GRAPHS))
def test_partition_invariants(name, num_parts, reencode):
    graph = GRAPHS[name]
    partition = graph.partition(num_parts, reencode=reencode)
    assert isinstance(partition, Partition) and partition.graph is graph and partition.num_parts == num_parts
    check_partition(graph, partition)
    if not reencode:
        n = graph.num_vertices
        np.testing.assert_array_equal(partition.order, np.arange(n))
        np.testing.assert_array_equal(partition.bounds, [n * i // num_parts for i in range(num_parts + 1)])
        assert partition.balance()["after"] == partition.balance()["before"]
    # "before" is what the identity intervals give.
    identity = graph.partition(num_parts, reencode=False)
    assert partition.balance()["before"] == identity.balance()["after"]


def test_more_parts_than_vertices_gives_empty_intervals():
    graph = GRAPHS["tiny"]
    partition = graph.partition(8)
    sizes = np.diff(partition.bounds)
    assert sorted(sizes.tolist()) == [0] * 5 + [1] * 3
    for i in np.flatnonzero(sizes == 0):
        assert partition.vertices(i).shape == (0,)
        assert all(partition.chunk(i, j).num_edges == 0 for j in range(8))
        assert partition.chunk(i, 0).adjacency.num_src == 0


def test_empty_graph_partition():
    partition = GRAPHS["empty"].partition(3)
    np.testing.assert_array_equal(partition.bounds, [0, 0, 0, 0])
    assert partition.balance() == {"before": 1.0, "after": 1.0}
    assert partition.merge(partition.split(np.zeros((0, 4)))).shape == (0, 4)


def test_reencoding_balances_a_power_law_graph():
    # Ids sorted by falling degree: identity intervals put the hubs together.
    graph = power_law_graph(np.random.default_rng(11), 4000, 40000, exponent=0.8, shuffle=False)
    partition = graph.partition(4)
    balance = partition.balance()
    assert balance["before"] > 4.0
    assert balance["after"] < balance["before"]
    assert balance["after"] < 1.5
    counts = partition.edge_counts
    assert counts.sum() == graph.num_edges
    assert counts.max() < 1.5 * graph.num_edges / 16
    check_partition(graph, partition)


def test_invalid_num_parts():
    graph = GRAPHS["tiny"]
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="num_parts"):
            graph.partition(bad)


def test_partition_arrays_are_read_only():
    partition = GRAPHS["uniform"].partition(3)
    chunk = partition.chunk(1, 2)
    for array in (partition.order, partition.position, partition.bounds, chunk.edge_ids, chunk.edge_data,
                  chunk.adjacency.csc_src):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = array[0]
    with pytest.raises(Exception):
        chunk.edge_ids = None  # frozen dataclass
