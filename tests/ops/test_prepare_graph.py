"""NgraPrepareGraph: an adjacency checked once, its plan carried to the fused ops.

A fused op given the plan of its index arrays checks only their shapes; on a
GPU the plan also holds the walks' schedules (the CUDA harness compares both
paths bit for bit there, and tools/bench_cuda.py times them). On the CPU the
plan is the graph's sizes under a tag, and any plan that does not fit the
arrays is ignored: the op checks them as without one.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf import recipes
from ngra_tf.ops import propagation
from ngra_tf.runtime import chunks as chunks_module
from ngra_tf.runtime import residency
from ngra_tf.store import write_store
from ngra_tf.store.reader import StoreReader
from ngra_testlib import lib
from test_bad_input import GRAPH, call_fused, fused_inputs

ARRAYS = ("csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge")


def prepare(index_dtype=np.int32, **overrides):
    a = GRAPH.adjacency
    arrays = {name: overrides.get(name, getattr(a, name)) for name in ARRAYS}
    return lib().ngra_prepare_graph(*(tf.constant(np.asarray(arrays[name], index_dtype)) for name in ARRAYS))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_the_cpu_plan_is_the_graphs_sizes(index_dtype):
    plan = prepare(index_dtype).numpy()
    assert plan.dtype == np.int8 and plan.shape == (32,)
    assert plan[:8].tobytes() == b"ngracpu1"
    assert list(plan[8:].view(np.int64)) == [GRAPH.adjacency.num_src, GRAPH.adjacency.num_dst, GRAPH.num_edges]


BAD_GRAPHS = [
    ("csc_src out of range", {"csc_src": [0, 1, 1, 4, 2]}),
    ("csc_indptr decreasing", {"csc_indptr": [0, 2, 1, 4, 5]}),
    ("csc_indptr start", {"csc_indptr": [1, 1, 3, 5, 5]}),
    ("csr_edge repeated", {"csr_edge": [0, 1, 1, 3, 4]}),
    ("csr_dst out of range", {"csr_dst": [1, 2, 7, 0, 2]}),
    ("csr_dst count", {"csr_dst": [1, 2, 2, 0]}),
]


@pytest.mark.parametrize("what,overrides", BAD_GRAPHS, ids=[case[0] for case in BAD_GRAPHS])
def test_a_bad_graph_gets_the_fused_ops_message(what, overrides):
    """The checks a fused op would make of these arrays (its d/dx_src walk reads the CSR ones), made once."""
    with pytest.raises(tf.errors.InvalidArgumentError) as fused:
        ngra_tf.ops.library().ngra_fused_gather_grad(
            np.ones((4, 2), np.float32), np.zeros(0, np.int32),
            **{k: v for k, v in _fused_inputs(overrides).items() if k != "init"},
            program="src_add_dst", reduce="sum", wrt="x_src")
    with pytest.raises(tf.errors.InvalidArgumentError) as prepared:
        prepare(**overrides)
    assert _text(prepared.value) == _text(fused.value), what


def _text(error):
    """The kernel's message, without eager mode's op and function names around it."""
    return error.message.split("}} ", 1)[-1].split(" [Op:", 1)[0]


def _fused_inputs(overrides):
    return fused_inputs("src_add_dst", **overrides)


def test_the_source_count_is_csr_indptrs():
    """Without x_src, the graph's sources are csr_indptr's segments: a short csr_indptr shows as csc_src ids
    past them (a fused op, which knows x_src's rows, names csr_indptr's length instead)."""
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"csc_src\[0\] = 2 is out of range \[0, 2\)"):
        prepare(csr_indptr=[0, 1, 5])


def test_a_non_vector_indptr_is_named():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"csr_indptr must be a non-empty vector, got shape \[\]"):
        lib().ngra_prepare_graph(*(tf.constant(np.asarray(getattr(GRAPH.adjacency, n), np.int32)) if n != "csr_indptr"
                                   else tf.constant(0) for n in ARRAYS))


PROGRAMS_TRIED = ("copy_src", "src_add_dst", "gate_tanh", "src_mul_edge")


def _results(program, plan):
    """Forward and d/dx_src of a raw fused op over GRAPH, given `plan`."""
    out, _ = call_fused(program, plan=plan)
    inputs = {k: v for k, v in fused_inputs(program, plan=plan).items() if k != "init"}
    d_x = ngra_tf.ops.library().ngra_fused_gather_grad(np.ones((4, 2), np.float32), np.zeros(0, np.int32), **inputs,
                                                       program=program, reduce="sum", wrt="x_src")
    return out.numpy(), d_x.numpy()


@pytest.mark.parametrize("program", PROGRAMS_TRIED)
def test_a_plan_changes_no_result(program):
    """With the plan of its arrays, with none, or with bytes that are no plan: the same results."""
    want = _results(program, np.zeros(0, np.int8))
    for plan in (prepare().numpy(), np.arange(-40, 40, dtype=np.int8), np.zeros(32, np.int8)):
        for got, expected in zip(_results(program, plan), want):
            np.testing.assert_array_equal(got, expected)


def test_a_plan_that_does_not_fit_leaves_every_check_on():
    """Another graph's plan, or bytes that are none, do not let bad arrays through."""
    other = ngra_tf.Graph.from_edges([0, 1], [1, 0], 2).adjacency
    other_plan = lib().ngra_prepare_graph(*other.tensors())
    for plan in (other_plan.numpy(), np.arange(32, dtype=np.int8)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"csc_src\[3\] = 4 is out of range \[0, 4\)"):
            call_fused("copy_src", csc_src=[0, 1, 1, 4, 2], plan=plan)


def test_an_adjacency_is_prepared_once():
    adjacency = ngra_tf.Graph.from_edges([0, 1, 2], [1, 2, 0], 3).adjacency
    first = propagation.graph_plan(adjacency)
    assert first.dtype == tf.int8 and first.shape == (32,) and adjacency._plan is first
    assert propagation.graph_plan(adjacency) is first


def test_packed_and_copied_chunks_carry_their_plans(tmp_path):
    graph = ngra_tf.Graph.from_edges(np.arange(30) % 7, (np.arange(30) * 3) % 7, 7)
    packed = chunks_module.PackedChunks(graph.partition(2))
    plan = packed.chunk(tf.constant(3)).adjacency.plan(None)
    chunk = graph.partition(2).chunk(1, 1).adjacency
    np.testing.assert_array_equal(plan, lib().ngra_prepare_graph(*chunk.tensors()))
    store = write_store(tmp_path / "store", graph, 2, {"features": np.ones((7, 2), np.float32)})
    reader = StoreReader(store, ["features"])
    copied = residency.CopiedChunks(reader, "/cpu:0", copy=True).chunk(tf.constant(1))
    assert copied.adjacency.plan(None).shape == (32,)


def test_a_stores_chunks_come_with_the_plan_of_their_arrays(tmp_path):
    """Opening a store checks its chunks as NgraPrepareGraph does, so their reads carry the plan it would make of
    them (NgraVouchedPlan, from the manifest's sizes), empty chunks included."""
    graph = ngra_tf.Graph.from_edges([0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 0, 4, 5, 3, 2, 1], 12)
    store = write_store(tmp_path / "store", graph, 3, {"features": np.ones((12, 2), np.float32)})
    reader = StoreReader(store, ["features"])
    for k in range(9):
        adjacency = reader.chunk(tf.constant(k)).adjacency
        np.testing.assert_array_equal(adjacency.plan(None), lib().ngra_prepare_graph(*adjacency.tensors()))
    assert 0 in store.edge_counts


def test_a_vouched_plan_refuses_negative_or_non_scalar_sizes():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"num_edges must be >= 0, got -1"):
        lib().ngra_vouched_plan(tf.constant(2, tf.int64), tf.constant(2, tf.int64), tf.constant(-1, tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"num_src must be a scalar"):
        lib().ngra_vouched_plan(tf.constant([2], tf.int64), tf.constant(2, tf.int64), tf.constant(1, tf.int64))


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_training_with_plans_equals_training_without(monkeypatch, model):
    """Packed chunks prepared (their plans fed to every fused op and its gradients) or not: the same
    training, bit for bit; P = 3, the fused ops (GCN) and edge code (GAT)."""
    rng = np.random.default_rng(0)
    graph = recipes.prepare_graph(model, ngra_tf.Graph.from_edges(rng.integers(0, 60, 400), rng.integers(0, 60, 400),
                                                                  60))
    features = rng.normal(size=(60, 6)).astype(np.float32)
    labels, mask = rng.integers(0, 3, 60), rng.random(60) < 0.6
    results = []
    for prepared in (True, False):
        if not prepared:
            for module in (propagation, chunks_module, residency):
                monkeypatch.setattr(module, "prepare_graph", lambda tensors: None)
        keras.utils.set_random_seed(1)
        built = recipes.build_model(model, graph, 3, hidden=5, num_features=6, chunks=3)
        built.compile(optimizer=keras.optimizers.Adam(0.05), loss=ngra_tf.masked_loss())
        history = built.fit(features, labels, sample_weight=mask, epochs=2, verbose=0).history
        results.append((history["loss"], built.get_weights()))
    (loss_plan, weights_plan), (loss, weights) = results
    np.testing.assert_array_equal(loss_plan, loss)
    for got, want in zip(weights_plan, weights):
        np.testing.assert_array_equal(got, want)
