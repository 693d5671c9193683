"""The six model layers (and the accumulators) against dense TensorFlow
formulas written from the papers' equations: outputs, and gradients with
respect to the inputs and every trainable weight.

Graphs: 12 vertices, 40 edges, with multi-edges, self loops, a vertex with
out-edges only and vertices with no edges at all (layer_checks.random_edges).
Everything runs in float64, so the tolerances are tight.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
import ngra_tf
from ngra_tf import layers

WIDTH = 5


def build(layer, x, graph, seed=2):
    """Builds the layer by calling it once, then randomises every weight (biases too)."""
    layer(x, graph=graph)
    lc.randomize_weights(layer, seed)
    return layer


# ---- GCN: h_v = act(sum over edges u->v of w_e h_u W + b) ----


def test_gcn_matches_dense_formula():
    edges = lc.random_edges(seed=0)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GCN(3, activation="tanh", dtype="float64"), x, edges.graph)
    A = edges.adjacency(weights=edges.data)  # multi-edges: their weights add up
    W, b = layer.dense.kernel, layer.dense.bias

    def reference(x):
        return tf.tanh(A @ x @ W + b)

    out = lc.check_against(layer, reference, x, edges.graph)
    # Vertices without in-edges get act(b) only.
    np.testing.assert_allclose(out.numpy()[0], np.tanh(b.numpy()), rtol=1e-12)
    np.testing.assert_allclose(out.numpy()[lc.ACTIVE:], np.tanh(np.tile(b.numpy(), (3, 1))), rtol=1e-12)


def test_gcn_with_float32_edge_data_and_float64_layer():
    edges = lc.random_edges(seed=1)
    graph = edges.graph.with_edge_data(edges.graph.edge_data.astype(np.float32))
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GCN(3, dtype="float64"), x, graph)
    A = tf.constant(edges.adjacency(weights=edges.data.astype(np.float32).astype(np.float64)))
    out = layer(x, graph=graph)
    assert out.dtype == tf.float64
    np.testing.assert_allclose(out.numpy(), (A @ x @ layer.dense.kernel + layer.dense.bias).numpy(), rtol=1e-9)


# ---- CommNet: h_v = act(h_v W_H + (sum over u->v of h_u) W_C + b) ----


def test_commnet_matches_dense_formula():
    edges = lc.random_edges(seed=2, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.CommNet(4, activation="tanh", dtype="float64"), x, edges.graph)
    A = edges.adjacency()  # counts: a repeated edge sends twice
    W_H, W_C, b = layer.self_dense.kernel, layer.dense.kernel, layer.dense.bias

    def reference(x):
        return tf.tanh(x @ W_H + A @ x @ W_C + b)

    lc.check_against(layer, reference, x, edges.graph)


# ---- Max-pooling GCN: h_v = act(max over u->v of relu(h_u W_pool + b_pool) W + b) ----


def test_maxpool_gcn_matches_dense_formula():
    edges = lc.random_edges(seed=3, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.MaxPoolGCN(3, pool_units=6, activation="tanh", dtype="float64"), x, edges.graph)
    assert layer.pool.kernel.shape == (WIDTH, 6)
    S, D = edges.src_incidence(), edges.dst_incidence()
    W_p, b_p, W, b = layer.pool.kernel, layer.pool.bias, layer.dense.kernel, layer.dense.bias

    def reference(x):
        messages = tf.nn.relu(S @ x @ W_p + b_p)  # [E, 6]
        per_vertex = tf.broadcast_to(messages[None], (edges.num_vertices,) + tuple(messages.shape))
        pooled = lc.masked_reduce(per_vertex, D > 0, "max")  # 0 where no in-edges
        return tf.tanh(pooled @ W + b)

    lc.check_against(layer, reference, x, edges.graph)


# ---- Gated GCN: h_v = act(sum over u->v of sigmoid(h_u W_H + h_v W_C) * h_u  W + b) ----


def test_gated_gcn_matches_dense_formula():
    edges = lc.random_edges(seed=4, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GatedGCN(3, activation="tanh", dtype="float64"), x, edges.graph)
    S, D = edges.src_incidence(), edges.dst_incidence()
    W_H, W_C = layer.gate_src.kernel, layer.gate_dst.kernel
    W, b = layer.dense.kernel, layer.dense.bias

    def reference(x):
        h_src, h_dst = S @ x, tf.transpose(D) @ x  # each edge's endpoints
        messages = tf.sigmoid(h_src @ W_H + h_dst @ W_C) * h_src
        return tf.tanh(D @ messages @ W + b)

    lc.check_against(layer, reference, x, edges.graph)


# ---- GG-NN: a_v = sum over u->v of h_u A[type]; h_v' = GRU(state h_v, input a_v) ----


def gru_step(cell, inputs, state):
    """Keras's GRUCell (gates z, r, h; sigmoid and tanh), written out."""
    u = cell.units
    K, R, bias = cell.kernel, cell.recurrent_kernel, cell.bias
    b_in, b_rec = (bias[0], bias[1]) if cell.reset_after else (bias, tf.zeros_like(bias))
    x_z, x_r, x_h = tf.split(inputs @ K + b_in, 3, axis=-1)
    if cell.reset_after:
        r_z, r_r, r_h = tf.split(state @ R + b_rec, 3, axis=-1)
        z, r = tf.sigmoid(x_z + r_z), tf.sigmoid(x_r + r_r)
        candidate = tf.tanh(x_h + r * r_h)
    else:
        z = tf.sigmoid(x_z + state @ R[:, :u])
        r = tf.sigmoid(x_r + state @ R[:, u:2 * u])
        candidate = tf.tanh(x_h + (r * state) @ R[:, 2 * u:])
    return z * state + (1 - z) * candidate


def test_ggnn_matches_dense_formula():
    edges = lc.random_edges(seed=5, data="types3")
    assert set(np.unique(edges.data)) == {0, 1, 2}
    units = 4
    x = lc.features(edges.num_vertices, units)
    layer = build(layers.GGNN(units, num_edge_types=3, dtype="float64"), x, edges.graph)
    A_t = [edges.adjacency(weights=(edges.data == t).astype(np.float64)) for t in range(3)]
    kernels = layer.edge_kernels

    def reference(x):
        accum = tf.add_n([A_t[t] @ x @ kernels[t] for t in range(3)])  # message_e = h_src @ A[type_e]
        return gru_step(layer.gru, accum, x)

    lc.check_against(layer, reference, x, edges.graph)
    assert {v.path.split("/")[-1] for v in layer.trainable_weights} == {
        "edge_kernels", "kernel", "recurrent_kernel", "bias"}


def test_ggnn_matches_an_independent_keras_gru_cell():
    """The same step through a separate GRUCell holding copies of the weights."""
    edges = lc.random_edges(seed=6, data="types3")
    x = lc.features(edges.num_vertices, 4)
    layer = build(layers.GGNN(4, num_edge_types=3, dtype="float64"), x, edges.graph)
    cell = keras.layers.GRUCell(4, dtype="float64", reset_after=layer.gru.reset_after)
    cell.build((None, 4))
    for mine, theirs in zip(cell.weights, layer.gru.weights):
        assert mine is not theirs
        mine.assign(tf.identity(theirs))
    accum = tf.add_n([edges.adjacency(weights=(edges.data == t).astype(np.float64)) @ x @ layer.edge_kernels[t]
                      for t in range(3)])
    want, _ = cell(accum, [x])
    np.testing.assert_allclose(layer(x, graph=edges.graph).numpy(), want.numpy(), rtol=1e-9, atol=1e-12)


# ---- GAT: alpha_e = softmax over in-edges of LeakyReLU(a_s . z_u + a_d . z_v); h_v = act(sum alpha z_u + b) ----


def gat_reference(layer, edges, dropped=None):
    """GAT as dense formulas over the edges in the user's order; `dropped` [E, H]: keras's dropout of ones,
    multiplying the attention weights."""
    S, D = edges.src_incidence(), edges.dst_incidence()
    heads, units = layer.heads, layer.units
    mask = (D > 0)[:, :, None]  # [N, E, 1]: which edges enter each vertex

    def reference(x):
        z = tf.reshape(x @ layer.kernel, [-1, heads, units])  # [N, H, U]
        z_src = tf.einsum("en,nhu->ehu", S, z)  # [E, H, U]
        score_src = tf.reduce_sum(z_src * layer.attention_src, -1)  # [E, H]
        score_dst = tf.reduce_sum(z * layer.attention_dst, -1)  # [N, H]
        scores = tf.nn.leaky_relu(score_dst[:, None, :] + score_src[None, :, :], layer.negative_slope)  # [N, E, H]
        alpha = lc.masked_softmax(scores, tf.broadcast_to(mask, scores.shape), axis=1)
        if dropped is not None:
            alpha = alpha * dropped[None]
        out = tf.einsum("neh,ehu->nhu", alpha, z_src)
        out = tf.reshape(out, [-1, heads * units]) if layer.concat_heads else tf.reduce_mean(out, axis=1)
        return layer.activation(out + layer.bias)

    return reference


@pytest.mark.parametrize("heads, concat", [(3, True), (2, False), (1, True)])
def test_gat_matches_dense_formula(heads, concat):
    edges = lc.random_edges(seed=7, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GAT(4, heads=heads, concat_heads=concat, activation="elu", dtype="float64"), x,
                  edges.graph)
    out = lc.check_against(layer, gat_reference(layer, edges), x, edges.graph)
    assert out.shape == (edges.num_vertices, heads * 4 if concat else 4)


def test_gat_attention_dropout_only_in_training():
    edges = lc.random_edges(seed=8, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GAT(4, heads=2, attention_dropout=0.5, dtype="float64"), x, edges.graph)
    want = gat_reference(layer, edges)(x).numpy()
    np.testing.assert_allclose(layer(x, graph=edges.graph, training=False).numpy(), want, rtol=1e-9, atol=1e-12)
    keras.utils.set_random_seed(0)
    dropped = layer(x, graph=edges.graph, training=True).numpy()
    assert not np.allclose(dropped, want)


def keras_dropout_of_ones(state, shape, rate, dtype):
    """What keras.random.dropout drops (scaled ones, 0 where dropped) with a generator in `state`."""
    generator = keras.random.SeedGenerator()
    generator.state.assign(state)
    return keras.random.dropout(tf.ones(shape, dtype), rate, seed=generator)


@pytest.mark.parametrize("chunks, rewrites", [(1, True), (3, True), (2, ["hoist"])], ids=["P1", "P3", "P2-unfused"])
def test_gat_attention_dropout_is_keras_dropout_of_the_weights(chunks, rewrites):
    """Training, the weights are dropped as keras.random.dropout drops the whole [edges, heads] tensor of them in
    the user's order with the layer's generator: the same whatever the chunking or the rewrites (fused or not);
    gradients too. Each training call moves the generator on by one draw."""
    edges = lc.random_edges(seed=8, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(layers.GAT(4, heads=3, attention_dropout=0.4, dtype="float64"), x, edges.graph)
    graph = edges.graph.partition(chunks)
    for step in range(2):  # two training calls: two different masks
        state = layer.attention_seed.state.numpy()
        dropped = keras_dropout_of_ones(state, [edges.num_edges, 3], 0.4, tf.float64)
        assert 0 < np.mean(dropped.numpy() == 0) < 1
        variables = layer.trainable_weights
        out, grads = lc.value_and_grads(lambda t: layer(t, graph=graph, rewrites=rewrites, training=True), x,
                                        variables)
        np.testing.assert_array_equal(layer.attention_seed.state.numpy(), state + [0, 1])
        want, want_grads = lc.value_and_grads(gat_reference(layer, edges, dropped), x, variables)
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-9, atol=1e-10)
        for name, got, expected in zip(["inputs"] + [v.path for v in variables], grads, want_grads):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-9, atol=1e-10, err_msg=name)
    if rewrites is True:
        assert "fused: yes, attention (online softmax)" in layer.explain()


def test_edge_dropout_arguments_are_checked():
    edges = lc.random_edges(seed=8, data=None)
    x = lc.features(edges.num_vertices, WIDTH)

    class Dropping(ngra_tf.SAGALayer):
        def __init__(self, rate, seed, **kwargs):
            super().__init__(**kwargs)
            self.rate, self.seed = rate, seed

        def apply_edge(self, edge):
            return edge.dropout(edge.src, self.rate, self.seed)

    with pytest.raises(ValueError, match=r"edge.dropout: rate must be a number in \[0, 1\), got 1.5"):
        Dropping(1.5, keras.random.SeedGenerator())(x, graph=edges.graph, training=True)
    with pytest.raises(TypeError, match="edge.dropout: seed must be a keras.random.SeedGenerator"):
        Dropping(0.5, 7)(x, graph=edges.graph, training=True)
    with pytest.raises(ValueError, match=r"attention_dropout must be in \[0, 1\), got 1"):
        layers.GAT(4, attention_dropout=1)


# ---- accumulators and the base class's defaults ----


class ScaledEdges(ngra_tf.SAGALayer):
    """message_e = w_e * h_src; new state = accum @ V."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        width = input_shape[-1] * len(self.accumulator.split("|"))
        self.v = self.add_weight(name="v", shape=(width, self.units))
        super().build(input_shape)

    def apply_edge(self, edge):
        return edge.src * edge.data[:, None]

    def apply_vertex(self, vertex, accum):
        return accum @ self.v


@pytest.mark.parametrize("accumulator", ["sum", "mean", "max", "min", "sum|max", "mean|min|max"])
def test_accumulators_match_dense_reductions(accumulator):
    edges = lc.random_edges(seed=9)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = build(ScaledEdges(3, accumulator=accumulator, dtype="float64"), x, edges.graph)
    S, D = edges.src_incidence(), edges.dst_incidence()
    weights = tf.constant(edges.data)[:, None]

    def reference(x):
        messages = S @ x * weights  # [E, F], distinct per edge even for repeated edges
        per_vertex = tf.broadcast_to(messages[None], (edges.num_vertices,) + tuple(messages.shape))
        parts = [lc.masked_reduce(per_vertex, D > 0, r) for r in accumulator.split("|")]
        return tf.concat(parts, axis=-1) @ layer.v

    out = lc.check_against(layer, reference, x, edges.graph)
    assert layer.v.shape == (WIDTH * len(accumulator.split("|")), 3)
    assert np.all(out.numpy()[lc.ACTIVE:] == 0) and np.all(out.numpy()[0] == 0)  # no in-edges: 0


@pytest.mark.parametrize("accumulator", ["sum", "mean", "max", "sum|min"])
def test_default_apply_edge_and_vertex(accumulator):
    """The base class alone: messages are the source rows, the new state is the accumulation."""
    edges = lc.random_edges(seed=10, data=None)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = ngra_tf.SAGALayer(accumulator=accumulator, dtype="float64")
    D, S = edges.dst_incidence(), edges.src_incidence()

    def reference(x):
        per_vertex = tf.broadcast_to((S @ x)[None], (edges.num_vertices, edges.num_edges, WIDTH))
        return tf.concat([lc.masked_reduce(per_vertex, D > 0, r) for r in accumulator.split("|")], -1)

    out, (grad,) = lc.value_and_grads(lambda t: layer(t, graph=edges.graph), x, [])
    want, (want_grad,) = lc.value_and_grads(reference, x, [])
    assert out.shape == (edges.num_vertices, WIDTH * len(accumulator.split("|")))
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-12, atol=1e-12)
    if accumulator == "sum":
        np.testing.assert_allclose(out.numpy(), (edges.adjacency() @ x).numpy(), rtol=1e-12)


def test_layers_inside_tf_function_match_eager():
    """Keras fit runs the layers in a tf.function: the same numbers come out."""
    edges = lc.random_edges(seed=11)
    x = lc.features(edges.num_vertices, WIDTH)
    for layer in (layers.GCN(3, dtype="float64"), layers.GAT(2, heads=2, dtype="float64"),
                  layers.MaxPoolGCN(3, dtype="float64"), layers.GatedGCN(3, dtype="float64")):
        eager = build(layer, x, edges.graph)(x, graph=edges.graph)
        traced = tf.function(lambda t, layer=layer: layer(t, graph=edges.graph))(x)
        np.testing.assert_allclose(traced.numpy(), eager.numpy(), rtol=1e-12, atol=1e-14)


def test_float64_reaches_sublayers():
    """dtype="float64" must reach the Dense/GRU sublayers: computing them in
    float32 lost precision silently (GCN, CommNet, ...) or crashed (GatedGCN)."""
    edges = lc.random_edges(seed=12, data="types3")
    float_graph = lc.random_edges(seed=12).graph
    x = lc.features(edges.num_vertices, 4)
    for layer, graph in ((layers.GCN(3, dtype="float64"), float_graph),
                         (layers.CommNet(3, dtype="float64"), float_graph),
                         (layers.MaxPoolGCN(3, dtype="float64"), float_graph),
                         (layers.GatedGCN(3, dtype="float64"), float_graph),
                         (layers.GGNN(4, 3, dtype="float64"), edges.graph)):
        out = layer(x, graph=graph)
        assert out.dtype == tf.float64, type(layer).__name__
        assert all(w.dtype == "float64" for w in layer.weights), [(w.path, w.dtype) for w in layer.weights]
