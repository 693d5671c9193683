"""gather / fused_gather from an initial accumulator (init): forward results
against the numpy oracle, winners, gradients (including d/d init) against
finite differences and the pure-TF reference, and the in-place reduction."""

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import fused_gather, gather
from ngra_testlib import (assert_gradients_match_numerical, dst_of, float_args, lib, make_adjacency,
                          oracle_fused_gather, oracle_messages, oracle_reduce, program_inputs, reference_fused_gather,
                          separated_inputs, tape_gradients)

INIT_REDUCES = ("sum", "max", "min")
PROGRAMS = ("copy_src", "src_mul_edge", "gate_sigmoid", "type_select")


def init_for(messages, adjacency, reduce, seed, gap=0.3):
    """A random init for `messages` [E, ...]; for max/min, per element either `gap` beyond the
    extreme message (init wins) or `gap` short of it (an edge wins): finite differences see no ties."""
    rng = np.random.default_rng(seed)
    shape = (adjacency.num_dst,) + messages.shape[1:]
    init = rng.uniform(-2, 2, shape)
    if reduce in ("max", "min"):
        extreme = oracle_reduce(messages, adjacency, reduce)
        sign = 1 if reduce == "max" else -1
        wins = rng.random(shape) < 0.5
        has_edges = (adjacency.in_degree() > 0).reshape((-1,) + (1,) * (len(shape) - 1))
        init = np.where(has_edges, extreme + sign * np.where(wins, gap, -gap), init)
    return init.astype(messages.dtype)


# ---- forward ----


@pytest.mark.parametrize("kind,index_dtype", [("random", np.int32), ("chunk", np.int64), ("no_edges", np.int32)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduce", INIT_REDUCES)
@pytest.mark.parametrize("program", PROGRAMS + ("src_add_dst",))
def test_fused_gather_from_init_matches_oracle(program, reduce, dtype, kind, index_dtype):
    rng = np.random.default_rng(1)
    adjacency = make_adjacency(kind, rng, index_dtype)
    inputs = program_inputs(program, adjacency, rng, dtype, features=(2, 3))
    init = rng.uniform(-2, 2, (adjacency.num_dst, 2, 3)).astype(dtype)
    out = fused_gather(adjacency, *inputs, program=program, reduce=reduce, init=init).numpy()
    want = oracle_fused_gather(program, reduce, adjacency, *inputs, init=init)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    empty = adjacency.in_degree() == 0
    np.testing.assert_array_equal(out[empty], init[empty])  # a vertex without in-edges keeps init's row


@pytest.mark.parametrize("reduce", INIT_REDUCES)
def test_gather_from_init_in_user_edge_order(reduce):
    """A Graph's edge rows are in the user's order; init is per vertex and needs no reordering."""
    rng = np.random.default_rng(2)
    graph = ngra_tf.Graph.from_edges([2, 0, 1, 2, 0], [0, 2, 0, 1, 2], num_vertices=4)
    values = rng.normal(size=(5, 3))
    init = rng.normal(size=(4, 3))
    expected = init.copy()
    combine = {"sum": np.add, "max": np.maximum, "min": np.minimum}[reduce]
    for e, v in enumerate(graph.dst):
        expected[v] = combine(expected[v], values[e])
    np.testing.assert_allclose(gather(graph, values, reduce, init=init).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_init_wins_ties_and_empty_segments(reduce):
    """argedge is -1 exactly where no edge beat init: init's value ties or wins, or the segment is empty."""
    adjacency = make_adjacency("random", np.random.default_rng(3))
    rng = np.random.default_rng(4)
    values = rng.integers(-2, 3, (adjacency.num_edges, 4)).astype(np.float64)  # many ties
    init = rng.integers(-2, 3, (adjacency.num_dst, 4)).astype(np.float64)
    t = adjacency.tensors()
    out, argedge = lib().ngra_gather(values, t.csc_indptr, tf.zeros([0], t.csc_indptr.dtype), init, reduce=reduce)
    out, argedge = out.numpy(), argedge.numpy()
    extreme = oracle_reduce(values, adjacency, reduce)
    has_edges = (adjacency.in_degree() > 0)[:, None]
    beaten = has_edges & ((extreme > init) if reduce == "max" else (extreme < init))
    np.testing.assert_array_equal(out, np.where(beaten, extreme, init))
    np.testing.assert_array_equal(argedge < 0, ~beaten)
    rows, cols = np.nonzero(beaten)
    np.testing.assert_array_equal(values[argedge[rows, cols], cols], extreme[rows, cols])


def test_nan_in_init_sticks():
    adjacency = make_adjacency("random", np.random.default_rng(5))
    values = np.random.default_rng(6).normal(size=(adjacency.num_edges, 2))
    init = np.zeros((adjacency.num_dst, 2))
    init[:, 0] = np.nan
    for reduce in INIT_REDUCES:
        out = gather(adjacency, values, reduce, init=init).numpy()
        assert np.all(np.isnan(out[:, 0])) and not np.any(np.isnan(out[:, 1])), reduce


def test_chained_init_equals_one_reduction():
    """A = op(C0); A = op(C1, init=A): the column reduction of a 2-D partition, as the compiler runs it."""
    rng = np.random.default_rng(7)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, 30, 200), rng.integers(0, 30, 200), num_vertices=30)
    partition = graph.partition(3)
    x = rng.normal(size=(graph.num_vertices, 4)) - 5.0  # all messages negative
    blocks = partition.split(x)
    for reduce in INIT_REDUCES:
        want = partition.split(fused_gather(graph, x, reduce=reduce).numpy())
        for j in range(3):
            degree = sum(partition.chunk(i, j).adjacency.in_degree() for i in range(3))
            start = {"sum": 0.0, "max": -np.inf, "min": np.inf}[reduce]
            acc = np.where(degree[:, None] > 0, start, 0.0) * np.ones((len(degree), 4))
            for i in range(3):
                acc = fused_gather(partition.chunk(i, j), blocks[i], reduce=reduce, init=acc)
            np.testing.assert_allclose(acc.numpy(), want[j], rtol=1e-12, err_msg=f"{reduce} column {j}")


# ---- gradients ----


@pytest.mark.parametrize("reduce", INIT_REDUCES)
@pytest.mark.parametrize("program", PROGRAMS)
def test_fused_gather_init_gradients(program, reduce):
    """Every float input, init included: finite differences, and tape gradients equal the reference's."""
    adjacency = make_adjacency("random", np.random.default_rng(8))
    inputs = separated_inputs(program, reduce, adjacency, seed=9, features=(2,))
    init = init_for(oracle_messages(program, adjacency, *inputs), adjacency, reduce, seed=10)
    args, kwargs = float_args(program, *inputs)

    def kernel(*a):
        return fused_gather(adjacency, program=program, reduce=reduce, init=a[-1], **kwargs(*a[:-1]))

    def reference(*a):
        k = kwargs(*a[:-1])
        return reference_fused_gather(program, reduce, adjacency, k["x_src"], k.get("x_dst"), k.get("edge_data"),
                                      init=a[-1])

    assert_gradients_match_numerical(kernel, args + [init])
    upstream = np.random.default_rng(11).normal(size=init.shape)
    for got, want in zip(tape_gradients(kernel, args + [init], upstream),
                         tape_gradients(reference, args + [init], upstream)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", INIT_REDUCES)
def test_gather_init_gradients(reduce):
    adjacency = make_adjacency("chunk", np.random.default_rng(12), np.int64)
    values = np.random.default_rng(13).permutation(adjacency.num_edges * 2).reshape(-1, 2) * 0.1 - 1.0
    init = init_for(values, adjacency, reduce, seed=14)  # an Adjacency's edge rows are its CSC positions

    def kernel(v, i):
        return gather(adjacency, v, reduce, init=i)

    def reference(v, i):
        return ngra_tf.ops.reference.gather(v, dst_of(adjacency), adjacency.num_dst, reduce, i)

    assert_gradients_match_numerical(kernel, [values, init])
    upstream = np.random.default_rng(15).normal(size=init.shape)
    for got, want in zip(tape_gradients(kernel, [values, init], upstream),
                         tape_gradients(reference, [values, init], upstream)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_init_gradient_goes_where_init_won():
    """max: d/d init is the upstream gradient where init won, 0 where an edge did; the edges get the rest."""
    adjacency = make_adjacency("random", np.random.default_rng(16))
    x = np.random.default_rng(17).normal(size=(adjacency.num_src, 3))
    init = init_for(x[adjacency.csc_src], adjacency, "max", seed=18)
    upstream = np.random.default_rng(19).normal(size=init.shape)
    d_x, d_init = tape_gradients(lambda a, i: fused_gather(adjacency, a, reduce="max", init=i), [x, init], upstream)
    extreme = oracle_fused_gather("copy_src", "max", adjacency, x)
    init_won = (init >= extreme) | (adjacency.in_degree() == 0)[:, None]
    assert init_won.any() and not init_won.all()
    np.testing.assert_array_equal(d_init, np.where(init_won, upstream, 0))
    np.testing.assert_allclose(d_x.sum() + d_init.sum(), upstream.sum(), rtol=1e-12)


def test_init_gradient_with_unknown_shape():
    """Traced for an init of unknown rows: an empty one (no init) gets an empty gradient, a full one grad."""
    adjacency = make_adjacency("random", np.random.default_rng(24))
    t = adjacency.tensors()
    no_ids = tf.zeros([0], t.csc_indptr.dtype)
    values = tf.constant(np.random.default_rng(25).normal(size=(adjacency.num_edges, 2)))

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float64)])
    def d_init(init):
        with tf.GradientTape() as tape:
            tape.watch(init)
            out, _ = lib().ngra_gather(values, t.csc_indptr, no_ids, init, reduce="sum")
            loss = tf.reduce_sum(out * 3.0)
        return tape.gradient(loss, init)

    assert d_init(tf.zeros([0, 2], tf.float64)).shape == (0, 2)
    np.testing.assert_array_equal(d_init(tf.ones([adjacency.num_dst, 2], tf.float64)).numpy(), 3.0)


# ---- in place ----


def _allocations(fetch, feeds, graph):
    """{node name: its first output's buffer address} from a FULL_TRACE run of a TF1 session."""
    with tf.compat.v1.Session(graph=graph) as session:
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        metadata = tf.compat.v1.RunMetadata()
        result = session.run(fetch, feeds, options=options, run_metadata=metadata)
    pointers = {}
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            for output in node.output:
                if output.slot == 0:
                    pointers[node.node_name] = output.tensor_description.allocation_description.ptr
    return result, pointers


@pytest.mark.parametrize("op", ["gather", "fused_gather"])
def test_output_takes_over_init_buffer(op):
    """When nothing else holds init, the kernel reduces into its buffer: no new [rows, F] output."""
    adjacency = make_adjacency("random", np.random.default_rng(22))
    rng = np.random.default_rng(23)
    x = rng.normal(size=(adjacency.num_src, 8))
    values = rng.normal(size=(adjacency.num_edges, 8))
    start = rng.normal(size=(adjacency.num_dst, 8))
    graph = tf.Graph()
    with graph.as_default():
        start_in = tf.compat.v1.placeholder(tf.float64, start.shape)
        init = tf.math.sin(start_in, name="init")  # a fresh buffer that only the gather reads
        index = [tf.constant(a) for a in (adjacency.csc_indptr, adjacency.csc_src, adjacency.csr_indptr,
                                          adjacency.csr_dst, adjacency.csr_edge)]
        if op == "gather":
            out, _ = lib().ngra_gather(values, index[0], tf.zeros([0], index[0].dtype), init, reduce="sum",
                                       name="reduce")
        else:
            empty = tf.zeros([0], tf.float64)
            out, _ = lib().ngra_fused_gather(x, empty, empty, tf.zeros([0], tf.int32), *index, init,
                                             tf.zeros([0], tf.int8), program="copy_src", reduce="sum", name="reduce")
    result, pointers = _allocations(out, {start_in: start}, graph)
    messages = x[adjacency.csc_src] if op == "fused_gather" else values
    np.testing.assert_allclose(result, oracle_reduce(messages, adjacency, "sum", np.sin(start)), rtol=1e-12)
    assert pointers.get("init") and pointers.get("reduce") == pointers["init"], pointers
