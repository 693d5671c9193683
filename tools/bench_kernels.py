"""Propagation micro-benchmark (NGra §6.1): out = A @ X, ngra-tf against its peers.

A is a random sparse 10,000 x 10,000 matrix at densities 0.01% .. 10% and X a
dense 10,000 x 128 float32 matrix; then two power-law graphs shaped like
NGra's reddit-small (46.6K vertices, 1.4M edges) at d = 128 and d = 602,
forward and forward + backward (the gradient w.r.t. X). Every system runs in
the same process on the same data; the table reports medians, effective
bandwidth and the ratio of the best peer's time to each system's. Each
system's calls run back to back, its data warm in cache as a repeated call
finds it (alternating the systems round by round doubled every time at the
low densities, the caches then cold for all alike). Under each forward
table, two floors, not systems: TensorFlow returning a zeroed output of that
shape, and torch copying one source row into each output row. The TF-based
systems run inside a tf.function, one call per timed run; fused_gather's
forward is also called eagerly ("eager"), as torch's and scipy's calls are,
which leaves out TensorFlow's function-call cost (~0.2 ms on 2 cores).

Effective GB/s counts the bytes a kernel without cache reuse must move:
per edge its index, its weight and the gathered row of X, plus the output.

    python tools/bench_kernels.py --programs            # specialised programs against edge code

--programs times each specialised fused_gather program (copy_src, the G-GCN
gates, ...) against the same edge stage as generic edge code
(ngra_tf.ops.edge_code), forward, forward + backward (d x_src) and, for
programs that read destination rows, forward + both gradients (d x_src and
d x_dst), on the reddit-small-like graph, all calls of a program alternated
round by round so that a shared machine's slow spells fall on each alike;
the two gradients must agree before anything is timed. The compiler keeps a
specialised kernel only where it is faster
(ngra_tf.compiler.program.SPECIALISED).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
import tensorflow as tf
from absl import app, flags

import ngra_tf
from ngra_tf.graph.synthetic import power_law_graph, uniform_graph
from timing import alternated_ms, median_ms

flags.DEFINE_list("densities", ["0.0001", "0.001", "0.01", "0.1"], "Densities of the 10K x 10K matrix.")
flags.DEFINE_integer("repeats", 7, "Timed runs per cell (after one warm-up); the median is reported.", lower_bound=1)
flags.DEFINE_bool("reddit", True, "Also run the two reddit-small-like power-law graphs.")
flags.DEFINE_bool("torch", True, "Include torch.sparse.mm when torch is installed.")
flags.DEFINE_string("plot", None, "Write a PNG of the ratio table here (needs matplotlib).")
flags.DEFINE_bool("programs", False, "Only compare the specialised fused_gather programs with edge code.")
flags.DEFINE_integer("width", 128, "Features per row for --programs.", lower_bound=1)
flags.DEFINE_integer("reddit_vertices", 46_600, "Vertices of the reddit-small-like graph.", lower_bound=2)
flags.DEFINE_integer("reddit_edges", 1_400_000, "Edges of the reddit-small-like graph.", lower_bound=1)
FLAGS = flags.FLAGS


def _is_density(value: str) -> bool:
    try:
        return 0 < float(value) <= 1
    except ValueError:
        return False


flags.register_validator("densities", lambda values: all(_is_density(v) for v in values),
                         message="takes numbers in (0, 1], the share of the 10K x 10K matrix's entries that are "
                                 "edges (e.g. 0.0001,0.01)")

NGRA = ("ngra fused_gather", "ngra fused_gather, eager", "ngra scatter-mul-gather")


def tf_systems(graph, x, backward):
    """TF-based systems as zero-argument callables computing A @ X (and its gradient)."""
    w = tf.constant(graph.edge_data)
    src, dst = tf.constant(graph.src), tf.constant(graph.dst)
    n = graph.num_vertices
    sparse = tf.sparse.SparseTensor(
        tf.constant(np.stack([graph.dst, graph.src], 1).astype(np.int64)), w, [n, n])
    upstream = tf.constant(np.random.default_rng(1).standard_normal(x.shape).astype(np.float32))
    forwards = {
        "ngra fused_gather": lambda x: ngra_tf.ops.fused_gather(graph, x, program="src_mul_edge"),
        "ngra scatter-mul-gather": lambda x: ngra_tf.ops.gather(
            graph, ngra_tf.ops.scatter(graph, x) * w[:, None]),
        "tf.sparse.sparse_dense_matmul": lambda x: tf.sparse.sparse_dense_matmul(sparse, x),
        "tf.gather+unsorted_segment_sum": lambda x: tf.math.unsorted_segment_sum(
            tf.gather(x, src) * w[:, None], dst, n),
    }

    def compiled(forward):
        if not backward:
            return tf.function(lambda: forward(x))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = forward(x)
            return out, tape.gradient(out, x, output_gradients=upstream)

        return step

    systems = {name: compiled(f) for name, f in forwards.items()}
    if not backward:  # the op called as torch's is, without a tf.function's call around it
        systems["ngra fused_gather, eager"] = lambda: forwards["ngra fused_gather"](x)
    return systems, upstream


def peer_systems(graph, x, upstream, backward):
    """scipy and torch, computing the same A @ X (and A^T @ G for the gradient)."""
    n = graph.num_vertices
    a = sp.csr_matrix((graph.edge_data, (graph.dst, graph.src)), shape=(n, n))
    xn = x.numpy()
    systems = {}
    if backward:
        at = a.T.tocsr()
        g = upstream.numpy()
        systems["scipy CSR @ dense"] = lambda: (a @ xn, at @ g)
    else:
        systems["scipy CSR @ dense"] = lambda: a @ xn
    if FLAGS.torch:
        try:
            import torch
        except ImportError:
            return systems
        torch.set_num_threads(tf.config.threading.get_intra_op_parallelism_threads() or 2)
        ta = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                     torch.from_numpy(a.indices.astype(np.int64)),
                                     torch.from_numpy(a.data), size=(n, n))
        if backward:
            tx = torch.from_numpy(xn).requires_grad_()
            tg = torch.from_numpy(upstream.numpy())

            def torch_step():
                tx.grad = None
                torch.sparse.mm(ta, tx).backward(tg)

            systems["torch.sparse.mm (CSR)"] = torch_step
        else:
            tx = torch.from_numpy(xn)
            systems["torch.sparse.mm (CSR)"] = lambda: torch.sparse.mm(ta, tx)
    return systems


def check(graph, x, systems):
    """Every system must compute the same A @ X before it is timed."""
    n = graph.num_vertices
    expected = sp.csr_matrix((graph.edge_data, (graph.dst, graph.src)), shape=(n, n)) @ x.numpy()
    for name, fn in systems.items():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        if hasattr(out, "numpy") and not isinstance(out, np.ndarray):
            out = out.detach().numpy() if hasattr(out, "detach") else out.numpy()
        if out is None:  # torch's backward step returns nothing
            continue
        err = np.max(np.abs(np.asarray(out) - expected)) / max(1.0, np.max(np.abs(expected)))
        if err > 1e-4:
            raise AssertionError(f"{name} disagrees with scipy: relative error {err:.2e}")


def run_case(label, graph, width, backward):
    rng = np.random.default_rng(0)
    graph = graph.with_edge_data(rng.random(graph.num_edges, dtype=np.float32))
    x = tf.constant(rng.standard_normal((graph.num_vertices, width), dtype=np.float32))
    systems, upstream = tf_systems(graph, x, backward)
    systems.update(peer_systems(graph, x, upstream, backward))
    check(graph, x, systems)
    e, n = graph.num_edges, graph.num_vertices
    gigabytes = (e * (4 + 4 + 4 * width) + 4 * n * width) * (2 if backward else 1) / 1e9
    times = {name: median_ms(fn, FLAGS.repeats) for name, fn in systems.items()}
    best_peer = min(t for name, t in times.items() if name not in NGRA)
    print(f"\n{label}: {n} vertices, {e} edges, d = {width}, {'forward + backward' if backward else 'forward'}")
    print(f"  {'system':34s} {'median ms':>10s} {'eff. GB/s':>10s} {'best peer / this':>17s}")
    for name, t in times.items():
        print(f"  {name:34s} {t:10.2f} {gigabytes / (t / 1e3):10.1f} {best_peer / t:16.2f}x")
    if not backward:
        floors = {name: median_ms(fn, FLAGS.repeats) for name, fn in floor_calls(graph, x).items()}
        print("  floors, not systems (what a call costs before any sum):")
        for name, t in floors.items():
            print(f"  {name:34s} {t:10.2f} {'':>10s} {'':>17s}")
    return times


def floor_calls(graph, x):
    """Calls that do part of A @ X's work, timed as the systems are: TensorFlow making a zeroed output of
    A @ X's shape (an eager op's dispatch, allocation and fill: every eager TF op returning that tensor pays
    it), and torch gathering one source row per output row with no arithmetic (memory traffic alone). Where
    the graph is sparse these bound what any call can reach."""
    shape = [graph.num_vertices, x.shape[1]]
    calls = {"tf.zeros (the output alone)": lambda: tf.raw_ops.Empty(shape=shape, dtype=x.dtype, init=True)}
    if FLAGS.torch:
        try:
            import torch  # noqa: PLC0415
        except ImportError:
            return calls
        rows = torch.from_numpy(np.random.default_rng(0).integers(0, graph.num_vertices, graph.num_vertices))
        tx = torch.from_numpy(x.numpy())
        calls["torch.index_select (rows alone)"] = lambda: torch.index_select(tx, 0, rows)
    return calls


def program_cases(width):
    """(template program, its operands, the same stage as EdgeCode) for each specialised program."""
    from ngra_tf.ops.edge_code import EdgeCode  # noqa: PLC0415

    rows = np.arange(width, dtype=np.int32)
    one, two, three = rows[None], np.stack([rows, rows + width]), np.stack([rows, rows + width, rows])

    def code(instructions, tables, value, constants=()):
        return EdgeCode(tuple(instructions), tuple(constants), tables, value)

    gate = lambda act: code([("load_src", 0, 0, -1), ("load_dst", 2, 0, -1), ("add", 0, 1, -1), (act, 2, 0, -1),
                             ("load_src", 1, 0, -1), ("mul", 3, 4, -1)], three, 5)
    return {
        "copy_src": ("s", code([("load_src", 0, 0, -1)], one, 0)),
        "src_mul_edge": ("sw", code([("load_src", 0, 0, -1), ("load_edge", 1, 0, -1), ("mul", 0, 1, -1)],
                                    np.stack([rows, np.zeros_like(rows)]), 2)),
        "src_add_dst": ("sd", code([("load_src", 0, 0, -1), ("load_dst", 0, 0, -1), ("add", 0, 1, -1)], one, 2)),
        "src_mul_dst": ("sd", code([("load_src", 0, 0, -1), ("load_dst", 0, 0, -1), ("mul", 0, 1, -1)], one, 2)),
        "gate_sigmoid": ("gd", gate("sigmoid")),
        "gate_tanh": ("gd", gate("tanh")),
        "gate_relu": ("gd", gate("relu")),
        "type_select": ("t", EdgeCode((("load_src_typed", 0, width, -1),), (), one, 0)),
    }


def run_programs(graph, width):
    """Each specialised program against its edge code, forward and forward + backward."""
    from ngra_tf.ops import edge_code as ec  # noqa: PLC0415

    rng = np.random.default_rng(0)
    n, e = graph.num_vertices, graph.num_edges
    x = tf.constant(rng.standard_normal((n, width), dtype=np.float32))
    gates = tf.constant(rng.standard_normal((n, 2, width), dtype=np.float32))
    typed = tf.constant(rng.standard_normal((n, 3, width), dtype=np.float32))
    weight = tf.constant(rng.random(e, dtype=np.float32))
    types = tf.constant(rng.integers(0, 3, e).astype(np.int32))
    adjacency = graph.adjacency
    print(f"\nSpecialised fused_gather programs against edge code: {n} vertices, {e} edges, d = {width} "
          f"(median ms of {FLAGS.repeats})")
    print("\nfwd+bwd: d x_src; fwd+both: d x_src and d x_dst, which a user's stage with trainable destination rows "
          "asks for (edge code gives both from one walk where the program has more than sums and products)")
    print("\n| program | template fwd | code fwd | code / template | template fwd+bwd | code fwd+bwd | "
          "code / template | template fwd+both | code fwd+both | code / template |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (kind, code) in program_cases(width).items():
        if kind == "s":
            template = dict(x_src=x)
            code_args = dict(x_src=x)
        elif kind == "sw":
            template = dict(x_src=x, edge_data=weight)
            code_args = dict(x_src=x, edge_data=weight[:, None])
        elif kind == "sd":
            template = dict(x_src=x, x_dst=x)
            code_args = dict(x_src=x, x_dst=x)
        elif kind == "gd":
            template = dict(x_src=gates, x_dst=x)
            code_args = dict(x_src=tf.reshape(gates, [n, 2 * width]), x_dst=x)
        else:
            template = dict(x_src=typed, edge_data=types)
            code_args = dict(x_src=tf.reshape(typed, [n, 3 * width]), edge_type=types)
        forwards = {"template": lambda **a: ngra_tf.ops.fused_gather(adjacency, program=name, **a),
                    "code": lambda **a: ec.edge_code_gather(adjacency, code, **a)}
        args = {"template": template, "code": code_args}
        times, results = _program_times(forwards, args, n, width, rng)
        for part, (want, got) in enumerate(zip(results["template"], results["code"])):  # output, then gradients
            want, got = want.numpy().reshape(n, -1), got.numpy().reshape(n, -1)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                       err_msg=f"{name}, {'output' if part == 0 else f'd operand {part - 1}'}")
        cells = []
        for passes in ("fwd", "src", "both"):
            if ("template", passes) in times:
                template_ms, code_ms = times["template", passes], times["code", passes]
                cells += [f"{template_ms:.1f}", f"{code_ms:.1f}", f"{code_ms / template_ms:.2f}x"]
            else:
                cells += ["-"] * 3
        print(f"| {name} | {' | '.join(cells)} |", flush=True)


def _program_times(forwards, args, n, width, rng):
    """({(system, passes): median ms}, {system: [output, *gradients]}): each system's forward(**args) alone
    ("fwd"), with d x_src ("src") and, where the program reads destination rows, with d x_src and d x_dst
    ("both"), all calls alternated round by round."""
    upstream = tf.constant(rng.standard_normal((n, width), dtype=np.float32))

    def with_gradients(forward, operands, names):
        @tf.function
        def call():
            with tf.GradientTape() as tape:
                tape.watch([operands[name] for name in names])
                out = tf.reshape(forward(**operands), [n, width])
            return out, tape.gradient(out, [operands[name] for name in names], output_gradients=upstream)

        return call

    calls, results = {}, {}
    for system, forward in forwards.items():
        operands = args[system]
        calls[system, "fwd"] = tf.function(lambda forward=forward, operands=operands: forward(**operands))
        calls[system, "src"] = with_gradients(forward, operands, ["x_src"])
        if "x_dst" in operands:
            calls[system, "both"] = with_gradients(forward, operands, ["x_src", "x_dst"])
        out, grads = calls[system, "both" if "x_dst" in operands else "src"]()
        results[system] = [out, *grads]
    return alternated_ms(calls, FLAGS.repeats), results


class _NoRetracingWarning(logging.Filter):
    """Drops TensorFlow's retracing warning: every case makes its tf.functions anew and traces each once, which
    TF counts as retracing one function (they share their code)."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


def main(argv):
    del argv
    tf.get_logger().addFilter(_NoRetracingWarning())
    if FLAGS.programs:
        run_programs(power_law_graph(FLAGS.reddit_vertices, FLAGS.reddit_edges, seed=0), FLAGS.width)
        return
    print(f"TensorFlow {tf.__version__}, intra-op threads: "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'}; "
          f"op library: {ngra_tf.ops.library_path()}")
    results = {}
    for density in FLAGS.densities:
        n = 10_000
        graph = uniform_graph(n, int(round(float(density) * n * n)), seed=0)
        label = f"A @ X, density {float(density) * 100:g}%"
        results[(label, "forward")] = run_case(label, graph, 128, backward=False)
    if FLAGS.reddit:
        graph = power_law_graph(FLAGS.reddit_vertices, FLAGS.reddit_edges, seed=0)
        for width in (128, 602):
            label = f"reddit-small-like, d = {width}"
            for backward in (False, True):
                results[(label, backward)] = run_case(label, graph, width, backward)
        fwd = {w: results[(f"reddit-small-like, d = {w}", False)]["ngra fused_gather"] for w in (128, 602)}
        both = {w: results[(f"reddit-small-like, d = {w}", True)]["ngra fused_gather"] for w in (128, 602)}
        for w in (128, 602):
            print(f"\nngra fused_gather, reddit-small-like d = {w}: forward + backward = "
                  f"{both[w] / fwd[w]:.2f}x forward")
    if FLAGS.plot:
        plot(results)


def plot(results):
    from plots import ratio_chart  # noqa: PLC0415  (tools/)

    keys = list(results)
    labels = [f"{label.replace('A @ X, ', '')}, {'fwd+bwd' if backward is True else 'fwd'}"
              for label, backward in keys]
    peers = {"tf.sparse.sparse_dense_matmul": "TF sparse_dense_matmul / ngra",
             "scipy CSR @ dense": "scipy CSR / ngra", "torch.sparse.mm (CSR)": "torch CSR / ngra"}
    series = {title: [results[k][name] / results[k]["ngra fused_gather"] if name in results[k] else None
                      for k in keys]
              for name, title in peers.items()}
    ratio_chart(FLAGS.plot, "Propagation A @ X: peers against ngra fused_gather (CPU)", labels,
                {title: values for title, values in series.items() if any(values)},
                note="tools/bench_kernels.py; > 1: ngra-tf is faster")


if __name__ == "__main__":
    app.run(main)
