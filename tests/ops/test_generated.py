"""Generated edge code (ngra_tf.ops.generated): random programs, forward and every gradient, through the
generated C++ equal the unfused per-edge path (TF ops) and the interpreter; without a compiler, or with a
library that does not fit, the interpreter runs and says why; the cache is safe for two processes at once."""

import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.ops import cpu
from ngra_tf.ops import edge_code as ec
from ngra_tf.ops import generated

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
from generated_cases import NUM_TYPES, Builder, attention, gate, head_gate  # noqa: E402  (tools/ is not a package)

pytestmark = pytest.mark.skipif(isinstance(generated.toolchain(), str), reason="no C++ compiler for generated code")


def _graph(rng, num_vertices=23, num_edges=160):
    src, dst = rng.integers(0, num_vertices, num_edges), rng.integers(0, num_vertices, num_edges)
    dst[:5] = 0  # a busy destination, and (most likely) empty ones
    return ngra_tf.Graph.from_edges(src, dst, num_vertices)


def _operands(rng, builder, graph, dtype, big_exp):
    def normal(*shape):
        return tf.constant(rng.normal(scale=1.0, size=shape), dtype)

    x_src = normal(graph.num_vertices, builder.src_width)
    if big_exp:  # the big exponential's argument is 25 * a source row: keep it within [-3, 3]
        x_src = tf.clip_by_value(x_src, -3.0, 3.0)
    x_dst = normal(graph.num_vertices, builder.dst_width)
    edge = normal(graph.num_edges, builder.edge_width)
    types = tf.constant(rng.integers(0, NUM_TYPES, graph.num_edges), tf.int32)
    return x_src, x_dst, edge, types


def _run(adjacency, code, operands, reduce, upstream, kernel_mode, src_and_dst=None):
    """(result, d x_src, d x_dst, d edge) through the op, with generated code on or off; src_and_dst: d x_src
    and d x_dst from one walk (True), from two (False) or as the registered gradient picks (None)."""
    x_src, x_dst, edge, types = operands
    args = dict(x_dst=x_dst if code.reads("dst") else None, edge_data=edge if code.reads("edge") else None,
                edge_type=types if code.reads("type") else None)
    previous = os.environ.get(generated.DISABLE_ENV)
    os.environ[generated.DISABLE_ENV] = kernel_mode
    try:
        out, aux = ec.edge_code_gather(adjacency, code, x_src, reduce=reduce, return_aux=True, **args)
        grads = ec.edge_code_grads(adjacency, code, upstream(out), x_src, reduce=reduce,
                                   aux=aux if reduce in ("max", "min") else None,
                                   state=out if reduce == "softmax" else None, src_and_dst=src_and_dst, **args)
    finally:
        if previous is None:
            del os.environ[generated.DISABLE_ENV]
        else:
            os.environ[generated.DISABLE_ENV] = previous
    return [out] + [g for g in grads]


def _reference(adjacency, code, operands, reduce, upstream, aux, state):
    """The unfused path: every register as a per-edge tensor of TF ops, reduced; gradients by TF."""
    x_src, x_dst, edge, types = operands
    watched = [x_src, x_dst, edge]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        out = ec._reference_result(adjacency, code, x_src, x_dst, edge, types, reduce,
                                   aux if reduce in ("max", "min") else None, state)
    return tape.gradient(out, watched, output_gradients=upstream(out), unconnected_gradients="zero")


def _close(got, want, what, tol):
    """Within tol of want's largest finite magnitude; infinities (a softmax state's empty rows) exactly."""
    got, want = (np.asarray(tf.convert_to_tensor(t), np.float64) for t in (got, want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.where(finite, 0, got), np.where(finite, 0, want), err_msg=what)
    scale = max(np.max(np.abs(want[finite]), initial=0), 1e-30)
    np.testing.assert_allclose(got[finite] / scale, want[finite] / scale, rtol=0, atol=tol, err_msg=what)


REDUCES = ("sum", "mean", "max", "min", "softmax")


def _check(seed, reduce, dtype, width, big_exp=False, heads=False):
    rng = np.random.default_rng(seed)
    builder = Builder(rng, width)
    code = builder.draw(attention=reduce == "softmax", big_exp=big_exp, heads=heads)
    if heads:  # the case is here for the adjoints generated code sums and sends back once per head
        p = generated._Program(code)
        assert any(a and r for a, r in zip(generated._adjoints(p, generated.SRC_AND_DST),
                                           generated._by_run(p, p.live))), f"seed {seed}: no adjoint per head"
    graph = _graph(rng)
    adjacency = graph.adjacency
    operands = _operands(rng, builder, graph, dtype, big_exp)
    upstream_values = {}

    def upstream(out):
        if out.shape not in upstream_values:
            upstream_values[out.shape] = tf.constant(rng.normal(size=out.shape), dtype)
        return upstream_values[out.shape]

    fast = _run(adjacency, code, operands, reduce, upstream, "1")
    slow = _run(adjacency, code, operands, reduce, upstream, "0")
    tol = 1e-5 if dtype == tf.float32 else 1e-12
    what = f"seed {seed}, {reduce}, {dtype.name}, width {width}: {code.expression()}"
    for name, a, b in zip(("result", "d x_src", "d x_dst", "d edge"), fast, slow):
        if b is None:
            assert a is None
            continue
        _close(a, b, f"generated vs interpreted {name}; {what}", tol)
    if code.reads("dst"):  # one walk over sources for both operands, or a walk for each: the same gradients
        for mode, label in (("1", "generated"), ("0", "interpreted")):
            one = _run(adjacency, code, operands, reduce, upstream, mode, src_and_dst=True)
            two = _run(adjacency, code, operands, reduce, upstream, mode, src_and_dst=False)
            for name, a, b in zip(("d x_src", "d x_dst"), one[1:3], two[1:3]):
                _close(a, b, f"{label} {name}, one walk vs two; {what}", tol)
    if reduce in ("max", "min"):  # the same winners, then the gradients of those winners' messages
        got_aux = ec.edge_code_gather(adjacency, code, operands[0], operands[1] if code.reads("dst") else None,
                                      operands[2] if code.reads("edge") else None,
                                      operands[3] if code.reads("type") else None, reduce=reduce, return_aux=True)[1]
        aux = got_aux
    else:
        aux = None
    if reduce == "softmax":
        _close(ec.softmax_result(fast[0], width), ec.softmax_result(
            ec._reference_gather(adjacency, code, *operands, "softmax", None)[0], width),
            f"softmax result; {what}", tol)
    else:
        want = ec._reference_gather(adjacency, code, *operands, reduce, None)[0]
        _close(fast[0], want, f"result; {what}", tol)
    want_grads = _reference(adjacency, code, operands, reduce, upstream, aux, fast[0] if reduce == "softmax" else None)
    for name, got, want in zip(("d x_src", "d x_dst", "d edge"), fast[1:], want_grads):
        if got is not None:
            _close(got, want, f"{name}; {what}", tol)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("seed", range(1))
def test_random_programs_equal_the_unfused_path_and_the_interpreter(seed, reduce):
    _check(seed, reduce, tf.float32, width=12)


@pytest.mark.parametrize("reduce", ["sum", "softmax"])
@pytest.mark.parametrize("seed", range(1))
def test_exponentials_of_large_arguments_stay_within_float32_accuracy(seed, reduce):
    _check(40 + seed, reduce, tf.float32, width=9, big_exp=True)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("seed,dtype", [(1, "float32"), (3, "float32"),
                                        *(pytest.param(seed, dtype, marks=pytest.mark.slow) for seed, dtype in
                                          ((2, "float64"), (6, "float32"), (11, "float64")))])
def test_random_programs_over_heads_equal_the_unfused_path_and_the_interpreter(seed, dtype, reduce):
    """Chains of ops the same over each head's run of features, with adjoints into per-edge, per-head and
    per-feature registers: generated code computes them once per run and sums their adjoints per run."""
    _check(seed, reduce, tf.as_dtype(dtype), width=16, heads=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed,reduce,dtype", [  # each seed and reduce in one dtype, the dtypes alternating: every
    (seed, reduce, ("float32", "float64")[(seed + i) % 2])  # compile is a library of its own (100 took 15 minutes)
    for seed in range(1, 6) for i, reduce in enumerate(REDUCES)])
def test_random_programs_full_matrix(seed, reduce, dtype):
    _check(seed, reduce, tf.as_dtype(dtype), width=[5, 12, 130][seed % 3], big_exp=seed % 4 == 0)


@pytest.mark.parametrize("kernel_mode", ["1", "0"], ids=["generated", "interpreted"])
@pytest.mark.parametrize("program,reduce", [("attention-4", "softmax"), ("attention-2", "softmax"), ("gate", "sum"),
                                            ("gate", "max")])
def test_one_walk_for_both_operands_equals_a_walk_for_each_and_the_unfused_path(program, reduce, kernel_mode):
    """wrt x_src_and_dst (the registered gradient's choice for GAT's per-head scores and costly programs): the
    walk over sources leaves each edge's share of d x_dst in a row of its own, added per destination after."""
    rng = np.random.default_rng(7)
    width = 16
    heads = int(program[-1]) if program.startswith("attention") else 0  # runs of 4 and 8 features per head
    code = attention(width, heads=heads) if heads else gate(width)
    assert generated.table_shapes(code.tables, range(len(code.tables)))[-1] == (str(width // heads) if heads else "c")
    graph = _graph(rng)
    src_width, dst_width = (width + heads, heads) if heads else (2 * width, width)
    operands = (tf.constant(rng.normal(size=(graph.num_vertices, src_width)), tf.float32),
                tf.constant(rng.normal(size=(graph.num_vertices, dst_width)), tf.float32), None, None)
    if heads:  # the gate (no costly op) takes two walks unless asked, as here
        assert ec.src_walk_takes_dst(operands[0], operands[1], code.attrs()["code"][0::4])
    upstream_values = {}

    def upstream(out):
        return upstream_values.setdefault(out.shape, tf.constant(rng.normal(size=out.shape), tf.float32))

    one = _run(graph.adjacency, code, operands, reduce, upstream, kernel_mode, src_and_dst=True)
    two = _run(graph.adjacency, code, operands, reduce, upstream, kernel_mode, src_and_dst=False)
    aux = ec.edge_code_gather(graph.adjacency, code, operands[0], operands[1], reduce=reduce, return_aux=True)[1]
    want = _reference(graph.adjacency, code, (*operands[:2], tf.zeros([graph.num_edges, 1]), None), reduce, upstream,
                      aux, one[0] if reduce == "softmax" else None)
    assert float(tf.reduce_max(tf.abs(want[1]))) > 0.1  # the destination's gradient is there to get wrong
    for name, a, b, w in zip(("d x_src", "d x_dst"), one[1:3], two[1:3], want[:2]):
        _close(a, b, f"{name}: one walk vs two", 1e-5)
        _close(a, w, f"{name}: one walk vs the unfused path", 1e-5)


def test_one_walk_is_chosen_for_narrow_destinations_and_programs_with_two_costly_ops():
    x_src, wide, narrow = tf.zeros([3, 32]), tf.zeros([3, 16]), tf.zeros([3, 8])
    opcodes = {name: [ec.OPCODES[op] for op in ops] for name, ops in (
        ("leaky message", ["load_src", "load_dst", "add", "leaky_relu"]),
        ("product", ["load_src", "load_dst", "mul", "load_src", "mul"]),
        ("tanh gate", ["load_src", "load_dst", "add", "tanh", "load_src", "mul"]),
        ("sigmoid gate", ["load_src", "load_dst", "add", "sigmoid", "load_src", "mul"]),
        ("ratio", ["load_src", "load_dst", "sub", "abs", "const", "add", "div"]),
        ("exp/div", ["load_src", "load_dst", "add", "tanh", "exp", "const", "add", "div", "mul"]))}
    chosen = [name for name, ops in opcodes.items() if ec.src_walk_takes_dst(x_src, wide, ops)]
    assert chosen == ["exp/div"]  # exp and div; a sigmoid or a division alone is cheaper to evaluate again
    assert all(ec.src_walk_takes_dst(x_src, narrow, ops) for ops in opcodes.values())
    assert not ec.src_walk_takes_dst(tf.TensorSpec([None, None]), narrow, opcodes["exp/div"])  # width unknown


def _tile_programs(width):
    """Programs whose gradients add into one or two contiguous runs of a row (the walks' tile sums), with the
    runs each side sums: {name: (EdgeCode, (source runs, destination runs))}."""
    f = np.arange(width, dtype=np.int32)
    tables = np.stack([f, width + f, f, np.zeros_like(f), 2 + f])
    a, c, b = ("load_src", 0, 0, -1), ("load_src", 1, 0, -1), ("load_dst", 2, 0, -1)
    return {
        "product": (ec.EdgeCode((a, b, ("mul", 0, 1, -1)), (), tables, 2), (1, 1)),
        "gate": (gate(width), (2, 1)),
        # two runs two columns apart: two tiles that add into the same columns, one after the other
        "overlapping": (ec.EdgeCode((a, b, ("mul", 0, 1, -1), ("load_src", 4, 0, -1), ("sigmoid", 3, 0, -1),
                                     ("mul", 2, 4, -1)), (), tables, 5), (2, 1)),
        # a per-edge column of the destination beside its run: added per edge, the run per tile
        "edge column": (ec.EdgeCode((a, b, ("load_dst", 3, 0, -1), ("mul", 1, 2, -1), ("add", 0, 3, -1),
                                     ("tanh", 4, 0, -1)), (), tables, 5), (1, 1)),
    }


@pytest.mark.parametrize("reduce", ["sum", "max"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiles_summed_over_a_segment_equal_the_interpreter_and_the_unfused_path(dtype, reduce):
    """Rows of 130 features: whole tiles (kTile: 128 float32s, 64 float64s), whose sums the compiler keeps in
    registers, and a partial one, through both walks (d x_src over sources, d x_dst over destinations)."""
    rng = np.random.default_rng(3)
    dtype = tf.as_dtype(dtype)
    width = 130
    graph = _graph(rng)
    tol = 1e-5 if dtype == tf.float32 else 1e-12
    for name, (code, runs) in _tile_programs(width).items():
        assert f"kTileRuns[2] = {{{runs[0]}, {runs[1]}}}" in generated.source(code, dtype.name, "int32", reduce), name
        operands = (tf.constant(rng.normal(size=(graph.num_vertices, 2 * width)), dtype),
                    tf.constant(rng.normal(size=(graph.num_vertices, width)), dtype), None, None)
        upstream_values = {}

        def upstream(out):
            return upstream_values.setdefault(out.shape, tf.constant(rng.normal(size=out.shape), dtype))

        fast = _run(graph.adjacency, code, operands, reduce, upstream, "1", src_and_dst=False)
        slow = _run(graph.adjacency, code, operands, reduce, upstream, "0", src_and_dst=False)
        want = _reference(graph.adjacency, code, (*operands[:2], tf.zeros([graph.num_edges, 1], dtype), None), reduce,
                          upstream, fast[-1] if reduce == "max" else None, None)
        for label, got, interpreted, unfused in zip(("d x_src", "d x_dst"), fast[1:3], slow[1:3], want[:2]):
            _close(got, interpreted, f"{name}, {label}: generated vs interpreted", tol)
            _close(got, unfused, f"{name}, {label}: generated vs the unfused path", tol)


@pytest.mark.parametrize("op", ["relu", "maximum", "minimum", "abs"])
def test_adjoints_that_do_not_pass_treat_an_infinite_upstream_as_tensorflow_does(op):
    """Where their condition fails, maximum's and minimum's adjoints send +0 (TensorFlow's where), relu's
    sends gy * 0 (TensorFlow's ReluGrad multiplies: NaN for an infinite gy) and abs's gy * sign(x) (NaN for an
    infinite gy at x = 0, which the operands here hit: a tenth of their entries are 0). Upstream values of +-inf
    and NaN, through the generated walks, the interpreter and the unfused path."""
    rng = np.random.default_rng(5)
    width = 130
    graph = _graph(rng)
    f = np.arange(width, dtype=np.int32)
    a, c, b = ("load_src", 0, 0, -1), ("load_src", 1, 0, -1), ("load_dst", 0, 0, -1)
    first = (("add", 0, 2, -1), (op, 3, 0, -1)) if op in ("relu", "abs") else ((op, 0, 2, -1), ("neg", 3, 0, -1))
    code = ec.EdgeCode((a, c, b, *first, ("mul", 4, 1, -1)), (), np.stack([f, width + f]), 5)

    def normal(*shape):  # with exact zeros: a + b is then 0 where both are
        return tf.constant(np.where(rng.random(shape) < 0.3, 0.0, rng.normal(size=shape)), tf.float32)

    operands = (normal(graph.num_vertices, 2 * width), normal(graph.num_vertices, width), None, None)
    special = rng.choice([np.inf, -np.inf, np.nan, 1.0], size=(graph.num_vertices, width), p=[0.04, 0.04, 0.02, 0.9])
    upstream = tf.constant(special * rng.normal(size=special.shape) ** 2, tf.float32)
    fast = _run(graph.adjacency, code, operands, "sum", lambda _: upstream, "1", src_and_dst=False)
    slow = _run(graph.adjacency, code, operands, "sum", lambda _: upstream, "0", src_and_dst=False)
    want = _reference(graph.adjacency, code, (*operands[:2], tf.zeros([graph.num_edges, 1]), None), "sum",
                      lambda _: upstream, None, None)
    for label, got, interpreted, unfused in zip(("d x_src", "d x_dst"), fast[1:3], slow[1:3], want[:2]):
        assert np.isfinite(tf.convert_to_tensor(unfused).numpy()).mean() > 0.2, "needs finite entries an inf would spoil"
        _close(got, interpreted, f"{op}, {label}: generated vs interpreted", 1e-5)
        _close(got, unfused, f"{op}, {label}: generated vs the unfused path", 1e-5)


@pytest.mark.parametrize("kernel_mode", ["1", "0"], ids=["generated", "interpreted"])
def test_one_walk_adds_the_destination_terms_block_by_block(kernel_mode):
    """Rows of 1024 destination features: the op keeps 4 MiB of terms, 1024 edges, at a time, so the walk runs
    in blocks of sources, and one source (3000 out-edges) is a block larger than that alone."""
    rng = np.random.default_rng(11)
    width, num_vertices = 1024, 300
    code = gate(width)
    src = np.concatenate([np.full(3000, 7), rng.integers(0, num_vertices, 6000)])
    dst = rng.integers(0, num_vertices, src.size)
    graph = ngra_tf.Graph.from_edges(src, dst, num_vertices)
    operands = (tf.constant(rng.normal(size=(num_vertices, 2 * width)), tf.float32),
                tf.constant(rng.normal(size=(num_vertices, width)), tf.float32), None, None)
    upstream = tf.constant(rng.normal(size=(num_vertices, width)), tf.float32)
    one = _run(graph.adjacency, code, operands, "sum", lambda _: upstream, kernel_mode, src_and_dst=True)
    two = _run(graph.adjacency, code, operands, "sum", lambda _: upstream, kernel_mode, src_and_dst=False)
    want = _reference(graph.adjacency, code, (*operands[:2], tf.zeros([graph.num_edges, 1]), None), "sum",
                      lambda _: upstream, None, None)
    for name, a, b, w in zip(("d x_src", "d x_dst"), one[1:3], two[1:3], want[:2]):
        _close(a, b, f"{name}: one walk vs two", 1e-5)
        _close(a, w, f"{name}: one walk vs the unfused path", 1e-5)


@pytest.mark.parametrize("kernel_mode", ["1", "0"], ids=["generated", "interpreted"])
def test_one_walk_over_no_edges_gives_zero_gradients(kernel_mode):
    """A chunk without edges: both gradients are zero (the destination's too, though no edge row was written)."""
    code = attention(16, heads=4)
    graph = ngra_tf.Graph.from_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), 5)
    x_src = tf.ones([5, 20])
    x_dst = tf.fill([5, 4], 7.0)
    for _ in range(2):  # a second call may get the first's freed buffers
        out = _run(graph.adjacency, code, (x_src, x_dst, None, None), "softmax", lambda o: tf.ones_like(o) * 3.0,
                   kernel_mode, src_and_dst=True)
        np.testing.assert_array_equal(out[1].numpy(), np.zeros([5, 20]))
        np.testing.assert_array_equal(out[2].numpy(), np.zeros([5, 4]))


@pytest.mark.parametrize("heads", [2, 4, 8])  # runs of 8, 4 and 2 features
@pytest.mark.parametrize("reduce", ["softmax", "sum", "max"])
def test_registers_the_same_over_each_head_equal_the_unfused_path(reduce, heads):
    """Generated code computes what is the same over a head's run of features once per run, in its forward and
    its gradients (there, a run's adjoints are summed with a tree): both against the per-edge TF path."""
    rng = np.random.default_rng(heads)
    width = 16
    code = attention(width, heads) if reduce == "softmax" else head_gate(width, heads)
    assert generated.table_shapes(code.tables, range(3)) == "c" + 2 * str(width // heads)
    graph = _graph(rng)
    x_src = tf.constant(rng.normal(size=(graph.num_vertices, width + heads)), tf.float32)
    x_dst = tf.constant(rng.normal(size=(graph.num_vertices, heads)), tf.float32)
    operands = (x_src, x_dst, tf.zeros([graph.num_edges, 1]), None)
    out, aux = ec.edge_code_gather(graph.adjacency, code, x_src, x_dst, reduce=reduce, return_aux=True)
    want = ec._reference_gather(graph.adjacency, code, *operands, reduce, None)[0]
    if reduce == "softmax":
        _close(ec.softmax_result(out, width), ec.softmax_result(want, width), "softmax result", 1e-5)
    else:
        _close(out, want, "result", 1e-5)
    upstream = tf.constant(rng.normal(size=out.shape), tf.float32)
    got = ec.edge_code_grads(graph.adjacency, code, upstream, x_src, x_dst, reduce=reduce,
                             aux=aux if reduce == "max" else None, state=out if reduce == "softmax" else None)
    want_grads = _reference(graph.adjacency, code, operands, reduce, lambda _: upstream,
                            aux if reduce == "max" else None, out if reduce == "softmax" else None)
    for name, a, w in zip(("d x_src", "d x_dst"), got, want_grads):
        _close(a, w, f"{name}, {reduce}, {heads} heads", 1e-5)


# ---- falling back ----

def _simple():
    rows = np.arange(4, dtype=np.int32)
    code = ec.EdgeCode((("load_src", 0, 0, -1), ("load_dst", 0, 0, -1), ("add", 0, 1, -1), ("tanh", 2, 0, -1)),
                       (), rows[None], 3)
    graph = ngra_tf.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 1], 3)
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 4)), tf.float32)
    return code, graph, x


def test_without_a_compiler_the_interpreter_runs_and_explain_says_why(monkeypatch):
    code, graph, x = _simple()
    want = ec.edge_code_gather(graph.adjacency, code, x, x)
    monkeypatch.setattr(generated, "toolchain", lambda: "no C++ compiler: g++ (the op library's) is not on PATH")
    generated._library.cache_clear()
    try:
        assert generated.library_for(code, tf.float32, tf.int32, "sum") == ""
        assert generated.status() == "interpreted: no C++ compiler: g++ (the op library's) is not on PATH"
        np.testing.assert_allclose(ec.edge_code_gather(graph.adjacency, code, x, x), want, rtol=1e-6)
    finally:
        generated._library.cache_clear()


def test_a_failed_compile_warns_once_and_interprets(monkeypatch, tmp_path):
    code, graph, x = _simple()
    compiler, flags, root, fingerprint = generated.toolchain()
    monkeypatch.setattr(generated, "toolchain", lambda: (compiler, flags + ["-DNGRA_BROKEN", "-include", "missing.h"],
                                                         root, fingerprint + "broken"))
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(generated, "_failure", None)
    generated._library.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="compiling generated edge code failed"):
            assert generated.library_for(code, tf.float32, tf.int32, "sum") == ""
        assert generated.status().startswith("interpreted: compiling generated edge code failed")
        assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-written is left
    finally:
        generated._library.cache_clear()


def test_the_cache_key_names_the_cpu_that_native_code_was_built_for(monkeypatch):
    """Code built with -march=native on one CPU may not run on another (an illegal instruction kills the
    process): a cache two machines share (a home directory on NFS) keeps a library for each CPU."""
    tools = generated.toolchain()
    native = any("native" in flag for flag in tools[1])
    monkeypatch.setattr(cpu, "identity", lambda: "vendor_id: OtherVendor\nflags: fpu sse2")
    generated.toolchain.cache_clear()
    try:
        other = generated.toolchain()
    finally:
        monkeypatch.undo()
        generated.toolchain.cache_clear()
    assert other[:3] == tools[:3]
    assert (other[3] != tools[3]) == native  # without -march=native the flags name the target already
    assert generated.toolchain() == tools
    assert cpu.identity().strip()  # this machine's CPU, named


def test_a_cache_directory_that_cannot_be_made_warns_once_names_it_and_interprets(monkeypatch, tmp_path):
    code, graph, x = _simple()
    want = ec.edge_code_gather(graph.adjacency, code, x, x)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker / "kernels"  # under a file: cannot be made
    monkeypatch.setenv(generated.CACHE_ENV, str(cache))
    monkeypatch.setattr(generated, "_failure", None)
    generated._library.cache_clear()
    why = f"cannot build in {cache} ("
    try:
        with pytest.warns(RuntimeWarning) as caught:
            assert generated.library_for(code, tf.float32, tf.int32, "sum") == ""
        assert len(caught) == 1 and why in str(caught[0].message)
        assert f"set {generated.CACHE_ENV} to a writable directory" in str(caught[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same program again: no second warning
            assert generated.library_for(code, tf.float32, tf.int32, "sum") == ""
        assert generated.status().startswith(f"interpreted: {why}")
        np.testing.assert_allclose(ec.edge_code_gather(graph.adjacency, code, x, x), want, rtol=1e-6)
    finally:
        generated._library.cache_clear()


def test_a_library_that_does_not_fit_runs_the_interpreter(tmp_path):
    """A kernel attribute naming a missing file, another program's library, or a library cut short (whose
    mapping past its end would kill the process with SIGBUS) gives the interpreter's result."""
    code, graph, x = _simple()
    lib = ngra_tf.ops.library()
    other = ec.EdgeCode(code.instructions[:3], (), code.tables, 2)
    args = [x, x, tf.zeros([0, 0]), tf.zeros([0], tf.int32), tf.zeros([0]), tf.constant(code.tables),
            *graph.adjacency.tensors(), tf.zeros([0]), tf.zeros([0], tf.int8)]
    want = lib.ngra_edge_code(*args, reduce="sum", kernel="", **code.attrs())[0]
    whole = pathlib.Path(generated.library_for(code, tf.float32, tf.int32, "sum")).read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(whole[:len(whole) // 2])
    for kernel in (str(tmp_path / "missing.so"), generated.library_for(other, tf.float32, tf.int32, "sum"),
                   str(cut)):
        got = lib.ngra_edge_code(*args, reduce="sum", kernel=kernel, **code.attrs())[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("damage", ["cut short", "overwritten", "another program's"])
def test_a_damaged_library_in_the_cache_is_compiled_again_with_a_warning(monkeypatch, tmp_path, damage):
    code, graph, x = _simple()
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    generated._library.cache_clear()
    try:
        path = pathlib.Path(generated.library_for(code, tf.float32, tf.int32, "sum"))
        other = ec.EdgeCode(code.instructions[:3], (), code.tables, 2)
        bad = {"cut short": lambda: path.read_bytes()[:path.stat().st_size // 2], "overwritten": lambda: b"junk",
               "another program's": lambda: pathlib.Path(generated.library_for(other, tf.float32, tf.int32,
                                                                                 "sum")).read_bytes()}[damage]()
        path.write_bytes(bad)
        generated._library.cache_clear()
        with pytest.warns(RuntimeWarning, match="compiling it again") as caught:
            assert generated.library_for(code, tf.float32, tf.int32, "sum") == str(path)
        assert str(path) in str(caught[0].message)
        assert len([w for w in caught if "compiling it again" in str(w.message)]) == 1, "one warning a file"
        assert path.read_bytes() != bad
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # whole again: used as it is
            generated._library.cache_clear()
            assert generated.library_for(code, tf.float32, tf.int32, "sum") == str(path)
    finally:
        generated._library.cache_clear()


@pytest.mark.slow
def test_two_processes_compiling_the_same_program_share_one_library(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        from ngra_tf.ops import edge_code as ec, generated
        rows = np.arange(6, dtype=np.int32)
        code = ec.EdgeCode((("load_src", 0, 0, -1), ("sigmoid", 0, 0, -1), ("mul", 0, 1, -1)), (), rows[None], 2)
        print("PATH", generated.library_for(code, tf.float32, tf.int64, "max"))
    """)
    env = dict(os.environ, **{generated.CACHE_ENV: str(tmp_path)})
    runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    paths = {next(line.split()[1] for line in run.communicate()[0].splitlines() if line.startswith("PATH"))
             for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert len(paths) == 1 and os.path.isfile(paths.pop())
    assert [p.suffix for p in tmp_path.iterdir()] == [".so"]  # no scratch left behind


def test_the_opcode_and_reduce_tables_agree():
    """Python's opcode numbers are the order of ops/kernels/edge_code.h's EdgeOpcode, whose enumerators the
    generated code names; its reduces are the order of CodeReduce, the numbers a generated library is built for;
    its ABI, the one-walk side and the run lengths of table shapes are the C++ side's."""
    import re

    header = os.path.join(os.path.dirname(__file__), "..", "..", "ops", "kernels", "edge_code.h")
    with open(header) as f:
        body = re.search(r"enum EdgeOpcode : int32_t \{(.*?)\};", f.read(), re.S).group(1)
    enumerators = re.findall(r"^\s*(k[A-Za-z0-9]+)", re.sub(r"//.*", "", body), re.M)
    assert enumerators[-1] == "kNumOpcodes"
    assert enumerators[:-1] == [generated.enumerator(name) for name in sorted(ec.OPCODES, key=ec.OPCODES.get)]
    assert len(ec.OPCODES) == len(set(ec.OPCODES.values())) == len(enumerators) - 1
    walks = os.path.join(os.path.dirname(header), "edge_code_walks.h")
    with open(walks) as f:
        reduces = re.search(r"enum CodeReduce : int \{(.*?)\};", f.read(), re.S).group(1)
    assert [name.strip().split()[0] for name in reduces.split(",")] == [
        "kCode" + name.capitalize() for name in ec.CODE_REDUCES]
    with open(walks) as f:
        text = f.read()
    assert f"constexpr int kCodeCallAbi = {generated.ABI};" in text
    assert "constexpr int kLoadSrcAndDst = kLoadSrcTyped + 1;" in text  # the side after the last load opcode
    assert generated.SRC_AND_DST == ec.OPCODES["load_src_typed"] + 1
    with open(os.path.join(os.path.dirname(header), "..", "cc", "edge_code_kernels.cc")) as f:
        runs = re.search(r"for \(const int run : \{([0-9, ]+)\}\)", f.read()).group(1)
    assert tuple(int(run) for run in runs.split(",")) == generated._RUNS  # the table shapes' run lengths


def test_a_killed_compile_leaves_no_scratch_for_long(monkeypatch, tmp_path):
    """A compile killed on the way leaves a scratch directory; the next compile removes it once it is stale."""
    stale = tmp_path / ".build-killed"
    stale.mkdir()
    (stale / "code.cc").write_text("// half")
    os.utime(stale, (0, 0))
    fresh = tmp_path / ".build-running"
    fresh.mkdir()  # another process compiling right now: left alone
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    generated._library.cache_clear()
    try:
        code, _, _ = _simple()
        assert generated.library_for(code, tf.float32, tf.int64, "min")
    finally:
        generated._library.cache_clear()
    assert not stale.exists() and fresh.exists()
