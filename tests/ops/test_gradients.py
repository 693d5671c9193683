"""Gradients of fused_gather, gather and scatter: finite differences, autodiff
of the pure-TF reference, deterministic max/min tie-breaking, tf.function."""

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import fused_gather, gather, scatter
from ngra_testlib import (BLOCKED_KINDS, BLOCKED_WIDTH, PROGRAM_NAMES, REDUCES, assert_gradients_match_numerical,
                          blocked_adjacency, dst_of, float_args, lib, make_adjacency, oracle_reduce, program_inputs,
                          random_graph, reference_fused_gather, separated_inputs, tape_gradients)


def small_graph(seed=0):
    """6 vertices (5 is isolated), 12 edges with a multi-edge and a self loop."""
    return random_graph(np.random.default_rng(seed), num_vertices=6, num_edges=12).adjacency


# ---- fused_gather ----


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_fused_gather_gradient_numerical(program, reduce):
    adjacency = small_graph()
    inputs = separated_inputs(program, reduce, adjacency, seed=1, features=(2,))
    args, kwargs = float_args(program, *inputs)

    def f(*a):
        return fused_gather(adjacency, program=program, reduce=reduce, **kwargs(*a))

    assert_gradients_match_numerical(f, args)


@pytest.mark.parametrize("weight", ["scalar", "vector", "head"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_src_mul_edge_weight_gradient_numerical(weight, reduce):
    adjacency = small_graph()
    x_src, _, w = separated_inputs("src_mul_edge", reduce, adjacency, seed=2, features=(2, 2), weight=weight)

    def f(x, edge_weight):
        return fused_gather(adjacency, x, edge_data=edge_weight, program="src_mul_edge", reduce=reduce)

    assert_gradients_match_numerical(f, [x_src, w])


def assert_kernel_gradients_match_reference(adjacency, program, reduce, args, kwargs, upstream):
    """Tape gradients of the kernel and of the pure-TF reference agree for every float input."""

    def kernel(*a):
        return fused_gather(adjacency, program=program, reduce=reduce, **kwargs(*a))

    def reference(*a):
        k = kwargs(*a)
        return reference_fused_gather(program, reduce, adjacency, k["x_src"], k.get("x_dst"), k.get("edge_data"))

    for got, want in zip(tape_gradients(kernel, args, upstream), tape_gradients(reference, args, upstream)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind,index_dtype", [("random", np.int32), ("random", np.int64), ("chunk", np.int32),
                                              ("rect", np.int64)])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_fused_gather_gradient_matches_reference(program, reduce, kind, index_dtype):
    rng = np.random.default_rng(3)
    adjacency = make_adjacency(kind, rng, index_dtype)
    features = (2, 3)
    # Analytic gradients only differ on exact ties, which random inputs avoid.
    inputs = separated_inputs(program, reduce, adjacency, seed=3, gap=1e-9, features=features,
                              weight="head" if kind == "chunk" else "vector")
    args, kwargs = float_args(program, *inputs)
    upstream = rng.normal(size=(adjacency.num_dst,) + features)

    assert_kernel_gradients_match_reference(adjacency, program, reduce, args, kwargs, upstream)


@pytest.mark.parametrize("kind", BLOCKED_KINDS)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("program", PROGRAM_NAMES + ("src_mul_edge/head",))
def test_cache_blocked_gradients_match_reference(program, reduce, kind):
    """Large gathered matrices: the gradient walks cut them into cache blocks."""
    program, _, weight = program.partition("/")
    adjacency = blocked_adjacency(kind, np.int64 if kind == "unsorted" else np.int32)
    rng = np.random.default_rng(18)
    features = (2, BLOCKED_WIDTH // 2) if weight else (BLOCKED_WIDTH,)
    inputs = program_inputs(program, adjacency, rng, np.float64, features=features, weight=weight or "vector")
    args, kwargs = float_args(program, *inputs)
    upstream = rng.normal(size=(adjacency.num_dst,) + features)

    assert_kernel_gradients_match_reference(adjacency, program, reduce, args, kwargs, upstream)


# ---- gather and scatter ----


def distinct_edge_values(adjacency, width=2):
    """Edge values at least 0.1 apart (no ties for max/min, even under finite differences)."""
    count = adjacency.num_edges * width
    return np.random.default_rng(4).permutation(count).reshape(-1, width) * 0.1 - 1.0


@pytest.mark.parametrize("reduce", REDUCES)
def test_gather_gradient_numerical(reduce):
    adjacency = small_graph()
    assert_gradients_match_numerical(lambda v: gather(adjacency, v, reduce), [distinct_edge_values(adjacency)])


@pytest.mark.parametrize("reduce", REDUCES)
def test_gather_gradient_matches_reference(reduce):
    adjacency = make_adjacency("chunk", np.random.default_rng(5), np.int64)
    values = distinct_edge_values(adjacency)
    upstream = np.random.default_rng(6).normal(size=(adjacency.num_dst, 2))
    dst = dst_of(adjacency)
    got = tape_gradients(lambda v: gather(adjacency, v, reduce), [values], upstream)
    want = tape_gradients(lambda v: ngra_tf.ops.reference.gather(v, dst, adjacency.num_dst, reduce), [values], upstream)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


@pytest.mark.parametrize("reduce", REDUCES)
def test_raw_gather_with_edge_ids_gradient(reduce):
    """With a permutation as edge_ids, the gradient lands on the rows the ids name."""
    adjacency = small_graph()
    edge_ids = tf.constant(np.random.default_rng(20).permutation(adjacency.num_edges).astype(np.int32))
    indptr = tf.constant(adjacency.csc_indptr)

    def f(v):
        return lib().ngra_gather(v, indptr, edge_ids, tf.zeros([0], v.dtype), reduce=reduce)[0]

    assert_gradients_match_numerical(f, [distinct_edge_values(adjacency)])


def test_scatter_gradient_numerical():
    adjacency = make_adjacency("rect", np.random.default_rng(7))
    rng = np.random.default_rng(8)
    x_src = rng.normal(size=(adjacency.num_src, 2, 2))
    x_dst = rng.normal(size=(adjacency.num_dst, 3))
    assert_gradients_match_numerical(lambda x: scatter(adjacency, x), [x_src])
    assert_gradients_match_numerical(lambda xs, xd: tf.concat(
        [tf.reshape(t, [adjacency.num_edges, -1]) for t in scatter(adjacency, xs, xd)], axis=1), [x_src, x_dst])


def test_scatter_gradient_is_a_sum_by_endpoint():
    adjacency = make_adjacency("random", np.random.default_rng(9), np.int64)
    rng = np.random.default_rng(10)
    x_src, x_dst = rng.normal(size=(adjacency.num_src, 3)), rng.normal(size=(adjacency.num_dst, 3))
    up_src, up_dst = rng.normal(size=(2, adjacency.num_edges, 3))
    xs, xd = tf.constant(x_src), tf.constant(x_dst)
    with tf.GradientTape() as tape:
        tape.watch([xs, xd])
        rows_src, rows_dst = scatter(adjacency, xs, xd)
        loss = tf.reduce_sum(rows_src * up_src) + tf.reduce_sum(rows_dst * up_dst)
    d_src, d_dst = tape.gradient(loss, [xs, xd])
    expected_src = np.zeros_like(x_src)
    np.add.at(expected_src, adjacency.csc_src, up_src)
    np.testing.assert_allclose(d_src.numpy(), expected_src, rtol=1e-12)
    np.testing.assert_allclose(d_dst.numpy(), oracle_reduce(up_dst, adjacency, "sum"), rtol=1e-12)


# ---- the raw max/min gradient ops take the argedge their forward op made ----


@pytest.mark.parametrize("width_shape", [(), (1,), (2,), (2, 3)])
def test_raw_extreme_gradients_accept_the_forward_argedge(width_shape):
    """argedge is shaped like the output ([num_dst, F...]); the gradient kernels must accept it."""
    adjacency = small_graph()
    t = adjacency.tensors()
    values = tf.constant(distinct_edge_values(adjacency, int(np.prod(width_shape))).reshape(
        (adjacency.num_edges,) + width_shape))
    empty = tf.zeros([0], t.csc_indptr.dtype)
    out, argedge = lib().ngra_gather(values, t.csc_indptr, empty, tf.zeros([0], values.dtype), reduce="max")
    assert argedge.shape == out.shape
    d_values = lib().ngra_gather_grad_arg(tf.ones_like(out), argedge, t.csc_indptr, empty)
    assert np.sum(d_values.numpy()) == np.sum(adjacency.in_degree() > 0) * np.prod(width_shape, dtype=int)
    if len(width_shape) <= 1:
        x = tf.reshape(values[:adjacency.num_src], [adjacency.num_src, -1])
        fused, fused_arg = lib().ngra_fused_gather(x, tf.zeros([0], tf.float64), tf.zeros([0], tf.float64),
                                                   tf.zeros([0], tf.int32), *t, tf.zeros([0], tf.float64),
                                                   tf.zeros([0], tf.int8), program="copy_src", reduce="min")
        d_x = lib().ngra_fused_gather_grad(tf.ones_like(fused), fused_arg, x, tf.zeros([0], tf.float64),
                                           tf.zeros([0], tf.float64), tf.zeros([0], tf.int32), *t,
                                           tf.zeros([0], tf.int8), program="copy_src", reduce="min", wrt="x_src")
        assert np.sum(d_x.numpy()) == np.sum(adjacency.in_degree() > 0) * x.shape[1]


# ---- max/min ties: the first edge in stored order takes the whole gradient ----


def tied_graph():
    """Destination 0 reads sources 1, 2, 3, 3 (a multi-edge) in that stored order
    (given as 3, 2, 3, 1: edge_order is [3, 1, 0, 2, 5, 4]).

    Feature 0 is 5 everywhere (a 4-way tie); feature 1 is 1, 3, 3, 3, so max
    ties between edges 1-3 and min has a single winner, edge 0. Destination 1
    reads sources 0 and 2 with equal feature 0.
    """
    graph = ngra_tf.Graph.from_edges([3, 2, 3, 1, 2, 0], [0, 0, 0, 0, 1, 1], num_vertices=4)
    x = np.array([[5.0, 0.0], [5.0, 1.0], [5.0, 3.0], [5.0, 3.0]])
    return graph, x


def first_winners(messages, adjacency, reduce):
    """[num_dst, F] edge id (stored position) of the first message in stored order attaining the extreme."""
    extreme = oracle_reduce(messages, adjacency, reduce)
    winners = np.full(extreme.shape, -1)
    for v in range(adjacency.num_dst):
        for e in range(adjacency.csc_indptr[v + 1] - 1, adjacency.csc_indptr[v] - 1, -1):
            winners[v] = np.where(messages[e] == extreme[v], e, winners[v])
    return winners


@pytest.mark.parametrize("kind", BLOCKED_KINDS)
def test_ties_in_cache_blocked_walks_go_to_the_first_stored_edge(kind):
    """All messages equal: every non-empty segment's winner is its first stored position."""
    adjacency = blocked_adjacency(kind)
    t = adjacency.tensors()
    x = np.full((adjacency.num_src, BLOCKED_WIDTH), 0.5)
    empty = tf.zeros([0], tf.float64)
    for reduce in ("max", "min"):
        _, argedge = lib().ngra_fused_gather(x, empty, empty, tf.zeros([0], tf.int32), *t, empty,
                                             tf.zeros([0], tf.int8), program="copy_src", reduce=reduce)
        first = np.where(adjacency.in_degree() > 0, adjacency.csc_indptr[:-1], -1)
        np.testing.assert_array_equal(argedge.numpy(), np.repeat(first[:, None], BLOCKED_WIDTH, axis=1))
    upstream = np.random.default_rng(19).normal(size=(adjacency.num_dst, BLOCKED_WIDTH))
    (d_x,) = tape_gradients(lambda v: fused_gather(adjacency, v, reduce="max"), [x], upstream)
    expected = np.zeros_like(x)
    has_edges = adjacency.in_degree() > 0
    np.add.at(expected, adjacency.csc_src[adjacency.csc_indptr[:-1][has_edges]], upstream[has_edges])
    np.testing.assert_allclose(d_x, expected, rtol=1e-12)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_ties_send_gradient_to_first_edge(reduce):
    graph, x = tied_graph()
    adjacency = graph.adjacency
    np.testing.assert_array_equal(adjacency.src, [1, 2, 3, 3, 0, 2])
    np.testing.assert_array_equal(graph.edge_order, [3, 1, 0, 2, 5, 4])
    upstream = np.array([[1.0, 10.0], [100.0, 1000.0], [0, 0], [0, 0]])
    winners = first_winners(x[adjacency.src], adjacency, reduce)
    messages = x[graph.src]  # edge tensors of a Graph are in the user's order
    expected_edges = np.zeros_like(messages)
    for v, f in np.ndindex(*winners.shape):
        if winners[v, f] >= 0:
            expected_edges[graph.edge_order[winners[v, f]], f] = upstream[v, f]

    # gather: the winner's edge row.
    (d_values,) = tape_gradients(lambda v: gather(graph, v, reduce), [messages], upstream)
    np.testing.assert_array_equal(d_values, expected_edges)
    # fused copy_src: the winner's source row (once, even for a multi-edge).
    expected_src = np.zeros_like(x)
    np.add.at(expected_src, graph.src, expected_edges)
    (d_x,) = tape_gradients(lambda v: fused_gather(graph, v, reduce=reduce), [x], upstream)
    np.testing.assert_array_equal(d_x, expected_src)
    # src_mul_edge with unit weights ties the same way; the weight gradient is one-hot too.
    ones = np.ones(graph.num_edges)
    d_x, d_w = tape_gradients(lambda v, w: fused_gather(graph, v, edge_data=w, program="src_mul_edge",
                                                        reduce=reduce), [x, ones], upstream)
    np.testing.assert_array_equal(d_x, expected_src)
    np.testing.assert_array_equal(d_w, np.sum(expected_edges * messages, axis=1))
    if reduce == "max":  # spelled out for the documented case: 1 -> 0 (given fourth) wins the 4-way tie
        np.testing.assert_array_equal(d_values, [[0, 0], [0, 10], [0, 0], [1, 0], [0, 1000], [100, 0]])


def test_ties_per_head_weight_gradient():
    """Per-head weights: each element's gradient reaches only its winning edge's head weight."""
    graph, x = tied_graph()
    x2 = np.stack([x, x], axis=1)  # features [2 heads, 2]
    heads = np.ones((graph.num_edges, 2))
    upstream = np.ones((graph.num_vertices, 2, 2))
    d_x, d_w = tape_gradients(lambda v, w: fused_gather(graph, v, edge_data=w, program="src_mul_edge",
                                                        reduce="max"), [x2, heads], upstream)
    adjacency = graph.adjacency
    winners = first_winners(x[adjacency.src], adjacency, "max")  # [V, 2], the same for both heads
    expected = np.zeros(graph.num_edges)  # in the user's order, like the weights
    for v, f in np.ndindex(*winners.shape):
        if winners[v, f] >= 0:
            expected[graph.edge_order[winners[v, f]]] += x[adjacency.src[winners[v, f]], f]
    np.testing.assert_array_equal(d_w, np.stack([expected, expected], axis=1))


# ---- tf.function, reduced precision ----


@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_gradients_in_tf_function(program):
    adjacency = make_adjacency("random", np.random.default_rng(11), np.int64)
    results = {}
    for reduce in ("mean", "max"):
        inputs = separated_inputs(program, reduce, adjacency, seed=12, gap=1e-9, features=(3,))
        args, kwargs = float_args(program, *inputs)
        upstream = np.random.default_rng(13).normal(size=(adjacency.num_dst, 3))

        def grads(*a):
            with tf.GradientTape() as tape:
                tape.watch(a)
                out = fused_gather(adjacency, program=program, reduce=reduce, **kwargs(*a))
                loss = tf.reduce_sum(out * upstream)
            return tape.gradient(loss, a)

        tensors = [tf.constant(a) for a in args]
        eager = grads(*tensors)
        traced = tf.function(grads)(*tensors)
        for e, t in zip(eager, traced):
            assert t is not None
            np.testing.assert_array_equal(e.numpy(), t.numpy())
        results[reduce] = eager
    assert results["mean"][0].shape == args[0].shape


@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_tf_function_with_unknown_rows(program):
    """Traced once for any number of rows: forward and gradients match eager mode."""
    adjacency = make_adjacency("random", np.random.default_rng(21))
    inputs = separated_inputs(program, "max", adjacency, seed=22, gap=1e-9, features=(3,))
    args, kwargs = float_args(program, *inputs)
    specs = [tf.TensorSpec([None] + list(a.shape[1:]), tf.float64) for a in args]

    def run(*a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            out = fused_gather(adjacency, program=program, reduce="max", **kwargs(*a))
            loss = tf.reduce_sum(out * out)
        return [out] + tape.gradient(loss, list(a))

    tensors = [tf.constant(a) for a in args]
    for eager, traced in zip(run(*tensors), tf.function(run, input_signature=specs)(*tensors)):
        np.testing.assert_array_equal(eager.numpy(), traced.numpy())


def test_gather_scatter_gradients_in_tf_function():
    adjacency = make_adjacency("chunk", np.random.default_rng(14))
    x = tf.constant(np.random.default_rng(15).normal(size=(adjacency.num_src, 4)))

    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(gather(adjacency, scatter(adjacency, x), "max") ** 2)
        return tape.gradient(loss, x)

    np.testing.assert_array_equal(grad(x).numpy(), tf.function(grad)(x).numpy())


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_reduced_precision_gradient(dtype):
    adjacency = make_adjacency("random", np.random.default_rng(16))
    x_src, x_dst, _ = program_inputs("gate_tanh", adjacency, np.random.default_rng(17), np.float32)
    upstream = np.ones((adjacency.num_dst, 3), np.float32)

    def f(dt):
        return lambda xs, xd: tf.cast(fused_gather(adjacency, tf.cast(xs, dt), tf.cast(xd, dt),
                                                   program="gate_tanh", reduce="sum"), tf.float32)

    low = tape_gradients(f(dtype), [x_src, x_dst], upstream)
    high = tape_gradients(f(tf.float32), [x_src, x_dst], upstream)
    for lo, hi in zip(low, high):
        np.testing.assert_allclose(lo, hi, rtol=0.1, atol=0.1)
