"""Forward results of scatter, gather and fused_gather against a numpy oracle
and the pure-TF reference."""

import functools
import zlib

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import fused_gather, gather, scatter
from ngra_testlib import (BLOCKED_KINDS, BLOCKED_WIDTH, GRAPH_KINDS, NUM_TYPES, PROGRAM_NAMES, REDUCES,
                          blocked_adjacency, cache_blocks, dst_of, make_adjacency, oracle_fused_gather,
                          oracle_reduce, program_inputs, random_graph, reference_fused_gather)

FLOATS = (np.float32, np.float64)
INDICES = (np.int32, np.int64)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def run_fused(program, reduce, adjacency, x_src, x_dst, edge_data):
    return fused_gather(adjacency, x_src, x_dst, edge_data, program=program, reduce=reduce).numpy()


@pytest.mark.parametrize("kind", GRAPH_KINDS + ("rect",))
@pytest.mark.parametrize("index_dtype", INDICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_fused_gather_matches_oracle(program, reduce, dtype, index_dtype, kind):
    rng = np.random.default_rng(zlib.crc32(f"{program}/{reduce}/{kind}".encode()))
    adjacency = make_adjacency(kind, rng, index_dtype)
    inputs = program_inputs(program, adjacency, rng, dtype)
    out = run_fused(program, reduce, adjacency, *inputs)
    assert out.dtype == dtype and out.shape == (adjacency.num_dst, 3)
    np.testing.assert_allclose(out, oracle_fused_gather(program, reduce, adjacency, *inputs), **tolerance(dtype))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_fused_gather_matches_tf_reference(program, reduce):
    rng = np.random.default_rng(7)
    adjacency = make_adjacency("random", rng)
    inputs = program_inputs(program, adjacency, rng, np.float64)
    expected = reference_fused_gather(program, reduce, adjacency, *inputs).numpy()
    np.testing.assert_allclose(run_fused(program, reduce, adjacency, *inputs), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_trailing_feature_shape(program):
    """Features [3, 4] (x_src [V, 3, 4] for copy_src) come back shaped [V, 3, 4]."""
    rng = np.random.default_rng(1)
    adjacency = make_adjacency("random", rng)
    inputs = program_inputs(program, adjacency, rng, np.float64, features=(3, 4))
    for reduce in ("sum", "max"):
        out = run_fused(program, reduce, adjacency, *inputs)
        assert out.shape == (adjacency.num_dst, 3, 4)
        np.testing.assert_allclose(out, oracle_fused_gather(program, reduce, adjacency, *inputs), rtol=1e-12)


@pytest.mark.parametrize("features,weight_shape", [
    ((4,), ()),             # one weight per edge
    ((4,), (4,)),           # one per edge and feature
    ((1, 4), (1,)),         # one head: [E, 1], a scalar weight as a matrix
    ((2, 3), (2,)),         # one per edge and head
    ((2, 3), (2, 3)),       # per feature, with a trailing feature shape
    ((3, 2, 2), (3, 2)),    # per head, with a longer prefix
])
@pytest.mark.parametrize("reduce", REDUCES)
def test_src_mul_edge_weight_shapes(features, weight_shape, reduce):
    rng = np.random.default_rng(2)
    adjacency = make_adjacency("random", rng)
    x_src = rng.normal(size=(adjacency.num_src,) + features)
    weight = rng.normal(size=(adjacency.num_edges,) + weight_shape)
    out = run_fused("src_mul_edge", reduce, adjacency, x_src, None, weight)
    expected = oracle_fused_gather("src_mul_edge", reduce, adjacency, x_src, None, weight)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_graph_edge_data_is_the_default():
    rng = np.random.default_rng(3)
    base = random_graph(rng)
    weight = rng.normal(size=base.num_edges)
    graph = base.with_edge_data(weight)
    x = rng.normal(size=(graph.num_vertices, 2))
    np.testing.assert_allclose(fused_gather(graph, x, program="src_mul_edge").numpy(),
                               fused_gather(graph, x, edge_data=weight, program="src_mul_edge").numpy())
    types = rng.integers(0, 2, graph.num_edges)
    typed = base.with_edge_data(types)
    xt = rng.normal(size=(graph.num_vertices, 2, 3))
    np.testing.assert_allclose(fused_gather(typed, xt, program="type_select").numpy(),
                               oracle_fused_gather("type_select", "sum", typed.adjacency, xt, None,
                                                   typed.stored_edge_data))
    np.testing.assert_allclose(fused_gather(base, xt, edge_data=types, program="type_select").numpy(),
                               fused_gather(typed, xt, program="type_select").numpy())


def test_chunk_uses_its_own_edge_data():
    rng = np.random.default_rng(4)
    graph = random_graph(rng, 20, 120, edge_data=rng.normal(size=120))
    chunk = graph.partition(3).chunk(1, 0)
    x = rng.normal(size=(chunk.adjacency.num_src, 2))
    expected = oracle_fused_gather("src_mul_edge", "sum", chunk.adjacency, x, None, chunk.edge_data)
    np.testing.assert_allclose(fused_gather(chunk, x, program="src_mul_edge").numpy(), expected, rtol=1e-12)


def test_an_empty_operand_is_made_once_eagerly_and_is_a_constant_in_a_graph():
    from ngra_tf.ops.propagation import empty_operand

    assert empty_operand(tf.float32) is empty_operand(tf.float32)  # an eager call converts none
    assert empty_operand(tf.int32).dtype == tf.int32 and empty_operand(tf.int32).shape == [0]
    traced = tf.function(lambda: empty_operand(tf.float32)).get_concrete_function()
    assert traced.captured_inputs == []  # not the eager tensor, captured into the graph
    assert [op.type for op in traced.graph.get_operations()].count("Const") == 1


@pytest.mark.parametrize("owner", ["graph", "chunk"])
def test_own_edge_data_is_captured_by_a_traced_function_not_embedded(owner):
    """A graph's (or chunk's) own edge data reaches the op as the tensor it keeps: a tf.function captures it,
    as it does the index arrays, rather than holding a copy of every weight as a constant. (TensorFlow embeds
    a captured tensor of fewer than 128 elements anyway: every chunk here has more edges.)"""
    rng = np.random.default_rng(6)
    graph = random_graph(rng, 30, 1000, edge_data=rng.normal(size=1000))
    target = graph if owner == "graph" else graph.partition(2).chunk(1, 0)
    x = tf.constant(rng.normal(size=(target.adjacency.num_src, 3)))
    traced = tf.function(lambda x: fused_gather(target, x, program="src_mul_edge"))
    np.testing.assert_array_equal(traced(x).numpy(), fused_gather(target, x, program="src_mul_edge").numpy())
    graph_def = traced.get_concrete_function(x).graph.as_graph_def()
    sizes = [tf.make_ndarray(node.attr["value"].tensor).size for node in graph_def.node if node.op == "Const"]
    assert max(sizes, default=0) < target.adjacency.num_edges, sizes


# ---- cache-blocked walks (large gathered matrices) ----


@functools.lru_cache(maxsize=None)
def blocked_case(kind, program, dtype):
    """float64 runs use int64 indices, float32 runs int32."""
    adjacency = blocked_adjacency(kind, np.int64 if dtype == np.float64 else np.int32)
    rng = np.random.default_rng(zlib.crc32(f"{kind}/{program}".encode()))
    return adjacency, program_inputs(program, adjacency, rng, dtype, features=(BLOCKED_WIDTH,))


def test_blocked_shapes_really_block():
    """The graphs below are big enough for the kernels to cut their walks into cache blocks."""
    for kind in ("wide_src", "unsorted"):
        a = blocked_adjacency(kind)
        assert cache_blocks(a.num_src, 1, 4, a.num_edges, a.num_dst) > 1  # forward walk
        assert cache_blocks(a.num_src, NUM_TYPES, 8, a.num_edges, a.num_dst) > 1  # type_select's
    a = blocked_adjacency("wide_dst")
    assert cache_blocks(a.num_dst, 2, 4, a.num_edges, a.num_src) > 1  # x_src gradient walk with x_dst


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", BLOCKED_KINDS)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_cache_blocked_walks_match_oracle(program, reduce, kind, dtype):
    adjacency, inputs = blocked_case(kind, program, dtype)
    out = run_fused(program, reduce, adjacency, *inputs)
    np.testing.assert_allclose(out, oracle_fused_gather(program, reduce, adjacency, *inputs), **tolerance(dtype))


@pytest.mark.parametrize("weight", ["scalar", "head"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_cache_blocked_weight_kinds(reduce, weight):
    adjacency = blocked_adjacency("unsorted")
    inputs = program_inputs("src_mul_edge", adjacency, np.random.default_rng(16), np.float32, features=(2, 65),
                            weight=weight)
    np.testing.assert_allclose(run_fused("src_mul_edge", reduce, adjacency, *inputs),
                               oracle_fused_gather("src_mul_edge", reduce, adjacency, *inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", BLOCKED_KINDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cache_blocked_gather(reduce, kind):
    adjacency = blocked_adjacency(kind)
    values = np.random.default_rng(12).normal(size=(adjacency.num_edges, BLOCKED_WIDTH)).astype(np.float32)
    np.testing.assert_allclose(gather(adjacency, values, reduce).numpy(), oracle_reduce(values, adjacency, reduce),
                               rtol=1e-5, atol=1e-5)
    x = np.random.default_rng(13).normal(size=(adjacency.num_src, BLOCKED_WIDTH))
    np.testing.assert_array_equal(scatter(adjacency, x).numpy(), x[adjacency.csc_src])


# ---- scatter and gather ----


@pytest.mark.parametrize("kind", GRAPH_KINDS + ("rect",))
@pytest.mark.parametrize("index_dtype", INDICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter(dtype, index_dtype, kind):
    rng = np.random.default_rng(5)
    adjacency = make_adjacency(kind, rng, index_dtype)
    x_src = rng.normal(size=(adjacency.num_src, 3, 4)).astype(dtype)
    x_dst = rng.normal(size=(adjacency.num_dst, 2)).astype(dtype)
    src_rows = scatter(adjacency, x_src)
    assert src_rows.dtype == dtype
    np.testing.assert_array_equal(src_rows.numpy(), x_src[adjacency.csc_src])
    src_rows, dst_rows = scatter(adjacency, x_src, x_dst)
    np.testing.assert_array_equal(src_rows.numpy(), x_src[adjacency.csc_src])
    np.testing.assert_array_equal(dst_rows.numpy(), x_dst[dst_of(adjacency)])


@pytest.mark.parametrize("kind", GRAPH_KINDS + ("rect",))
@pytest.mark.parametrize("index_dtype", INDICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_gather(reduce, dtype, index_dtype, kind):
    rng = np.random.default_rng(6)
    adjacency = make_adjacency(kind, rng, index_dtype)
    for shape in [(), (3,), (2, 3)]:
        values = rng.normal(size=(adjacency.num_edges,) + shape).astype(dtype)
        out = gather(adjacency, values, reduce)
        assert out.dtype == dtype and out.shape == (adjacency.num_dst,) + shape
        np.testing.assert_allclose(out.numpy(), oracle_reduce(values, adjacency, reduce), **tolerance(dtype))


@pytest.mark.parametrize("size", ["small", "blocked"])
@pytest.mark.parametrize("ids", ["permutation", "repeats"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_raw_gather_with_edge_ids(reduce, ids, size):
    """NgraGather reads values[edge_ids[k]] at position k; the ids need not be a permutation."""
    if size == "small":
        adjacency = make_adjacency("random", np.random.default_rng(14))
    else:
        adjacency = blocked_adjacency("wide_src")
    rng = np.random.default_rng(15)
    rows = adjacency.num_edges if ids == "permutation" else 7000
    values = rng.normal(size=(rows, 3 if size == "small" else BLOCKED_WIDTH))
    edge_ids = rng.permutation(rows) if ids == "permutation" else rng.integers(0, rows, adjacency.num_edges)
    edge_ids = edge_ids.astype(adjacency.index_dtype)
    out, argedge = ngra_tf.ops.library().ngra_gather(values, adjacency.csc_indptr, edge_ids, np.zeros(0),
                                                      reduce=reduce)
    np.testing.assert_allclose(out.numpy(), oracle_reduce(values[edge_ids], adjacency, reduce), rtol=1e-12)
    if reduce in ("max", "min"):  # the winner is named by its edge id (a row of values)
        won = argedge.numpy()
        present = won >= 0
        np.testing.assert_array_equal(values[won[present], np.nonzero(present)[1]], out.numpy()[present])


def test_gather_of_scatter_is_fused_gather():
    rng = np.random.default_rng(8)
    graph = random_graph(rng)
    x = rng.normal(size=(graph.num_vertices, 5))
    for reduce in REDUCES:
        np.testing.assert_allclose(gather(graph, scatter(graph, x), reduce).numpy(),
                                   fused_gather(graph, x, reduce=reduce).numpy(), rtol=1e-12)


def test_isolated_vertices_get_zero():
    rng = np.random.default_rng(9)
    graph = random_graph(rng)  # the last two vertices have no edges
    assert np.all(graph.in_degree()[-2:] == 0)
    x = rng.uniform(1, 2, (graph.num_vertices, 3))  # all positive: max would never give 0
    for reduce in REDUCES:
        out = fused_gather(graph, -x if reduce == "min" else x, reduce=reduce).numpy()
        np.testing.assert_array_equal(out[-2:], 0)
        assert np.all(out[graph.in_degree() > 0] != 0)


# ---- reduced precision ----


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_reduced_precision(program, reduce, dtype):
    rng = np.random.default_rng(10)
    adjacency = make_adjacency("random", rng)
    x_src, x_dst, edge_data = program_inputs(program, adjacency, rng, np.float32)
    rounded = [None if a is None else tf.cast(a, dtype) for a in (x_src, x_dst)]
    weight = tf.cast(edge_data, dtype) if program == "src_mul_edge" else edge_data
    out = fused_gather(adjacency, rounded[0], rounded[1], weight, program=program, reduce=reduce)
    assert out.dtype == dtype
    # The oracle sees the same rounded inputs, computed in float32.
    widened = [None if a is None else tf.cast(a, tf.float32).numpy() for a in (*rounded, weight)]
    if program == "type_select":
        widened[2] = edge_data
    expected = oracle_fused_gather(program, reduce, adjacency, *widened)
    tol = 1e-2 if dtype == tf.float16 else 5e-2
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(), expected, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_reduced_precision_scatter_gather(dtype):
    rng = np.random.default_rng(11)
    adjacency = make_adjacency("random", rng)
    x = tf.cast(rng.normal(size=(adjacency.num_src, 3)), dtype)
    rows = scatter(adjacency, x)
    assert rows.dtype == dtype
    np.testing.assert_array_equal(tf.cast(rows, tf.float32).numpy(), tf.cast(x, tf.float32).numpy()[adjacency.csc_src])
    out = gather(adjacency, rows, "max")
    assert out.dtype == dtype
    expected = oracle_reduce(tf.cast(rows, tf.float32).numpy(), adjacency, "max")
    np.testing.assert_array_equal(tf.cast(out, tf.float32).numpy(), expected)


# ---- non-finite values ----


@pytest.mark.parametrize("reduce", REDUCES)
def test_nan_and_inf_propagate(reduce):
    """A NaN source poisons exactly its destinations (whatever its position in
    the segment); +Inf reaches sum, mean and max; nothing crashes."""
    # Destination 3 reads sources 0 (first), 1 and 2; destination 4 reads 1 and 2 only.
    graph = ngra_tf.Graph.from_edges([0, 1, 2, 1, 2, 2], [3, 3, 3, 4, 4, 0], num_vertices=5)
    x = np.array([[1.0, 1.0], [5.0, -5.0], [2.0, 2.0], [0, 0], [0, 0]])
    for bad in (0, 1, 2):  # first, middle and last edge of destination 3
        poisoned = x.copy()
        poisoned[bad, 0] = np.nan
        out = fused_gather(graph, poisoned, reduce=reduce).numpy()
        assert np.isnan(out[3, 0]) and not np.isnan(out[3, 1])
        assert np.isnan(out[4, 0]) == (bad != 0)
        assert np.isnan(out[0, 0]) == (bad == 2)
        assert np.isnan(gather(graph, poisoned[graph.src], reduce).numpy()[3, 0])
    infinite = x.copy()
    infinite[1, 0] = np.inf
    out = fused_gather(graph, infinite, reduce=reduce).numpy()
    assert out[3, 0] == {"sum": np.inf, "mean": np.inf, "max": np.inf, "min": 1.0}[reduce]
    infinite[2, 0] = -np.inf  # inf + -inf is NaN for a sum
    out = fused_gather(graph, infinite, reduce=reduce).numpy()
    expected = {"sum": np.nan, "mean": np.nan, "max": np.inf, "min": -np.inf}[reduce]
    np.testing.assert_array_equal(out[3, 0], expected)
