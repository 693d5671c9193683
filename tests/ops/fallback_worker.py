"""Run with NGRA_TF_OPS_LIBRARY pointing at a missing file: the package must
warn once (RuntimeWarning) and still compute every op with the pure-TF
references. Exits non-zero on any mismatch; prints what it checked."""

import warnings

warnings.simplefilter("always")  # so a second warning would be seen, not deduplicated

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ngra_tf  # noqa: E402
    from ngra_tf.ops import PROGRAMS, REDUCES, copy_h2d, copy_stats, fused_gather, gather, scatter  # noqa: E402
    from ngra_testlib import make_adjacency, oracle_fused_gather, oracle_reduce, program_inputs  # noqa: E402

    assert ngra_tf.ops.library() is None and ngra_tf.ops.library_path() is None
    rng = np.random.default_rng(0)
    checked = 0
    for kind in ("random", "rect", "no_edges"):
        adjacency = make_adjacency(kind, rng)
        for program in PROGRAMS:
            inputs = program_inputs(program, adjacency, rng)
            for reduce in REDUCES:
                got = fused_gather(adjacency, *inputs, program=program, reduce=reduce).numpy()
                np.testing.assert_allclose(got, oracle_fused_gather(program, reduce, adjacency, *inputs), rtol=1e-12)
                checked += 1
        values = rng.normal(size=(adjacency.num_edges, 3))
        for reduce in REDUCES:
            np.testing.assert_allclose(gather(adjacency, values, reduce).numpy(),
                                       oracle_reduce(values, adjacency, reduce), rtol=1e-12)
            checked += 1
        init = rng.normal(size=(adjacency.num_dst, 3))
        for reduce in ("sum", "max", "min"):  # from an initial accumulator
            np.testing.assert_allclose(gather(adjacency, values, reduce, init=init).numpy(),
                                       oracle_reduce(values, adjacency, reduce, init), rtol=1e-12)
            inputs = program_inputs("src_mul_edge", adjacency, rng, features=(3,))
            np.testing.assert_allclose(
                fused_gather(adjacency, *inputs, program="src_mul_edge", reduce=reduce, init=init).numpy(),
                oracle_fused_gather("src_mul_edge", reduce, adjacency, *inputs, init=init), rtol=1e-12)
            checked += 2
        x = rng.normal(size=(adjacency.num_src, 2, 2))
        np.testing.assert_array_equal(scatter(adjacency, x).numpy(), x[adjacency.csc_src])
        checked += 1
        # Gradients come from autodiff of the references: d sum(out) / dx = out-degree.
        xt = tf.constant(rng.normal(size=(adjacency.num_src, 2)))
        with tf.GradientTape() as tape:
            tape.watch(xt)
            total = tf.reduce_sum(fused_gather(adjacency, xt))
        np.testing.assert_array_equal(tape.gradient(total, xt).numpy(),
                                      np.repeat(adjacency.out_degree()[:, None], 2, axis=1))
        checked += 1
    # A Graph's edge tensors are in the order its edges were given (not CSC here).
    src, dst = np.array([2, 0, 1, 2, 0]), np.array([0, 2, 0, 1, 2])
    graph = ngra_tf.Graph.from_edges(src, dst, 3)
    x = rng.normal(size=(3, 2))
    np.testing.assert_array_equal(scatter(graph, x).numpy(), x[src])
    values = rng.normal(size=(5, 2))
    expected = np.zeros((3, 2))
    np.add.at(expected, dst, values)
    np.testing.assert_allclose(gather(graph, values).numpy(), expected, rtol=1e-12)
    weights = rng.normal(size=5)
    expected = np.zeros((3, 2))
    np.add.at(expected, dst, x[src] * weights[:, None])
    np.testing.assert_allclose(fused_gather(graph, x, edge_data=weights, program="src_mul_edge").numpy(), expected,
                               rtol=1e-12)
    checked += 3
    # Copies degrade to identities with no counters.
    np.testing.assert_array_equal(copy_h2d(tf.ones([3])).numpy(), 1)
    assert copy_stats(reset=True) == {}

runtime = [w for w in caught if issubclass(w.category, RuntimeWarning) and "ngra_tf" in str(w.message)]
assert len(runtime) == 1, [str(w.message) for w in caught]
assert "could not be loaded" in str(runtime[0].message)
print(f"warnings={len(runtime)} checked={checked}")
