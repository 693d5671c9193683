"""The invariant the system rests on: propagating chunk by chunk equals propagating the whole graph.

For a partition into P intervals, destination interval j receives from the chunks
(i, j), i = 0..P-1. Sums add up across chunks; means are chunk sums over the
total in-degree; max and min combine only over chunks that actually reach a
destination vertex (a vertex with no in-edges in a chunk gets 0 there by
definition, which is not a neutral element).
"""

import numpy as np
import pytest

from graph_checks import isolated_graph, power_law_graph, uniform_graph
from ngra_tf import ops
from ngra_tf.graph import Graph

PROGRAMS = ["copy_src", "src_mul_edge", "src_add_dst", "gate_sigmoid"]
REDUCES = ["sum", "mean", "max", "min"]
FEATURES = 4
RTOL = ATOL = 1e-5


def _messages(graph, x_src, x_dst, program):
    """The per-edge messages of a program, in numpy (float64)."""
    s = x_src[graph.src].astype(np.float64)
    if program == "copy_src":
        return s
    if program == "src_mul_edge":
        return s * graph.edge_data[:, None]
    t = x_dst[graph.dst].astype(np.float64)
    if program == "src_add_dst":
        return s + t
    return s[:, 1] / (1.0 + np.exp(-(s[:, 0] + t)))  # gate_sigmoid


def _magnitude(graph, x_src, x_dst, program, reduce):
    """Per destination, the sum of |message| (over the in-degree for mean): float32 sums in any
    order agree to about eps times this, however much the terms cancel."""
    scale = np.zeros((graph.num_vertices, FEATURES))
    np.add.at(scale, graph.dst, np.abs(_messages(graph, x_src, x_dst, program)))
    if reduce == "mean":
        scale /= np.maximum(graph.in_degree(), 1)[:, None]
    return scale


def assert_close(actual, expected, scale=0.0, err_msg=""):
    """|actual - expected| <= RTOL * (|expected| + scale) + ATOL, elementwise."""
    assert actual.shape == expected.shape, err_msg
    error = np.abs(actual.astype(np.float64) - expected)
    bound = RTOL * (np.abs(expected) + scale) + ATOL
    bad = np.argwhere(~(error <= bound))
    assert bad.size == 0, (f"{err_msg}: {len(bad)} elements differ, first at {tuple(bad[0])}: "
                           f"{actual[tuple(bad[0])]} vs {expected[tuple(bad[0])]}")


def _graphs():
    rng = np.random.default_rng(20)
    return {
        "uniform": uniform_graph(rng, 60, 400),
        "power_law": power_law_graph(rng, 120, 1200, exponent=1.0),
        "isolated": isolated_graph(rng, 80, 200, 25),
        "tiny": Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 2], 3, edge_data=np.float32([0.5, -1.0, 2.0, 3.0])),
    }


GRAPHS = _graphs()


def _inputs(program, n, seed):
    rng = np.random.default_rng(seed)
    src_shape = (n, 2, FEATURES) if program == "gate_sigmoid" else (n, FEATURES)
    x_src = rng.normal(size=src_shape).astype(np.float32)
    x_dst = rng.normal(size=(n, FEATURES)).astype(np.float32) if program in ("src_add_dst", "gate_sigmoid") else None
    return x_src, x_dst


def _run(graph, x_src, x_dst, program, reduce):
    return ops.fused_gather(graph, x_src, x_dst=x_dst, program=program, reduce=reduce).numpy()


def _blocks(partition, x, i):
    return None if x is None else x[partition.vertices(i)]


def _assemble(graph, partition, x_src, x_dst, program, reduce):
    """Whole-graph fused_gather rebuilt from per-chunk fused_gathers."""
    P = partition.num_parts
    blocks = []
    for j in range(P):
        xd = _blocks(partition, x_dst, j)
        in_degree = [partition.chunk(i, j).adjacency.in_degree() for i in range(P)]
        total = np.sum(in_degree, axis=0)
        reached = (total > 0)[:, None]
        if reduce in ("sum", "mean"):
            parts = [_run(partition.chunk(i, j), _blocks(partition, x_src, i), xd, program, "sum") for i in range(P)]
            out = np.sum(parts, axis=0)
            if reduce == "mean":
                out = np.where(reached, out / np.maximum(total, 1)[:, None], 0.0)
        else:
            extreme = np.maximum if reduce == "max" else np.minimum
            neutral = -np.inf if reduce == "max" else np.inf
            out = np.full((len(total), FEATURES), neutral, np.float32)
            for i in range(P):
                chunk = partition.chunk(i, j)
                part = _run(chunk, _blocks(partition, x_src, i), xd, program, reduce)
                # The chunk alone: same as the whole-graph op on a graph of just its edges.
                ids = chunk.edge_ids
                sub = Graph.from_edges(graph.src[ids], graph.dst[ids], graph.num_vertices,
                                       edge_data=graph.edge_data[ids])
                assert_close(part, _run(sub, x_src, x_dst, program, reduce)[partition.vertices(j)],
                             err_msg=f"chunk ({i}, {j})")
                out = extreme(out, np.where((in_degree[i] > 0)[:, None], part, neutral))
            out = np.where(reached, out, 0.0)
        blocks.append(out)
    return partition.merge(blocks)


@pytest.mark.parametrize("num_parts", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_chunks_reassemble_the_whole_graph(name, num_parts):
    graph = GRAPHS[name]
    partition = graph.partition(num_parts)
    for k, program in enumerate(PROGRAMS):
        x_src, x_dst = _inputs(program, graph.num_vertices, seed=k)
        for reduce in REDUCES:
            whole = _run(graph, x_src, x_dst, program, reduce)
            assert whole.shape == (graph.num_vertices, FEATURES)
            assembled = _assemble(graph, partition, x_src, x_dst, program, reduce)
            assert_close(assembled, whole, _magnitude(graph, x_src, x_dst, program, reduce),
                         err_msg=f"{program}/{reduce} with P={num_parts}")


@pytest.mark.parametrize("program", PROGRAMS)
def test_whole_graph_matches_numpy(program):
    """Anchor the invariant: the whole-graph op is the textbook segment reduction."""
    graph = GRAPHS["power_law"]
    x_src, x_dst = _inputs(program, graph.num_vertices, seed=7)
    messages = _messages(graph, x_src, x_dst, program)
    degree = graph.in_degree()[:, None]
    expected = {"sum": np.zeros((graph.num_vertices, FEATURES)),
                "max": np.full((graph.num_vertices, FEATURES), -np.inf),
                "min": np.full((graph.num_vertices, FEATURES), np.inf)}
    np.add.at(expected["sum"], graph.dst, messages)
    np.maximum.at(expected["max"], graph.dst, messages)
    np.minimum.at(expected["min"], graph.dst, messages)
    expected["mean"] = expected["sum"] / np.maximum(degree, 1)
    assert np.any(degree == 0)
    for reduce in REDUCES:
        want = np.where(degree > 0, expected[reduce], 0.0)
        assert_close(_run(graph, x_src, x_dst, program, reduce), want,
                     _magnitude(graph, x_src, x_dst, program, reduce), err_msg=f"{program}/{reduce}")


def test_per_feature_edge_weights_reassemble():
    rng = np.random.default_rng(21)
    graph = uniform_graph(rng, 50, 300, edge_dims=(FEATURES,))
    partition = graph.partition(3)
    x = rng.normal(size=(50, FEATURES)).astype(np.float32)
    whole = _run(graph, x, None, "src_mul_edge", "sum")
    expected, scale = np.zeros_like(x, np.float64), np.zeros_like(x, np.float64)
    np.add.at(expected, graph.dst, x[graph.src] * graph.edge_data)
    np.add.at(scale, graph.dst, np.abs(x[graph.src] * graph.edge_data))
    assert_close(whole, expected, scale)
    blocks = [sum(_run(partition.chunk(i, j), x[partition.vertices(i)], None, "src_mul_edge", "sum")
                  for i in range(3)) for j in range(3)]
    assert_close(partition.merge(blocks), whole, scale)
