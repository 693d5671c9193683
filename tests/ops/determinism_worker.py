"""Runs every program x reduce (forward and gradients), scatter and gather on a
graph big enough to be split into many blocks, with a given intra-op thread
count, and saves each result as <out>/<name>.npy. With REPEATS=2 it runs all
twice and saves the second run with the suffix ".again".

Usage: python determinism_worker.py THREADS OUT_DIR REPEATS
"""

import os
import sys

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
# The comparison across thread counts means nothing unless the count took.
assert tf.config.threading.get_intra_op_parallelism_threads() == int(sys.argv[1])

import ngra_tf  # noqa: E402  (after the thread count is fixed)
from ngra_tf.ops import PROGRAMS, REDUCES, fused_gather, gather, scatter  # noqa: E402
from ngra_tf.ops import edge_code  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from generated_cases import attention, gate  # noqa: E402  (tools/ is not a package)

NUM_VERTICES, NUM_EDGES, NUM_TYPES = 9_000, 180_000, 3
FEATURES = (4, 8)  # 4 heads of 8: 32 features


def inputs(program, rng, graph):
    spec = PROGRAMS[program]
    slots = {0: (), 2: (2,), None: (NUM_TYPES,)}[spec.src_slots]
    args = {"x_src": rng.normal(size=(NUM_VERTICES,) + slots + FEATURES).astype(np.float32)}
    if spec.uses_dst:
        args["x_dst"] = rng.normal(size=(NUM_VERTICES,) + FEATURES).astype(np.float32)
    if spec.uses_weight:
        args["edge_data"] = rng.normal(size=(graph.num_edges, FEATURES[0])).astype(np.float32)  # per head
    return {k: tf.constant(v) for k, v in args.items()}


def results(graph):
    rng = np.random.default_rng(1)
    upstream = tf.constant(rng.normal(size=(NUM_VERTICES,) + FEATURES).astype(np.float32))
    types = rng.integers(0, NUM_TYPES, graph.num_edges).astype(np.int32)
    out = {}
    for program in PROGRAMS:
        args = inputs(program, rng, graph)
        fixed = {"edge_data": types} if program == "type_select" else {}
        for reduce in REDUCES:
            with tf.GradientTape() as tape:
                tape.watch(list(args.values()))
                y = fused_gather(graph, program=program, reduce=reduce, **args, **fixed)
                loss = tf.reduce_sum(y * upstream)
            out[f"{program}-{reduce}"] = y
            gradient(out, f"{program}-{reduce}", tape, loss, args)
    x = tf.constant(rng.normal(size=(NUM_VERTICES,) + FEATURES).astype(np.float32))
    edges = tf.constant(rng.normal(size=(graph.num_edges,) + FEATURES).astype(np.float32))
    for reduce in REDUCES:
        with tf.GradientTape() as tape:
            tape.watch([x, edges])
            y = gather(graph, edges, reduce) + gather(graph, scatter(graph, x), reduce)
            loss = tf.reduce_sum(y * upstream)
        out[f"gather-{reduce}"] = y
        gradient(out, f"gather-{reduce}", tape, loss, {"x": x, "edges": edges})
    # Edge code: a gate, whose one gradient walk over sources adds its 32-wide destination terms per block of
    # sources (4 MiB of terms is 32K edges, a sixth of these), and GAT's attention.
    for name, code, reduce, widths in (("gate", gate(32), "sum", (64, 32)),
                                       ("attention", attention(32, heads=4), "softmax", (36, 4))):
        x_src, x_dst = (tf.constant(rng.normal(size=(NUM_VERTICES, w)).astype(np.float32)) for w in widths)
        y = edge_code.edge_code_gather(graph.adjacency, code, x_src, x_dst, reduce=reduce)
        upstream = tf.constant(rng.normal(size=y.shape).astype(np.float32))
        grads = edge_code.edge_code_grads(graph.adjacency, code, upstream, x_src, x_dst, reduce=reduce,
                                          state=y if reduce == "softmax" else None, src_and_dst=True)
        out[f"code-{name}"] = y
        out[f"code-{name}-d_x_src"], out[f"code-{name}-d_x_dst"] = grads[:2]
    return out


def gradient(out, prefix, tape, loss, args):
    """Saves d loss / d args as out[prefix-d_name]; a failure is saved as its message."""
    try:
        grads = tape.gradient(loss, list(args.values()))
    except tf.errors.InvalidArgumentError as error:
        out[f"{prefix}-error"] = np.array(error.message.split("\n")[0])
        return
    for name, grad in zip(args, grads):
        out[f"{prefix}-d_{name}"] = grad


def main():
    rng = np.random.default_rng(0)
    # (E + 1) * F = 5.8M: the kernels cut 4 segment blocks per thread (they need 32K
    # each). (Cutting the gathered rows into cache blocks needs 16 edges per segment
    # and block, far more than degree 20: test_propagation's blocked shapes test that.)
    # Skewed degrees (so blocks hold unequal vertex counts), isolated vertices,
    # multi-edges and self loops.
    src = (rng.pareto(1.5, NUM_EDGES) * 50).astype(np.int64) % (NUM_VERTICES - 100)
    dst = rng.integers(0, NUM_VERTICES - 100, NUM_EDGES)
    dst[:1000] = src[:1000]
    graph = ngra_tf.Graph.from_edges(src, dst, NUM_VERTICES)
    out_dir, repeats = sys.argv[2], int(sys.argv[3])
    for suffix in ["", ".again"][:repeats]:
        for name, value in results(graph).items():
            np.save(os.path.join(out_dir, name + suffix + ".npy"), np.asarray(value))
    print("saved", len(os.listdir(out_dir)))


if __name__ == "__main__":
    main()
