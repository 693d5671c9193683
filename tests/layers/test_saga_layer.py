"""SAGALayer as users meet it: custom subclasses, output shapes, configs,
mistakes, and edge_softmax."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
from traced import traced_ops
import ngra_tf
from ngra_tf import layers
from ngra_tf.ops.softmax import edge_softmax

WIDTH = 5


# ---- a custom layer written as documented ----


class MyConv(ngra_tf.SAGALayer):
    """The example of saga.py's docstring."""

    accumulator = "sum"

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 16))

    def apply_edge(self, edge):
        return edge.src * edge.data[:, None]

    def apply_vertex(self, vertex, accum):
        return tf.nn.relu(accum @ self.w)


class Attend(ngra_tf.SAGALayer):
    """Uses every part of EdgeView: src, dst, data, softmax, num_edges."""

    accumulator = "sum|max"

    def build(self, input_shape):
        width = input_shape[-1]
        self.q = self.add_weight(name="q", shape=(width, width))
        self.out = self.add_weight(name="out", shape=(2 * width + width, 3))

    def apply_edge(self, edge):
        assert edge.src.shape[1:] == edge.dst.shape[1:]  # rows: a chunk's edges, so not known when traced
        scores = tf.reduce_sum((edge.dst @ self.q) * edge.src, -1) + edge.data
        return edge.softmax(scores)[:, None] * edge.src

    def apply_vertex(self, vertex, accum):
        return tf.concat([accum, vertex], -1) @ self.out


def test_docstring_example_layer():
    edges = lc.random_edges(seed=20)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = MyConv(dtype="float64")
    out = layer(x, graph=edges.graph)
    assert out.shape == (edges.num_vertices, 16) and layer.w.shape == (WIDTH, 16)
    lc.randomize_weights(layer)
    A = edges.adjacency(weights=edges.data)
    lc.check_against(layer, lambda t: tf.nn.relu(A @ t @ layer.w), x, edges.graph)


def test_custom_layer_using_src_dst_data_and_softmax():
    edges = lc.random_edges(seed=21)
    x = lc.features(edges.num_vertices, WIDTH)
    layer = Attend(dtype="float64")
    layer(x, graph=edges.graph)
    lc.randomize_weights(layer)
    S, D = edges.src_incidence(), edges.dst_incidence()
    data = tf.constant(edges.data)

    def reference(x):
        h_src, h_dst = S @ x, tf.transpose(D) @ x
        scores = tf.reduce_sum((h_dst @ layer.q) * h_src, -1) + data  # [E]
        alpha = lc.masked_softmax(tf.broadcast_to(scores[None], D.shape), D > 0, axis=1)  # [N, E]
        messages = tf.broadcast_to(h_src[None], (edges.num_vertices, edges.num_edges, WIDTH)) * alpha[:, :, None]
        accum = tf.concat([lc.masked_reduce(messages, D > 0, "sum"), lc.masked_reduce(messages, D > 0, "max")], -1)
        return tf.concat([accum, x], -1) @ layer.out

    lc.check_against(layer, reference, x, edges.graph)


def test_accumulator_from_class_attribute_and_constructor():
    assert MyConv().accumulator == "sum"
    assert MyConv(accumulator="max").accumulator == "max"
    assert MyConv.accumulator == "sum"  # the constructor does not touch the class
    assert ngra_tf.SAGALayer(accumulator=" sum | max ")._reduces == ("sum", "max")


def traced_op_names(layer, graph, width, **options):
    """Op names of the traced layer, with those of the functions it runs, each starting with "/"."""
    return ["/" + op.name for op in traced_ops(lambda x: layer(x, graph=graph, **options),
                                               tf.TensorSpec((graph.num_vertices, width)))]


def test_name_scopes_of_the_four_stages_in_a_traced_graph():
    edges = lc.random_edges(seed=22)
    layer = layers.GatedGCN(3)
    ops = traced_op_names(layer, edges.graph, 4, rewrites=False)  # unfused: the four stages as written
    for stage in ("Scatter", "ApplyEdge", "Gather", "ApplyVertex"):
        assert any(f"/{stage}/" in name for name in ops), (stage, ops)
    assert any("Scatter/NgraScatter" in name for name in ops) and any("Gather/NgraGather" in name for name in ops)
    ops = traced_op_names(layer, edges.graph, 4)  # rewritten: gates hoisted, the edge stage fused
    assert any("/ApplyEdge/Hoisted/" in name and name.endswith("MatMul") for name in ops), ops
    assert any("/FusedGather/NgraFusedGather" in name for name in ops)
    assert not any("NgraScatter" in name for name in ops)


# ---- compute_output_shape ----


def all_models():
    """(layer factory, graph, input width) for every model and a custom layer."""
    float_graph = lc.random_edges(seed=23).graph
    typed_graph = lc.random_edges(seed=23, data="types3").graph
    plain_graph = lc.random_edges(seed=23, data=None).graph
    return [
        ("gcn", lambda: layers.GCN(3), float_graph, WIDTH),
        ("commnet", lambda: layers.CommNet(4), plain_graph, WIDTH),
        ("mpgcn", lambda: layers.MaxPoolGCN(3, pool_units=7), plain_graph, WIDTH),
        ("ggcn", lambda: layers.GatedGCN(2), plain_graph, WIDTH),
        ("ggnn", lambda: layers.GGNN(4, num_edge_types=3), typed_graph, 4),
        ("gat-concat", lambda: layers.GAT(3, heads=4), plain_graph, WIDTH),
        ("gat-mean", lambda: layers.GAT(3, heads=4, concat_heads=False), plain_graph, WIDTH),
        ("custom", lambda: MyConv(), float_graph, WIDTH),
        ("custom-attend", lambda: Attend(), float_graph, WIDTH),
        ("base", lambda: ngra_tf.SAGALayer(accumulator="max|mean|sum"), plain_graph, WIDTH),
    ]


@pytest.mark.parametrize("name, make, graph, width", all_models(), ids=[m[0] for m in all_models()])
def test_compute_output_shape_matches_the_output(name, make, graph, width):
    n = graph.num_vertices
    fresh = make()
    predicted_unbuilt = tuple(fresh.compute_output_shape((n, width)))  # before any real call
    layer = make()
    out = layer(tf.zeros((n, width)), graph=graph)
    assert predicted_unbuilt == tuple(out.shape), name
    assert tuple(layer.compute_output_shape((n, width))) == tuple(out.shape)
    assert tuple(layer.compute_output_shape((None, width))) == (None,) + tuple(out.shape[1:])
    # The probe leaves the real graph's results alone.
    np.testing.assert_array_equal(layer(tf.zeros((n, width)), graph=graph).numpy(), out.numpy())


def test_compute_output_shape_with_vector_edge_data():
    """The probe graph copies the edge-data shape of the last real graph."""

    class PerFeature(ngra_tf.SAGALayer):
        def apply_edge(self, edge):
            return edge.src * edge.data  # edge data [E, F]

    rng = np.random.default_rng(0)
    edges = lc.random_edges(seed=24, data=None)
    graph = edges.graph.with_edge_data(rng.normal(size=(edges.num_edges, WIDTH)).astype(np.float32))
    layer = PerFeature()
    out = layer(tf.ones((edges.num_vertices, WIDTH)), graph=graph)
    assert tuple(layer.compute_output_shape((edges.num_vertices, WIDTH))) == tuple(out.shape)


# ---- configs ----


@pytest.mark.parametrize("name, make, graph, width", all_models()[:7], ids=[m[0] for m in all_models()[:7]])
def test_config_round_trip(name, make, graph, width):
    layer = make()
    x = tf.constant(np.random.default_rng(0).normal(size=(graph.num_vertices, width)), tf.float32)
    out = layer(x, graph=graph)
    lc.randomize_weights(layer)
    out = layer(x, graph=graph)
    registered = keras.saving.get_registered_name(type(layer))
    assert registered == f"ngra_tf>{type(layer).__name__}"
    serialized = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(serialized)
    assert type(clone) is type(layer) and clone is not layer
    assert clone.get_config() == layer.get_config()
    clone_direct = type(layer).from_config(layer.get_config())
    assert clone_direct.get_config() == layer.get_config()
    clone(x, graph=graph)
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x, graph=graph).numpy(), out.numpy(), rtol=1e-6, atol=1e-6)


def test_config_keeps_the_arguments():
    l2 = keras.regularizers.L2(0.01)
    cases = [
        (layers.GCN(7, activation="relu", use_bias=False, kernel_regularizer=l2),
         dict(units=7, use_bias=False, accumulator="sum")),
        (layers.MaxPoolGCN(3, pool_units=9, pool_activation="tanh", accumulator="max|mean"),
         dict(units=3, pool_units=9, accumulator="max|mean")),
        (layers.GGNN(6, num_edge_types=4), dict(units=6, num_edge_types=4)),
        (layers.GAT(5, heads=3, concat_heads=False, attention_dropout=0.25, negative_slope=0.1),
         dict(units=5, heads=3, concat_heads=False, attention_dropout=0.25, negative_slope=0.1)),
    ]
    for layer, expected in cases:
        config = layer.get_config()
        for key, value in expected.items():
            assert config[key] == value, (type(layer).__name__, key)
        clone = type(layer).from_config(config)
        for key, value in expected.items():
            assert clone.get_config()[key] == value
    gcn = layers.GCN.from_config(cases[0][0].get_config())
    assert gcn.activation is keras.activations.relu
    assert isinstance(gcn.dense.kernel_regularizer, keras.regularizers.L2)
    assert layers.MaxPoolGCN.from_config(cases[1][0].get_config()).pool_activation is keras.activations.tanh
    assert layers.GCN.from_config(layers.GCN(2, dtype="float64").get_config()).dtype_policy.name == "float64"


# ---- mistakes ----


def test_call_without_graph():
    with pytest.raises(ValueError, match="graph"):
        layers.GCN(2)(tf.zeros((4, 3)))


def test_rows_must_match_the_graph():
    graph = lc.random_edges(seed=25).graph
    with pytest.raises(ValueError, match=r"13 rows but the graph has 12 vertices"):
        layers.GCN(2)(tf.zeros((13, 3)), graph=graph)


@pytest.mark.parametrize("accumulator, match", [("avg", "unknown part 'avg'"), ("sum|", "unknown part ''"),
                                                ("", "accumulator must be"), (3, "accumulator must be")])
def test_unknown_accumulator(accumulator, match):
    with pytest.raises(ValueError, match=match):
        ngra_tf.SAGALayer(accumulator=accumulator)
    with pytest.raises(ValueError, match="accumulator"):
        layers.GCN(2, accumulator=accumulator)


def test_unknown_accumulator_as_class_attribute():
    class Bad(ngra_tf.SAGALayer):
        accumulator = "median"

    with pytest.raises(ValueError, match="median"):
        Bad()


def test_ggnn_input_width_must_be_units():
    graph = lc.random_edges(seed=26, data="types3").graph
    with pytest.raises(ValueError, match=r"units=4.*5 wide"):
        layers.GGNN(4, num_edge_types=3)(tf.zeros((graph.num_vertices, 5)), graph=graph)


@pytest.mark.parametrize("make", [lambda: layers.GCN(0), lambda: layers.GCN(-2), lambda: layers.GCN(2.5),
                                  lambda: layers.CommNet(0), lambda: layers.MaxPoolGCN(0),
                                  lambda: layers.GatedGCN(-1), lambda: layers.GAT(0), lambda: layers.GAT(4, heads=0),
                                  lambda: layers.GGNN(0, 3), lambda: layers.GGNN(4, 0)])
def test_invalid_units(make):
    with pytest.raises(ValueError, match="positive"):
        make()


def test_edge_data_missing():
    graph = lc.random_edges(seed=27, data=None).graph
    with pytest.raises(ValueError, match="graph has no edge data"):
        layers.GCN(2)(tf.zeros((graph.num_vertices, 3)), graph=graph)
    with pytest.raises(ValueError, match="graph has no edge data"):
        layers.GGNN(3, 2)(tf.zeros((graph.num_vertices, 3)), graph=graph)


# ---- edge_softmax ----


def dense_edge_softmax(edges, scores_in_input_order):
    """Per-edge softmax within each destination via a masked [N, E(, H)] softmax."""
    D = edges.dst_incidence() > 0
    scores = tf.convert_to_tensor(scores_in_input_order)
    extra = scores.shape[1:]
    mask = tf.reshape(D, D.shape + [1] * len(extra))
    broadcast = tf.broadcast_to(scores[None], D.shape + extra)
    probs = lc.masked_softmax(broadcast, tf.broadcast_to(mask, broadcast.shape), axis=1)  # [N, E, ...]
    return tf.gather_nd(probs, np.stack([edges.dst, np.arange(edges.num_edges)], 1))  # each edge's own entry


@pytest.mark.parametrize("extra", [(), (3,), (2, 2)])
def test_edge_softmax_matches_dense_masked_softmax(extra):
    edges = lc.random_edges(seed=28, data=None)
    rng = np.random.default_rng(0)
    scores_input = tf.constant(rng.normal(scale=2.0, size=(edges.num_edges,) + extra))

    # On a Graph, scores and weights are in the order the edges were given.
    got, (grad,) = lc.value_and_grads(lambda s: edge_softmax(edges.graph, s), scores_input, [])
    want, (want_grad,) = lc.value_and_grads(lambda s: dense_edge_softmax(edges, s), scores_input, [])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-10, atol=1e-12)
    # On the bare adjacency (as chunks run), in its CSC order.
    order = edges.graph.edge_order
    stored = edge_softmax(edges.graph.adjacency, tf.gather(scores_input, order)).numpy()
    np.testing.assert_allclose(stored, tf.gather(want, order).numpy(), rtol=1e-12, atol=1e-15)
    # Each destination with in-edges sums to 1.
    totals = np.zeros((edges.num_vertices,) + extra)
    np.add.at(totals, edges.dst, got.numpy())
    has_in = edges.in_degree() > 0
    assert not has_in[0] and not has_in[-1]  # destinations without in-edges exist
    np.testing.assert_allclose(totals[has_in], 1.0, rtol=1e-12)
    np.testing.assert_array_equal(totals[~has_in], 0.0)


def test_edge_softmax_is_stable_for_large_scores():
    edges = lc.random_edges(seed=29, data=None)
    scores = np.random.default_rng(1).normal(size=edges.num_edges) * 5 + 1000.0
    for dtype in (np.float32, np.float64):
        out = edge_softmax(edges.graph, tf.constant(scores.astype(dtype))).numpy()
        assert np.all(np.isfinite(out))
        want = dense_edge_softmax(edges, tf.constant(scores)).numpy()
        np.testing.assert_allclose(out, want, rtol=1e-4 if dtype == np.float32 else 1e-12)


def test_edge_softmax_single_in_edge_is_one_and_has_zero_gradient():
    graph = ngra_tf.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 0], 4)  # vertex 3 is isolated
    scores = tf.constant([2.0, 5.0, 0.3, -1.0], tf.float64)  # in the order given: 0->1, 1->2, then two 2->0
    with tf.GradientTape() as tape:
        tape.watch(scores)
        out = edge_softmax(graph, scores)
        loss = tf.reduce_sum(out * tf.constant([3.0, 4.0, 1.0, 2.0], tf.float64))
    e = np.exp([0.3, -1.0])
    np.testing.assert_allclose(out.numpy(), [1.0, 1.0, e[0] / e.sum(), e[1] / e.sum()], rtol=1e-12)
    grad = tape.gradient(loss, scores).numpy()
    assert grad[0] == 0 and grad[1] == 0  # a single in-edge: the softmax is constantly 1
    assert grad[2] != 0 and grad[3] != 0
    np.testing.assert_allclose(grad[2], -grad[3], rtol=1e-12)  # softmax weights sum to 1


def test_edge_data_comes_in_the_vertex_dtype():
    """Float edge data is cast to the vertices' dtype (the docstring example
    edge.src * edge.data failed on numpy's default float64 weights in a
    float32 layer); integer data (edge types) is left alone."""
    seen = {}

    class Probe(ngra_tf.SAGALayer):
        def apply_edge(self, edge):
            seen["dtype"] = edge.data.dtype
            return edge.src

    edges = lc.random_edges(seed=30)  # float64 weights
    assert edges.graph.edge_data.dtype == np.float64
    out = MyConv()(tf.ones((edges.num_vertices, WIDTH)), graph=edges.graph)
    assert out.dtype == tf.float32
    Probe()(tf.ones((edges.num_vertices, WIDTH)), graph=edges.graph)
    assert seen["dtype"] == tf.float32
    Probe(dtype="float64")(tf.ones((edges.num_vertices, WIDTH)), graph=edges.graph)
    assert seen["dtype"] == tf.float64
    typed = lc.random_edges(seed=30, data="types3").graph
    Probe()(tf.ones((typed.num_vertices, WIDTH)), graph=typed)
    assert seen["dtype"] == tf.int32
