"""GCN feature propagation on Cora with ngra_tf.ops.fused_gather, verified against scipy.

Computes A_hat^K X, where A_hat = D^-1/2 (A + I) D^-1/2 on the symmetrised graph
and X are the row-normalised features: once on the whole graph, once on a 2-D
partition (per destination interval, a sum over source chunks). Exits non-zero
if either result is off by more than --tolerance.
"""

import sys
import time

import numpy as np
import scipy.sparse as sp
from absl import app, flags

import ngra_tf
from ngra_tf.graph import datasets

FLAGS = flags.FLAGS
flags.DEFINE_string("data", None, "Cora .npz file (default: the copy shipped with ngra_tf).")
flags.DEFINE_integer("hops", 2, "Number of propagation steps K.", lower_bound=1)
flags.DEFINE_integer("parts", 4, "Vertex intervals P of the partitioned run (P x P chunks).", lower_bound=1)
flags.DEFINE_integer("repeats", 5, "Timing runs; the median is printed.", lower_bound=1)
flags.DEFINE_float("tolerance", 1e-4, "Largest accepted max-abs error against scipy.")


def median_seconds(fn):
    fn()  # warm-up
    times = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def propagate_whole(graph, weights, x):
    for _ in range(FLAGS.hops):
        x = ngra_tf.ops.fused_gather(graph, x, program="src_mul_edge", edge_data=weights)
    return np.asarray(x)


def propagate_scipy(a_hat, x):
    for _ in range(FLAGS.hops):
        x = a_hat @ x
    return x


def propagate_partitioned(partition, x):
    P = partition.num_parts
    for _ in range(FLAGS.hops):
        blocks = partition.split(x)
        # Chunks carry the graph's edge data (the GCN weights) for their edges.
        x = partition.merge([sum(ngra_tf.ops.fused_gather(partition.chunk(i, j), blocks[i], program="src_mul_edge")
                                 for i in range(P)).numpy() for j in range(P)])
    return x


def verify(name, result, expected):
    error = float(np.max(np.abs(result - expected)))
    ok = error <= FLAGS.tolerance
    print(f"{name}: max abs error {error:.3g} vs scipy -> {'verified' if ok else 'FAILED'}")
    return ok


def main(argv):
    del argv
    cora = datasets.cora(FLAGS.data)
    graph = cora.graph.symmetrize().add_self_loops()
    weights = graph.gcn_norm()
    graph = graph.with_edge_data(weights)
    features = cora.features.toarray()
    x = features / np.maximum(features.sum(axis=1, keepdims=True), 1.0)
    print(f"Cora: {graph.num_vertices} vertices, {graph.num_edges} edges (symmetrised, self loops), "
          f"{x.shape[1]} features, {FLAGS.hops} hops")

    # A_hat[v, u] = weight of the edge u -> v (the symmetrised graph has no duplicates).
    n = graph.num_vertices
    a_hat = sp.csr_matrix((weights, (graph.dst, graph.src)), shape=(n, n))
    expected = propagate_scipy(a_hat.astype(np.float64), x.astype(np.float64))

    ok = verify("whole graph", propagate_whole(graph, weights, x), expected)
    partition = graph.partition(FLAGS.parts)
    balance = partition.balance()
    print(f"partition: {FLAGS.parts} x {FLAGS.parts} chunks, edge imbalance (max/mean) "
          f"{balance['before']:.2f} -> {balance['after']:.2f} after re-encoding")
    ok &= verify(f"partitioned (P={FLAGS.parts})", propagate_partitioned(partition, x), expected)

    t_fused = median_seconds(lambda: propagate_whole(graph, weights, x))
    t_scipy = median_seconds(lambda: propagate_scipy(a_hat, x))  # float32, like fused_gather
    print(f"timing (median of {FLAGS.repeats}, {FLAGS.hops} hops, information only): "
          f"fused_gather {t_fused * 1e3:.1f} ms, scipy {t_scipy * 1e3:.1f} ms")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
