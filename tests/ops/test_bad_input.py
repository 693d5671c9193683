"""Malformed inputs give an error that names the argument: InvalidArgumentError
from a raw op (the kernel's validation), ValueError from the Python API.
Empty graphs and isolated vertices are normal and must not error."""

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import PROGRAMS, fused_gather, gather, scatter
from ngra_testlib import NUM_TYPES, lib

# 4 vertices (3 is isolated), 5 edges in stored order:
# 2->0 | 0->1 | 1->2, 1->2, 2->2     csc_indptr [0, 1, 2, 5, 5], csc_src [2, 0, 1, 1, 2]
GRAPH = ngra_tf.Graph.from_edges([0, 1, 1, 2, 2], [1, 2, 2, 0, 2], num_vertices=4)
V, E, F = 4, 5, 2


def fused_inputs(program, index_dtype=np.int32, **overrides):
    """Valid raw NgraFusedGather inputs for `program`, with some replaced."""
    spec = PROGRAMS.get(program, PROGRAMS["copy_src"])  # (an unknown program: any inputs)
    slots = {0: (), 2: (2,), None: (NUM_TYPES,)}[spec.src_slots]
    a = GRAPH.adjacency
    inputs = {
        "x_src": np.ones((V,) + slots + (F,), np.float32),
        "x_dst": np.ones((V, F) if spec.uses_dst else (0,), np.float32),
        "edge_weight": np.ones((E,) if spec.uses_weight else (0,), np.float32),
        "edge_type": np.zeros(E if spec.uses_type else 0, np.int32),
        "csc_indptr": a.csc_indptr, "csc_src": a.csc_src, "csr_indptr": a.csr_indptr,
        "csr_dst": a.csr_dst, "csr_edge": a.csr_edge, "init": np.zeros(0, np.float32),
        "plan": np.zeros(0, np.int8),
    }
    inputs.update(overrides)
    index_names = ("csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge")
    return {k: tf.constant(np.asarray(v, index_dtype) if k in index_names else v) for k, v in inputs.items()}


def call_fused(program="src_add_dst", reduce="sum", **overrides):
    return lib().ngra_fused_gather(**fused_inputs(program, **overrides), program=program, reduce=reduce)


def call_fused_grad(program="src_add_dst", reduce="sum", wrt="x_src", grad=None, argedge=None, **overrides):
    inputs = fused_inputs(program, **overrides)
    shape = (V, F)
    grad = np.ones(shape, np.float32) if grad is None else grad
    if argedge is None:
        argedge = np.zeros(shape if reduce in ("max", "min") else (0,), np.int32)
    inputs.pop("init")
    return lib().ngra_fused_gather_grad(grad, argedge, **inputs, program=program, reduce=reduce, wrt=wrt)


def indices(values):
    return tf.constant(np.asarray(values, np.int32))


def call_gather(values=None, indptr=GRAPH.adjacency.csc_indptr, edge_ids=(), reduce="sum", init=None):
    values = np.ones((E, F), np.float32) if values is None else values
    init = np.zeros(0, np.asarray(values).dtype) if init is None else init
    return lib().ngra_gather(values, indices(indptr), indices(edge_ids), init, reduce=reduce)


def call_scatter(x=None, indptr=GRAPH.adjacency.csr_indptr, edge_ids=GRAPH.adjacency.csr_edge):
    x = np.ones((V, F), np.float32) if x is None else x
    return lib().ngra_scatter(x, indices(indptr), indices(edge_ids))


# One value per element, as a max/min gather of 1-D values yields.
ARGEDGE = [0, 1, 2, -1]


def call_gather_grad_arg(grad=None, argedge=ARGEDGE, indptr=GRAPH.adjacency.csc_indptr, edge_ids=()):
    grad = np.ones(V, np.float32) if grad is None else grad
    return lib().ngra_gather_grad_arg(grad, indices(argedge), indices(indptr), indices(edge_ids))


def test_baselines_are_valid():
    """The unmodified inputs of the cases below run, so each case's error is its own."""
    for program in PROGRAMS:
        call_fused(program)
        call_fused_grad(program)
    call_fused_grad("src_mul_edge", wrt="edge_weight")
    call_gather()
    call_gather(edge_ids=np.arange(E))
    for reduce in ("sum", "max", "min"):
        call_fused(reduce=reduce, init=np.ones((V, F), np.float32))
        call_gather(reduce=reduce, init=np.ones((V, F), np.float32))
    call_fused(reduce="mean", init=np.ones((0, F), np.float32))  # empty: no init, so mean is fine
    call_scatter()
    call_gather_grad_arg()


CSC_INDPTR = GRAPH.adjacency.csc_indptr
CSR_INDPTR = GRAPH.adjacency.csr_indptr

RAW_CASES = [
    # --- NgraFusedGather: indices ---
    ("csc_src", lambda: call_fused(csc_src=[2, 0, 1, 1, 4])),
    ("csc_src", lambda: call_fused(csc_src=[2, 0, -1, 1, 2])),
    ("csc_src", lambda: call_fused(csc_src=[2, 0, 1])),
    ("csc_indptr", lambda: call_fused(csc_indptr=[0, 2, 1, 5, 5])),
    ("csc_indptr", lambda: call_fused(csc_indptr=[1, 1, 2, 5, 5])),
    ("csc_indptr", lambda: call_fused(csc_indptr=np.zeros(0))),
    ("csc_indptr", lambda: call_fused(csc_indptr=[CSC_INDPTR])),
    ("csr_indptr", lambda: call_fused(csr_indptr=np.append(CSR_INDPTR, 5))),
    ("csr_indptr", lambda: call_fused(csr_indptr=CSR_INDPTR[:-1])),
    ("csr_indptr", lambda: call_fused(csr_indptr=[0, 3, 1, 5, 5])),
    ("csr_indptr", lambda: call_fused(csr_indptr=[1, 1, 3, 5, 5])),
    ("csr_dst", lambda: call_fused(csr_dst=[1, 2, 2])),
    ("csr_edge", lambda: call_fused(csr_edge=[1, 2, 3, 0, 4, 4])),
    ("init", lambda: call_fused(init=np.ones((V, F + 1), np.float32))),
    ("init", lambda: call_fused(init=np.ones((V - 1, F), np.float32))),
    ("init", lambda: call_fused(init=np.ones(V * F, np.float32))),
    ("init", lambda: call_fused("copy_src", "mean", init=np.ones((V, F), np.float32))),
    # --- NgraFusedGather: operands ---
    ("x_src", lambda: call_fused("copy_src", x_src=np.ones((V, 1, F), np.float32))),
    ("x_src", lambda: call_fused("copy_src", x_src=np.ones(V, np.float32))),
    ("x_src", lambda: call_fused("gate_tanh", x_src=np.ones((V, 3, F), np.float32))),
    ("x_src", lambda: call_fused("type_select", x_src=np.ones((V, F), np.float32))),
    ("x_dst", lambda: call_fused(x_dst=np.ones((V - 1, F), np.float32))),
    ("x_dst", lambda: call_fused(x_dst=np.ones((V, F + 1), np.float32))),
    ("x_dst", lambda: call_fused(x_dst=np.ones((V, F, 1), np.float32))),
    ("x_dst", lambda: call_fused("gate_relu", x_dst=np.ones((0,), np.float32))),
    ("x_dst", lambda: call_fused("copy_src", x_dst=np.ones((V, F), np.float32))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.ones(E + 1, np.float32))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.ones((E, 3), np.float32))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.ones((E, 0), np.float32))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.ones((E, 1, F), np.float32))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.float32(1))),
    ("edge_weight", lambda: call_fused("src_mul_edge", edge_weight=np.ones(0, np.float32))),
    ("edge_weight", lambda: call_fused("copy_src", edge_weight=np.ones(E, np.float32))),
    ("edge_type", lambda: call_fused("type_select", edge_type=np.int32([0, 1, NUM_TYPES, 0, 0]))),
    ("edge_type", lambda: call_fused("type_select", edge_type=np.int32([0, 1, -1, 0, 0]))),
    ("edge_type", lambda: call_fused("type_select", edge_type=np.int32([0, 1]))),
    ("edge_type", lambda: call_fused("copy_src", edge_type=np.zeros(E, np.int32))),
    # --- NgraFusedGatherGrad ---
    ("csr_edge", lambda: call_fused_grad(csr_edge=[1, 2, 3, 0, 5])),
    ("csr_edge", lambda: call_fused_grad(csr_edge=[1, 2, -3, 0, 4])),
    ("csr_edge", lambda: call_fused_grad(csr_edge=[1, 2, 3, 0, 1])),
    ("csr_dst", lambda: call_fused_grad(csr_dst=[1, 2, 2, 4, 2])),
    ("csr_dst", lambda: call_fused_grad(csr_dst=[1, 2, -2, 0, 2])),
    ("csr_indptr", lambda: call_fused_grad(csr_indptr=[0, 3, 1, 5, 5])),
    ("grad", lambda: call_fused_grad(grad=np.ones((V, F + 1), np.float32))),
    ("grad", lambda: call_fused_grad(grad=np.ones((V - 1, F), np.float32))),
    ("grad", lambda: call_fused_grad(grad=np.ones(V * F, np.float32))),
    ("argedge", lambda: call_fused_grad(reduce="max", argedge=np.zeros((V, F + 1), np.int32))),
    ("argedge", lambda: call_fused_grad(reduce="max", argedge=np.full((V, F), E, np.int32))),
    ("argedge", lambda: call_fused_grad(reduce="min", argedge=np.full((V, F), -2, np.int32))),
    ("x_dst", lambda: call_fused_grad("copy_src", wrt="x_dst")),
    ("edge_weight", lambda: call_fused_grad("src_add_dst", wrt="edge_weight")),
    ("x_dst", lambda: call_fused_grad("src_mul_dst", wrt="x_dst", x_dst=np.ones((V, F + 1), np.float32))),
    ("edge_type", lambda: call_fused_grad("type_select", edge_type=np.int32([0, 0, 0, 0, 9]))),
    # --- NgraGather ---
    ("values", lambda: call_gather(values=np.float32(1))),
    ("indptr", lambda: call_gather(indptr=[0, 2, 1, 5, 5])),
    ("indptr", lambda: call_gather(indptr=[1, 1, 2, 5, 5])),
    ("indptr", lambda: call_gather(indptr=[0, 1, 2, 5, 6])),  # indptr[-1] != rows of values
    ("indptr", lambda: call_gather(indptr=[CSC_INDPTR])),
    ("indptr", lambda: call_gather(indptr=np.zeros(0))),
    ("edge_ids", lambda: call_gather(edge_ids=[0, 1, 2, 3, 5])),
    ("edge_ids", lambda: call_gather(edge_ids=[0, 1, -1, 3, 4])),
    ("edge_ids", lambda: call_gather(edge_ids=[0, 1, 2])),
    ("init", lambda: call_gather(init=np.ones((V + 1, F), np.float32))),
    ("init", lambda: call_gather(init=np.ones((V, F, 1), np.float32))),
    ("init", lambda: call_gather(reduce="mean", init=np.ones((V, F), np.float32))),
    # --- NgraInitGrad ---
    ("argedge", lambda: lib().ngra_init_grad(np.ones((V, F), np.float32), np.zeros((V, F + 1), np.int32))),
    ("argedge", lambda: lib().ngra_init_grad(np.ones((V, F), np.float32), np.zeros(V * F, np.int32))),
    # --- NgraScatter ---
    ("x", lambda: call_scatter(x=np.float32(1))),
    ("indptr", lambda: call_scatter(indptr=np.append(CSR_INDPTR, 5))),
    ("indptr", lambda: call_scatter(indptr=[0, 3, 1, 5, 5])),
    ("indptr", lambda: call_scatter(indptr=[1, 1, 3, 5, 5])),
    ("edge_ids", lambda: call_scatter(edge_ids=[1, 2, 3, 0, 0])),
    ("edge_ids", lambda: call_scatter(edge_ids=[1, 2, 3, 0, 5])),
    ("edge_ids", lambda: call_scatter(edge_ids=[1, 2, 3, 0, -4])),
    ("edge_ids", lambda: call_scatter(edge_ids=[1, 2, 3])),
    # --- NgraGatherGradArg ---
    ("grad", lambda: call_gather_grad_arg(grad=np.float32(1), argedge=np.int32(0))),
    ("argedge", lambda: call_gather_grad_arg(argedge=[0, 1, 2])),
    ("argedge", lambda: call_gather_grad_arg(argedge=[0, 1, 5, -1])),
    ("argedge", lambda: call_gather_grad_arg(argedge=[0, 1, -2, -1])),
    ("argedge", lambda: call_gather_grad_arg(argedge=[1, 1, 2, -1])),  # edge 1 belongs to segment 1
    ("argedge", lambda: call_gather_grad_arg(argedge=[0, 1, 2, 3])),  # segment 3 has no edges
    ("indptr", lambda: call_gather_grad_arg(indptr=np.append(CSC_INDPTR, 5))),
    ("indptr", lambda: call_gather_grad_arg(indptr=[0, 2, 1, 5, 5])),
    ("edge_ids", lambda: call_gather_grad_arg(edge_ids=[0, 1, 2, 2, 4])),
    ("edge_ids", lambda: call_gather_grad_arg(edge_ids=[0, 1, 2, 3, 7])),
]


@pytest.mark.parametrize("name,call", [pytest.param(n, c, id=f"{i}-{n}") for i, (n, c) in enumerate(RAW_CASES)])
def test_raw_op_names_the_bad_argument(name, call):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"\b{name}\b"):
        call()


@pytest.mark.parametrize("attr,call", [
    ("program", lambda: call_fused(program="gcn")),
    ("reduce", lambda: call_fused(reduce="prod")),
    ("program", lambda: call_fused_grad(program="")),
    ("wrt", lambda: call_fused_grad(wrt="edge_type")),
    ("reduce", lambda: call_gather(reduce="median")),
])
def test_raw_op_rejects_unknown_attr(attr, call):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError), match=f"'{attr}'"):
        call()
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError), match=f"'{attr}'"):
        tf.function(call, autograph=False)()


def test_init_shape_is_checked_when_the_graph_is_built():
    """A statically known init of the wrong shape fails at graph construction, naming init."""
    bad = fused_inputs("copy_src", init=np.ones((V, F + 1), np.float32))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"\binit\b"):
        tf.function(lambda: lib().ngra_fused_gather(**bad, program="copy_src", reduce="sum"), autograph=False)()
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"\binit\b"):
        tf.function(lambda: call_gather(init=np.ones((V, F + 1), np.float32)), autograph=False)()


def test_raw_op_dtype_mismatches():
    base = fused_inputs("src_add_dst")
    bad = [
        ("x_dst", dict(base, x_dst=tf.cast(base["x_dst"], tf.float64))),
        ("csc_src", dict(base, csc_src=tf.cast(base["csc_src"], tf.int64))),
        (None, dict(base, edge_type=tf.zeros([0], tf.int64))),  # (TF's graph builder fails obscurely)
    ]
    for name, inputs in bad:
        # Eager: the kernel lookup fails; in a graph the op constructor names the input.
        with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a"):
            lib().ngra_fused_gather(**inputs, program="src_add_dst", reduce="sum")
        if name is not None:
            with pytest.raises(TypeError, match=f"'{name}'"):
                tf.function(lambda: lib().ngra_fused_gather(**inputs, program="src_add_dst", reduce="sum"),
                            autograph=False)()
    for values in (np.ones((E, F), np.int32), np.ones((E, F), np.float16)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="'T'"):
            call_gather(values=values)


# ---- the Python API ----

X = np.ones((V, F), np.float32)
X3 = np.ones((V, 2, F), np.float32)
TYPED = np.ones((V, NUM_TYPES, F), np.float32)

API_CASES = [
    ("program", lambda: fused_gather(GRAPH, X, program="gcn")),
    ("reduce", lambda: fused_gather(GRAPH, X, reduce="prod")),
    ("reduce", lambda: gather(GRAPH, np.ones((E, F)), "prod")),
    ("x_src", lambda: fused_gather(GRAPH, X[:3])),
    ("x_src", lambda: fused_gather(GRAPH, X.astype(np.int32))),
    ("x_src", lambda: fused_gather(GRAPH, np.float32(1))),
    ("x_src", lambda: fused_gather(GRAPH, np.ones((V, 3), np.float32), X, program="gate_sigmoid")),
    ("x_src", lambda: fused_gather(GRAPH, np.ones((V, 3, F), np.float32), X, program="gate_sigmoid")),
    ("x_src", lambda: fused_gather(GRAPH, np.ones(V, np.float32), program="type_select", edge_data=np.zeros(E, int))),
    ("x_dst", lambda: fused_gather(GRAPH, X, program="src_add_dst")),
    ("x_dst", lambda: fused_gather(GRAPH, X, X, program="copy_src")),
    ("x_dst", lambda: fused_gather(GRAPH, X, X[:3], program="src_add_dst")),
    ("x_dst", lambda: fused_gather(GRAPH, X, np.ones((V, F + 1), np.float32), program="src_mul_dst")),
    ("x_dst", lambda: fused_gather(GRAPH, X, X.astype(np.int64), program="src_sub_dst")),
    ("x_dst", lambda: fused_gather(GRAPH, X3, np.ones((V, 2, F), np.float32), program="gate_tanh")),
    ("edge_data", lambda: fused_gather(GRAPH, X, program="src_mul_edge")),
    ("edge_data", lambda: fused_gather(GRAPH, X, edge_data=np.ones(E + 1), program="src_mul_edge")),
    ("edge_data", lambda: fused_gather(GRAPH, X, edge_data=np.ones((E, 3)), program="src_mul_edge")),
    ("edge_data", lambda: fused_gather(GRAPH, X, edge_data=np.ones(E, np.int32), program="src_mul_edge")),
    ("edge_data", lambda: fused_gather(GRAPH, X, edge_data=np.ones(E), program="copy_src")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, program="type_select")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, edge_data=np.array([0, 1, 2, 3, 0]), program="type_select")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, edge_data=np.array([0, -1, 2, 0, 0]), program="type_select")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, edge_data=np.zeros(E, np.float32), program="type_select")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, edge_data=np.zeros((E, 1), int), program="type_select")),
    ("edge_data", lambda: fused_gather(GRAPH, TYPED, edge_data=np.zeros(E - 1, int), program="type_select")),
    ("edge_values", lambda: gather(GRAPH, np.ones((E + 1, F), np.float32))),
    ("edge_values", lambda: gather(GRAPH, np.ones((E, F), np.int32))),
    ("init", lambda: gather(GRAPH, np.ones((E, F)), "mean", init=np.ones((V, F)))),
    ("init", lambda: gather(GRAPH, np.ones((E, F)), "max", init=np.ones((V + 1, F)))),
    ("init", lambda: gather(GRAPH, np.ones((E, F)), "sum", init=np.ones((V, F), np.float32))),
    ("init", lambda: gather(GRAPH, np.ones((E, F)), "sum", init=np.ones((V, F), np.int64))),
    ("init", lambda: fused_gather(GRAPH, X, reduce="mean", init=X)),
    ("init", lambda: fused_gather(GRAPH, X, init=X.astype(np.float64))),
    ("init", lambda: fused_gather(GRAPH, X, init=X[:, :1])),
    ("init", lambda: fused_gather(GRAPH, X3, X, program="gate_tanh", init=X3)),
    ("x_src", lambda: scatter(GRAPH, X[:2])),
    ("x_src", lambda: scatter(GRAPH, X.astype(bool))),
    ("x_dst", lambda: scatter(GRAPH, X, X[:2])),
]


@pytest.mark.parametrize("name,call", [pytest.param(n, c, id=f"{i}-{n}") for i, (n, c) in enumerate(API_CASES)])
def test_python_api_names_the_bad_argument(name, call):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_python_api_rejects_a_non_graph():
    with pytest.raises(TypeError, match="graph"):
        fused_gather(np.zeros((3, 3)), X)


def test_edge_types_out_of_range_in_a_tensor_reach_the_kernel_check():
    types = tf.constant([0, 1, 2, NUM_TYPES, 0])  # a tensor: the Python API does not look inside
    with pytest.raises(tf.errors.InvalidArgumentError, match="edge_type"):
        fused_gather(GRAPH, TYPED, edge_data=types, program="type_select")


def test_edge_types_beyond_int32_in_a_tensor_are_rejected():
    """An int64 type of 2**32 must not wrap around to type 0 on its way to the int32 kernel input."""
    types = tf.constant([0, 1, 2, 2**32, 0], tf.int64)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="edge_(type|data)"):
        fused_gather(GRAPH, TYPED, edge_data=types, program="type_select")


# ---- normal cases that must not error ----


@pytest.mark.parametrize("num_vertices", [0, 3])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_edgeless_graphs_are_fine(program, reduce, num_vertices):
    """0 vertices, or vertices but no edges: zeros out, zero gradients, no error."""
    graph = ngra_tf.Graph.from_edges(np.zeros(0, int), np.zeros(0, int), num_vertices=num_vertices)
    spec = PROGRAMS[program]
    slots = {0: (), 2: (2,), None: (NUM_TYPES,)}[spec.src_slots]
    x_src = tf.ones((num_vertices,) + slots + (F,), tf.float64)
    x_dst = tf.ones((num_vertices, F), tf.float64) if spec.uses_dst else None
    edge_data = (np.zeros(0) if spec.uses_weight else np.zeros(0, np.int32) if spec.uses_type else None)
    with tf.GradientTape() as tape:
        tape.watch(x_src)
        out = fused_gather(graph, x_src, x_dst, edge_data, program=program, reduce=reduce)
    np.testing.assert_array_equal(out.numpy(), np.zeros((num_vertices, F)))
    np.testing.assert_array_equal(tape.gradient(out, x_src).numpy(), np.zeros(x_src.shape))


@pytest.mark.parametrize("num_vertices", [0, 3])
def test_edgeless_scatter_and_gather_are_fine(num_vertices):
    graph = ngra_tf.Graph.from_edges([], [], num_vertices=num_vertices)
    x = tf.ones((num_vertices, F), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        rows = scatter(graph, x)
        out = gather(graph, rows, "mean")
    assert rows.shape == (0, F)
    np.testing.assert_array_equal(out.numpy(), np.zeros((num_vertices, F)))
    np.testing.assert_array_equal(tape.gradient(out, x).numpy(), np.zeros((num_vertices, F)))
