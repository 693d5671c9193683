"""GraphSAGE, GIN and GCNPropagate against dense TensorFlow formulas written
from PyTorch Geometric's definitions (SAGEConv, GINConv, APPNP's propagation):
outputs, and gradients with respect to the inputs and every trainable weight;
equality across chunk counts; configs, saving and argument checks.

The formulas run on layer_checks.random_edges (multi-edges, self loops, a
vertex with out-edges only, isolated vertices) in float64; the chunking
checks on the compiler tests' stress graph (a hub, empty chunks) in float32.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
import ngra_tf
from ngra_tf import layers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "compiler"))
import compiler_checks as cc  # noqa: E402  (the stress graph and its comparison)

WIDTH = 5


def build(layer, x, graph, seed=2):
    """Builds the layer by calling it once, then randomises every weight (biases too)."""
    layer(x, graph=graph)
    lc.randomize_weights(layer, seed)
    return layer


def mean_matrix(edges):
    """M [N, N] with M @ x the mean of each vertex's in-neighbour rows (multi-edges count), 0 without any."""
    counts = edges.adjacency()
    return counts / np.maximum(edges.in_degree(), 1)[:, None]


def l2_normalize(out):
    """F.normalize(out, p=2, dim=-1): out / max(||out||_2, 1e-12)."""
    return out / tf.maximum(tf.norm(out, axis=-1, keepdims=True), tf.constant(1e-12, out.dtype))


# ---- GraphSAGE: out_i = act(normalize(aggr_j(m_j) W_l + b + x_i W_r)) ----


def sage_reference(layer, edges):
    S, D = edges.src_incidence(), edges.dst_incidence()
    M = mean_matrix(edges)

    def reference(x):
        if layer.aggregator == "mean":
            aggregated = M @ x
        else:
            messages = tf.nn.relu(S @ x @ layer.project.kernel + layer.project.bias)  # [E, F]
            per_vertex = tf.broadcast_to(messages[None], (edges.num_vertices,) + tuple(messages.shape))
            aggregated = lc.masked_reduce(per_vertex, D > 0, "max")  # 0 without in-edges
        out = aggregated @ layer.dense.kernel + layer.dense.bias
        if layer.root_weight:
            out = out + x @ layer.root.kernel  # the unprojected x_i
        if layer.normalize:
            out = l2_normalize(out)
        return layer.activation(out)

    return reference


@pytest.mark.parametrize("aggregator", ["mean", "max"])
@pytest.mark.parametrize("root_weight, normalize", [(True, False), (False, True), (True, True)])
def test_graphsage_matches_dense_formula(aggregator, root_weight, normalize):
    edges = lc.random_edges(seed=30, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GraphSAGE(3, aggregator=aggregator, root_weight=root_weight, normalize=normalize,
                                   activation="tanh", dtype="float64"), x, edges.graph)
    expected = {"dense/kernel", "dense/bias"} | ({"root/kernel"} if root_weight else set()) \
        | ({"project/kernel", "project/bias"} if aggregator == "max" else set())
    assert {"/".join(w.path.split("/")[-2:]) for w in layer.trainable_weights} == expected
    if aggregator == "max":
        assert layer.project.kernel.shape == (WIDTH, WIDTH)  # square in the input width
    lc.check_against(layer, sage_reference(layer, edges), x, edges.graph)


def test_graphsage_without_in_neighbours_sees_zero():
    """Mean (and max) over no in-neighbours is 0: vertex 0 and the isolated ones get lin_l's bias plus the root."""
    edges = lc.random_edges(seed=31, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    alone = np.r_[0, np.arange(lc.ACTIVE, lc.NUM_VERTICES)]
    assert np.all(edges.in_degree()[alone] == 0)
    for aggregator in ("mean", "max"):
        layer = build(layers.GraphSAGE(4, aggregator=aggregator, dtype="float64"), x, edges.graph)
        out = layer(x, graph=edges.graph).numpy()
        want = layer.dense.bias.numpy() + x.numpy()[alone] @ layer.root.kernel.numpy()
        np.testing.assert_allclose(out[alone], want, rtol=1e-12, atol=1e-12)


def test_graphsage_normalize_of_a_zero_row_is_zero_with_finite_gradients():
    edges = lc.random_edges(seed=32, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GraphSAGE(3, root_weight=False, use_bias=False, normalize=True, dtype="float64"), x,
                  edges.graph)
    out, grads = lc.value_and_grads(lambda t: layer(t, graph=edges.graph), x, layer.trainable_weights)
    assert np.all(out.numpy()[lc.ACTIVE:] == 0)  # isolated: no messages, no root, no bias
    np.testing.assert_allclose(np.linalg.norm(out.numpy()[1:lc.ACTIVE], axis=-1), 1, rtol=1e-12)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)


# ---- GIN: out_i = act(MLP((1 + eps) x_i + sum_j x_j)) ----


def gin_reference(layer, edges):
    A = edges.adjacency()  # counts: a repeated edge sends twice

    def reference(x):
        eps = layer.eps_weight if layer.train_eps else layer.eps
        h = (1 + eps) * x + A @ x
        for i, dense in enumerate(layer.mlp):
            if i:
                h = tf.nn.relu(h)
            h = h @ dense.kernel + dense.bias
        return layer.activation(h)

    return reference


@pytest.mark.parametrize("train_eps, mlp_layers, hidden", [(True, 2, 7), (False, 2, None), (True, 1, None),
                                                           (False, 3, 2)])
def test_gin_matches_dense_formula(train_eps, mlp_layers, hidden):
    edges = lc.random_edges(seed=33, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GIN(3, hidden=hidden, eps=0.3, train_eps=train_eps, mlp_layers=mlp_layers,
                             activation="tanh", dtype="float64"), x, edges.graph)
    assert len(layer.mlp) == mlp_layers and layer.mlp[-1] is layer.dense
    widths = [w.kernel.shape[-1] for w in layer.mlp]
    assert widths == [hidden or 3] * (mlp_layers - 1) + [3]
    assert (layer.eps_weight is not None) == train_eps
    if train_eps:
        assert layer.eps_weight in layer.trainable_weights and layer.eps_weight.dtype == "float64"
    lc.check_against(layer, gin_reference(layer, edges), x, edges.graph)


def test_gin_eps_starts_at_its_argument():
    edges = lc.random_edges(seed=34, data=None)
    layer = layers.GIN(2, eps=-0.25, train_eps=True)
    layer(tf.zeros((edges.num_vertices, WIDTH)), graph=edges.graph)
    assert float(layer.eps_weight.numpy()) == -0.25


# ---- GCNPropagate: out = A_hat x, A_hat the edge weights ----


def test_gcn_propagate_matches_dense_formula():
    edges = lc.random_edges(seed=35)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = layers.GCNPropagate(dtype="float64")
    A = edges.adjacency(weights=edges.data)  # multi-edges: their weights add up
    out, (grad,) = lc.value_and_grads(lambda t: layer(t, graph=edges.graph), x, [])
    want, (want_grad,) = lc.value_and_grads(lambda t: A @ t, x, [])
    assert layer.weights == [] and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-12, atol=1e-12)


def test_gcn_propagate_needs_edge_data():
    graph = lc.random_edges(seed=36, data=None).graph
    with pytest.raises(ValueError, match="graph has no edge data"):
        layers.GCNPropagate()(tf.zeros((graph.num_vertices, WIDTH)), graph=graph)


def test_appnp_chain_matches_power_iteration():
    """APPNP as the functional chain the docstring shows: z <- (1 - alpha) A_hat z + alpha h, K times."""
    edges = lc.random_edges(seed=37)
    x = lc.features(edges.num_vertices, WIDTH)
    propagate, alpha = layers.GCNPropagate(dtype="float64"), 0.1
    keep = keras.layers.Rescaling(1 - alpha, dtype="float64")
    restart = keras.layers.Rescaling(alpha, dtype="float64")
    z = x
    for _ in range(4):
        z = keras.layers.Add(dtype="float64")([keep(propagate(z, graph=edges.graph)), restart(x)])
    # Rescaling makes its scale a float32 tensor before casting it to the layer's dtype.
    keep_scale, restart_scale = float(np.float32(1 - alpha)), float(np.float32(alpha))
    A, want = edges.adjacency(weights=edges.data), x
    for _ in range(4):
        want = keep_scale * A @ want + restart_scale * x
    np.testing.assert_allclose(z.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


# ---- all three: chunks, the compiler's report, configs, saving, mistakes ----


def new_layers():
    """(name, make, needs edge weights) for each new layer and option that changes its program."""
    return [
        ("sage-mean", lambda: layers.GraphSAGE(cc.HIDDEN, activation="relu"), False),
        ("sage-max-normalize", lambda: layers.GraphSAGE(cc.OUT, aggregator="max", normalize=True), False),
        ("gin", lambda: layers.GIN(cc.OUT, hidden=cc.HIDDEN, train_eps=True, eps=0.2), False),
        ("gin-wide", lambda: layers.GIN(cc.OUT, hidden=2 * cc.IN_WIDTH, mlp_layers=3), False),
        ("propagate", lambda: layers.GCNPropagate(), True),
    ]


def on_stress_graph(make, weighted):
    """The compiler tests' stress graph (with GCN weights if the layer reads them), its features, and the
    layer built on them with random weights."""
    graph = cc.graph_for("gcn" if weighted else "commnet")
    x = cc.features()
    return graph, x, build(make(), x, graph, seed=7)


@pytest.mark.parametrize("name, make, weighted", new_layers(), ids=[m[0] for m in new_layers()])
def test_outputs_and_gradients_do_not_depend_on_chunks_or_rewrites(name, make, weighted):
    graph, x, layer = on_stress_graph(make, weighted)
    want, want_grads = cc.value_and_grads([layer], graph.partition(1), x)
    for parts, rewrites in ((1, False), (3, True), (3, False)):
        out, grads = cc.value_and_grads([layer], graph.partition(parts), x, rewrites=rewrites)
        what = f"{name} P={parts} rewrites={rewrites}"
        cc.assert_close(out, want, what)
        assert set(grads) == set(want_grads)
        for variable, grad in grads.items():
            assert np.any(want_grads[variable] != 0), variable
            cc.assert_close(grad, want_grads[variable], f"{what}: d/d{variable}")


@pytest.mark.parametrize("make, lines", [
    (lambda: layers.GraphSAGE(3), ["fused: yes, fused_gather program copy_src",
                                   "hoisted to the vertex stage: MatMul:V", "narrowed: yes", "(5 -> 3 wide rows)"]),
    (lambda: layers.GraphSAGE(8), ["fused: yes, fused_gather program copy_src", "narrowed: no"]),
    (lambda: layers.GraphSAGE(3, aggregator="max"), [
        "hoisted to the vertex stage: MatMul:S, BiasAdd:S, Relu:S, MatMul:V", "0 ops per edge",
        "fused: yes, fused_gather program copy_src", "narrowed: no, accumulator max"]),
    (lambda: layers.GIN(3, hidden=4), ["fused: yes, fused_gather program copy_src", "MatMul:V",
                                       "narrowed: yes", "(5 -> 4 wide rows)"]),
    (lambda: layers.GIN(3, mlp_layers=1), ["fused: yes", "narrowed: yes", "(5 -> 3 wide rows)"]),
    (lambda: layers.GCNPropagate(), ["0 ops per edge", "fused: yes, fused_gather program src_mul_edge"]),
])
def test_what_the_compiler_makes_of_them(make, lines):
    """What the module docstrings say: every edge stage fuses; vertex-only work is hoisted; sum and mean
    narrow when the first matmul narrows."""
    edges = lc.random_edges(seed=38)
    layer = make()
    layer(tf.zeros((edges.num_vertices, WIDTH)), graph=edges.graph)
    text = layer.explain()
    for line in lines:
        assert line in text, text


@pytest.mark.parametrize("name, make, weighted", new_layers(), ids=[m[0] for m in new_layers()])
def test_config_round_trip(name, make, weighted):
    graph, x, layer = on_stress_graph(make, weighted)
    out = layer(x, graph=graph)
    assert keras.saving.get_registered_name(type(layer)) == f"ngra_tf>{type(layer).__name__}"
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is type(layer) and clone is not layer
    assert clone.get_config() == layer.get_config()
    clone(x, graph=graph)
    assert [w.path.split("/")[-2:] for w in clone.weights] == [w.path.split("/")[-2:] for w in layer.weights]
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x, graph=graph).numpy(), out.numpy(), rtol=1e-6, atol=1e-6)


def test_config_keeps_the_arguments():
    l2 = keras.regularizers.L2(0.01)
    cases = [
        (layers.GraphSAGE(7, aggregator="max", root_weight=False, normalize=True, activation="relu",
                          use_bias=False, kernel_regularizer=l2),
         dict(units=7, aggregator="max", root_weight=False, normalize=True, use_bias=False)),
        (layers.GIN(5, hidden=9, eps=0.5, train_eps=True, mlp_layers=3, bias_initializer="ones"),
         dict(units=5, hidden=9, eps=0.5, train_eps=True, mlp_layers=3)),
        (layers.GCNPropagate(), dict(accumulator="sum")),
    ]
    for layer, expected in cases:
        config = layer.get_config()
        clone = type(layer).from_config(config)
        for key, value in expected.items():
            assert config[key] == value and clone.get_config()[key] == value, (type(layer).__name__, key)
    assert "accumulator" not in cases[0][0].get_config()  # the aggregator says it
    sage = layers.GraphSAGE.from_config(cases[0][0].get_config())
    assert sage.activation is keras.activations.relu and sage.root is None
    assert isinstance(sage.dense.kernel_regularizer, keras.regularizers.L2)
    gin = layers.GIN.from_config(cases[1][0].get_config())
    # The hidden layers take the layer's initialisers and use_bias too.
    assert all(isinstance(d.bias_initializer, keras.initializers.Ones) for d in gin.mlp)
    assert not any(d.use_bias for d in layers.GIN(3, use_bias=False).mlp)


def test_saved_model_loads_with_the_new_layers(tmp_path):
    graph = cc.graph_for("gcn")  # GCN weights for GCNPropagate; GraphSAGE and GIN ignore edge data
    x = cc.features()
    model = ngra_tf.GraphModel(graph, [layers.GraphSAGE(6, aggregator="max", activation="relu"),
                                       layers.GIN(5, hidden=4, train_eps=True), layers.GCNPropagate(),
                                       layers.GraphSAGE(3, normalize=True)], chunks=2)
    model.build(x.shape)
    for layer in model.graph_layers:
        lc.randomize_weights(layer)
    want = model.predict(x, verbose=0)
    model.save(tmp_path / "new.keras")
    loaded = keras.models.load_model(tmp_path / "new.keras")
    assert [type(l).__name__ for l in loaded.graph_layers] == ["GraphSAGE", "GIN", "GCNPropagate", "GraphSAGE"]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), want)


@pytest.mark.parametrize("make, match", [
    (lambda: layers.GraphSAGE(4, aggregator="sum"), "aggregator must be one of 'mean', 'max', got 'sum'"),
    (lambda: layers.GraphSAGE(4, aggregator="lstm"), "aggregator"),
    (lambda: layers.GraphSAGE(4, accumulator="max"), "aggregator="),
    (lambda: layers.GraphSAGE(0), "units must be a positive integer"),
    (lambda: layers.GraphSAGE(2.5), "units must be a positive integer"),
    (lambda: layers.GIN(0), "units must be a positive integer"),
    (lambda: layers.GIN(-3), "units must be a positive integer"),
    (lambda: layers.GIN(4, hidden=0), "hidden must be a positive integer"),
    (lambda: layers.GIN(4, mlp_layers=0), "mlp_layers must be a positive integer"),
    (lambda: layers.GIN(4, mlp_layers=1.5), "mlp_layers must be a positive integer"),
    (lambda: layers.GIN(4, hidden=8, mlp_layers=1), "hidden .* needs mlp_layers >= 2"),
    (lambda: layers.GIN(4, eps=float("nan")), "eps must be a finite number"),
    (lambda: layers.GCNPropagate(accumulator="avg"), "accumulator"),
])
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_rgcn_matches_dense_formula_at_every_chunk_count():
    """out = x W_root + b + sum_r mean_{u -> v of relation r} x_u W_r (PyG's RGCNConv, aggr="mean"), fused as edge
    code, equal at P = 1 and 4 and to the unfused path; gradients too."""
    src, dst = cc.stress_edges()
    relations = np.random.default_rng(3).integers(0, 3, len(src))
    plain = ngra_tf.Graph.from_edges(src, dst, cc.NUM_VERTICES)
    graph = plain.with_edge_data(layers.relational_edge_data(plain, relations))
    x = tf.constant(np.random.default_rng(4).normal(size=(cc.NUM_VERTICES, WIDTH)).astype(np.float32))
    layer = build(layers.RGCN(4, num_relations=3), x, graph)
    want = x.numpy() @ layer.dense.kernel.numpy() + layer.dense.bias.numpy()
    kernels = layer.relation_kernels.numpy()
    for r in range(3):
        mask = relations == r
        counts = np.zeros((cc.NUM_VERTICES, cc.NUM_VERTICES))
        np.add.at(counts, (dst[mask], src[mask]), 1.0)
        want += counts / np.maximum(counts.sum(1), 1)[:, None] @ (x.numpy() @ kernels[r])
    assert "fused: yes, edge code: (S[type]0 * E1)" in "\n".join(layer.compiled(x, graph).describe())
    reference_out, reference_grads = cc.value_and_grads([layer], graph.partition(1), x, rewrites=["hoist"])
    cc.assert_close(reference_out, want, "unfused against the formula")
    for parts in (1, 4):
        out, grads = cc.value_and_grads([layer], graph.partition(parts), x)
        cc.assert_close(out, want, f"P={parts}")
        for name, grad in grads.items():
            cc.assert_close(grad, reference_grads[name], f"P={parts} d/d{name}")


def test_rgcn_edge_data_checks_its_relations():
    graph = ngra_tf.Graph.from_edges([0, 1, 1], [1, 0, 0], 2)
    np.testing.assert_allclose(layers.relational_edge_data(graph, np.array([0, 1, 1])),
                               [[0, 1.0], [1, 0.5], [1, 0.5]])
    with pytest.raises(ValueError, match="one integer per edge"):
        layers.relational_edge_data(graph, np.array([0.5, 1, 1]))
    with pytest.raises(ValueError, match=">= 0"):
        layers.relational_edge_data(graph, np.array([0, -1, 1]))
