"""The rewrites: what explain() reports, what the plan really runs, and that results do not move."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import compiler_checks as cc
from traced import traced_ops
import ngra_tf
from ngra_tf.runtime.plan.tables import forward_table


def compiled(model, rewrites=True):
    stack = cc.stack_for(model)
    graph = cc.graph_for(model)
    cc.run(stack, graph.partition(2), cc.features(), rewrites=rewrites)
    return [layer for layer in stack if isinstance(layer, ngra_tf.SAGALayer)]


def edge_matmuls(layer):
    return [op.type for op in layer.program.edge_ops if op.type in ("MatMul", "BatchMatMulV2", "Einsum")]


@pytest.mark.parametrize("model, per_edge_without", [("ggcn", 2), ("mpgcn", 1), ("gat", 2), ("ggnn", 1)])
def test_hoisting_removes_every_edge_stage_matmul(model, per_edge_without):
    for layer in compiled(model, rewrites=True):
        assert edge_matmuls(layer) == [], layer.explain()
        assert "0 matmuls" in layer.explain()
    for layer in compiled(model, rewrites=False):
        assert len(edge_matmuls(layer)) == per_edge_without, layer.explain()


def test_hoisting_alone_keeps_results():
    """hoist without fuse: the hoisted matmuls feed a scatter -> edge ops -> gather chunk stage."""
    for model in ("ggcn", "mpgcn"):
        stack, graph, x = cc.stack_for(model), cc.graph_for(model), cc.features()
        want, want_grads = cc.value_and_grads(stack, graph.partition(1), x, rewrites=False)
        out, grads = cc.value_and_grads(stack, graph.partition(3), x, rewrites=["hoist"])
        cc.assert_close(out, want, model)
        for name, grad in grads.items():
            cc.assert_close(grad, want_grads[name], f"{model} d/d{name}")
        layer = next(layer for layer in stack if isinstance(layer, ngra_tf.SAGALayer))
        assert edge_matmuls(layer) == [] and "fused: no, fusion is off" in layer.explain()


@pytest.mark.parametrize("model, program, hoisted, narrowed", [
    ("gcn", "src_mul_edge", None, "12 -> 6"),
    ("commnet", "copy_src", "MatMul:V", "12 -> 6"),
    ("mpgcn", "copy_src", "MatMul:S, BiasAdd:S, Relu:S", "accumulator max does not commute"),
    ("ggcn", "gate_sigmoid", "MatMul:S, MatMul:D", "not a copy or a scalar weight"),
    ("ggnn", "type_select", "Einsum:S, MatMul:V", "not a copy or a scalar weight"),
])
def test_explain_reports_typing_hoisting_fusion_and_narrowing(model, program, hoisted, narrowed):
    text = compiled(model)[0].explain()
    assert f"fused: yes, fused_gather program {program}" in text, text
    assert "edge stage: 0 ops per edge" in text
    if hoisted is None:
        assert "hoisted to the vertex stage: nothing" in text
    else:
        assert f"hoisted to the vertex stage: {hoisted}" in text, text
    assert narrowed in text, text
    if "->" in narrowed and "does not" not in narrowed:
        assert "narrowed: yes" in text
    else:
        assert "narrowed: no" in text


def test_explain_types_the_gated_gcn_edge_stage():
    text = compiled("ggcn")[0].explain()
    assert "typing: src:S dst:D | MatMul:S MatMul:D AddV2:E Sigmoid:E Mul:E -> message:E" in text, text


def test_explain_reports_gat_as_fused_attention():
    text = compiled("gat")[0].explain()
    assert "fused: yes, attention (online softmax): softmax(leaky_relu((S0 + D0), 0.2)) * S1" in text, text
    assert "MatMul:S" in text and "MatMul:D" in text  # both endpoints' transforms run per vertex
    assert "edge stage: 0 ops per edge, 0 matmuls" in text


def test_attention_with_dropout_fuses():
    """edge.dropout draws at the edges' ids: a mask loaded with the edge (E0) that multiplies the values, while the
    softmax still normalises the scores alone."""
    graph, x = cc.graph_for("gat"), cc.features()
    layer = ngra_tf.layers.GAT(3, heads=2, attention_dropout=0.5)
    layer(x, graph=graph)
    text = "\n".join(layer.compiled(x, graph, training=True).describe())
    assert "fused: yes, attention (online softmax): softmax(leaky_relu((S0 + D0), 0.2)) * (E0 * S1)" in text, text
    assert "ids:E" in text and "NgraDropoutMask:E" in text
    assert "ids:E" not in "\n".join(layer.compiled(x, graph, training=False).describe())  # no draw, no ids


def test_explain_with_rewrites_off():
    text = compiled("ggcn", rewrites=False)[0].explain()
    assert "rewrites off" in text and "hoisted to the vertex stage: nothing" in text
    assert "fused: no, fusion is off" in text and "narrowed: no, narrowing is off" in text
    assert "2 matmuls" in text


def test_model_explain_prints_the_plan():
    graph = cc.graph_for("gcn")
    model = ngra_tf.GraphModel(graph, [ngra_tf.layers.GCN(cc.HIDDEN, activation="relu"), ngra_tf.layers.GCN(3)],
                               chunks=3, schedule="stage")
    with pytest.raises(ValueError, match="built model"):
        model.explain()
    model.build((cc.NUM_VERTICES, cc.IN_WIDTH))
    printed = []
    text = model.explain(print_fn=printed.append)
    assert printed == [text]
    assert "3x3 chunks" in text and "schedule stage" in text
    assert text.count("fused: yes, fused_gather program src_mul_edge") == 2
    assert "(12 -> 6 wide rows)" in text and "(6 -> 3 wide rows)" in text


def fused_gather_widths(fn, *args):
    """x_src widths of every NgraFusedGather in fn's graph (the chunk loop's body holds one per reducer)."""
    return [op.inputs[0].shape[-1] for op in traced_ops(fn, *args) if op.type == "NgraFusedGather"]


def test_narrowing_propagates_narrow_rows():
    graph = cc.graph_for("gcn").partition(2)
    layer = ngra_tf.layers.GCN(3)
    x = cc.features()
    widths = fused_gather_widths(lambda t: layer(t, graph=graph), x)
    assert widths == [3]  # every chunk propagates 3-wide rows instead of 12
    widths = fused_gather_widths(lambda t: layer(t, graph=graph, rewrites=["hoist", "fuse"]), x)
    assert widths == [12]


def test_narrowing_only_when_it_narrows():
    graph = cc.graph_for("gcn")
    layer = ngra_tf.layers.GCN(20)  # wider than the 12 input features
    layer(cc.features(), graph=graph)
    assert "does not narrow the rows (12 -> 20)" in layer.explain()


def test_narrowing_only_when_it_narrows_the_cache_lines():
    """16 -> 12 float32s narrows the rows but not what a random gather of one costs (1 -> 1.5 cache lines); 16 ->
    8 narrows both. Either way the layer computes the same."""
    graph = cc.graph_for("gcn").partition(2)
    x = tf.random.stateless_normal((cc.features().shape[0], 16), (4, 5))
    outputs = {}
    for units, narrowed in ((12, False), (8, True)):
        layer = ngra_tf.layers.GCN(units)
        out = layer(x, graph=graph)
        assert fused_gather_widths(lambda t: layer(t, graph=graph), x) == [units if narrowed else 16]
        text = layer.explain()
        if narrowed:
            assert "narrowed: yes" in text, text
        else:
            assert "narrows the rows (16 -> 12) but not the cache lines a gathered row touches (1 -> 1.5 of 64 " \
                   "bytes)" in text, text
        outputs[units] = (layer, out)
    layer, out = outputs[12]
    cc.assert_close(out, layer(x, graph=graph, rewrites=["hoist", "fuse"]), "GCN(12) as written")


class MeanMaxMin(ngra_tf.SAGALayer):
    accumulator = "mean|max|min"

    def apply_edge(self, edge):
        return tf.tanh(edge.src - 0.5 * edge.dst)


class PerFeatureWeight(ngra_tf.SAGALayer):
    """src * w[e, f]: edge data of one weight per feature."""

    def apply_edge(self, edge):
        return edge.src * edge.data


class RowMixing(ngra_tf.SAGALayer):
    """Centres messages over all edges: depends on the whole edge set."""

    def apply_edge(self, edge):
        return edge.src - tf.reduce_mean(edge.src, axis=0)


class HoistsThenFuses(ngra_tf.SAGALayer):
    """relu(src W) * sigmoid(dst): both sides hoist, leaving src_mul_dst."""

    accumulator = "sum|max"

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], input_shape[-1]), initializer="glorot_uniform")

    def apply_edge(self, edge):
        return tf.nn.relu(edge.src @ self.w) * tf.sigmoid(edge.dst)


class HoistsThenEdgeCode(HoistsThenFuses):
    """No template computes relu(S + D) * D, so it fuses as edge code."""

    def apply_edge(self, edge):
        return tf.nn.relu(edge.src @ self.w + edge.dst) * edge.dst


class Unfusable(HoistsThenFuses):
    """A dot product over the features is not element-wise: the edge stage runs per edge."""

    def apply_edge(self, edge):
        return tf.reduce_sum(edge.src @ self.w * edge.dst, axis=-1, keepdims=True) * edge.dst


def direct(layer, graph, x):
    """The layer's stages run as written, unchunked and untraced: the reference."""
    return layer._call_direct(x, graph)


@pytest.mark.parametrize("layer_class, data", [(MeanMaxMin, None), (PerFeatureWeight, "per_feature"),
                                                (HoistsThenFuses, None), (HoistsThenEdgeCode, None),
                                                (Unfusable, None)])
def test_custom_layers_match_their_direct_run_at_every_chunk_count(layer_class, data):
    src, dst = cc.stress_edges()
    edge_data = None
    if data == "per_feature":
        edge_data = np.random.default_rng(4).normal(size=(len(src), cc.IN_WIDTH)).astype(np.float32)
    graph = ngra_tf.Graph.from_edges(src, dst, cc.NUM_VERTICES, edge_data=edge_data)
    layer, x = layer_class(), cc.features()
    layer(x, graph=graph)  # builds
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        want = direct(layer, graph, x)
        outs = {parts: layer(x, graph=graph.partition(parts)) for parts in (1, 4)}  # 1, 3, 5, 8 took 80 s a layer
    want_grad = tape.gradient(want, [x] + layer.trainable_weights)
    for parts, out in outs.items():
        cc.assert_close(out.numpy(), want.numpy(), f"P={parts}")
        for got, expected in zip(tape.gradient(out, [x] + layer.trainable_weights), want_grad):
            cc.assert_close(tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(expected).numpy(),
                            f"P={parts} gradient")
    text = layer.explain()
    if layer_class is PerFeatureWeight:
        assert "fused: yes, fused_gather program src_mul_edge" in text
    if layer_class is HoistsThenFuses:
        assert "hoisted to the vertex stage: MatMul:S, Relu:S, Sigmoid:D" in text
        assert "fused: yes, fused_gather program src_mul_dst" in text
    if layer_class is HoistsThenEdgeCode:
        assert "MatMul:S" in text and "fused: yes, edge code: (relu((S0 + D0)) * D0)" in text, text
    if layer_class is Unfusable:
        assert "MatMul:S" in text and "fused: no" in text and "Sum" in text, text


def test_a_row_mixing_edge_stage_runs_unchunked_only():
    src, dst = cc.stress_edges()
    graph = ngra_tf.Graph.from_edges(src, dst, cc.NUM_VERTICES)
    layer, x = RowMixing(), cc.features()
    np.testing.assert_allclose(layer(x, graph=graph).numpy(), direct(layer, graph, x).numpy(), rtol=1e-6)
    assert "chunks: 1 only" in layer.explain() and "reduces over the rows" in layer.explain()
    with pytest.raises(ValueError, match="mixes edges.*chunks=1"):
        layer(x, graph=graph.partition(2))


def test_compiled_layers_train_inside_keras_fit():
    """fit runs the plan in a tf.function; P = 3 trains to the same weights as P = 1."""
    graph = cc.graph_for("gat")
    x, labels = cc.features().numpy(), np.arange(cc.NUM_VERTICES) % 3
    weights = []
    for parts in (1, 3):
        keras.utils.set_random_seed(0)
        model = ngra_tf.GraphModel(graph, [ngra_tf.layers.GAT(4, heads=2, activation="elu"),
                                           ngra_tf.layers.GAT(3, concat_heads=False)], chunks=parts)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
        model.fit(x, labels, epochs=3, verbose=0)
        weights.append([w.numpy() for w in model.weights])
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_dropout_in_the_edge_stage_draws_new_masks_each_step():
    graph = cc.graph_for("gat")
    layer = ngra_tf.layers.GAT(4, heads=2, attention_dropout=0.5)
    x = cc.features()
    first = layer(x, graph=graph.partition(2), training=True).numpy()
    second = layer(x, graph=graph.partition(2), training=True).numpy()
    assert not np.allclose(first, second)
    np.testing.assert_array_equal(layer(x, graph=graph, training=False).numpy(),
                                  layer(x, graph=graph, training=False).numpy())


def test_schedule_orders():
    """The chunk steps (i, j) in each schedule's order, which start their column's accumulator and which end
    it."""
    partition = cc.graph_for("gcn").partition(2)
    assert partition.edge_counts.all()

    def order(schedule):
        table = forward_table(partition, schedule, num_markers=0, chained_by_max=False)
        return [(int(i), int(j), int(fresh), int(last)) for _, i, j, _, fresh, _, last in table]

    by_column = [(0, 0, 1, 0), (1, 0, 0, 1), (0, 1, 1, 0), (1, 1, 0, 1)]
    assert order("ngra") == by_column and order("stage") == by_column
    assert order("dest-order") == [(0, 0, 1, 0), (0, 1, 1, 0), (1, 0, 0, 1), (1, 1, 0, 1)]


@pytest.mark.parametrize("kwargs, message", [
    ({"chunks": 0}, "chunks must be a positive integer"),
    ({"chunks": 2.5}, "chunks must be a positive integer"),
    ({"schedule": "random"}, "schedule must be one of ngra, stage, dest-order"),
    ({"rewrites": ["hoist", "inline"]}, "unknown \\['inline'\\]"),
])
def test_bad_plan_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ngra_tf.GraphModel(cc.graph_for("gcn"), [ngra_tf.layers.GCN(2)], **kwargs)


def test_bad_schedule_on_a_layer_call():
    layer = ngra_tf.layers.GCN(2)
    with pytest.raises(ValueError, match="schedule must be one of"):
        layer(cc.features(), graph=cc.graph_for("gcn"), schedule="fast")


def test_options_survive_save_and_load(tmp_path):
    graph = cc.graph_for("gcn")
    model = ngra_tf.GraphModel(graph, [ngra_tf.layers.GCN(3)], chunks=2, schedule="dest-order",
                               rewrites=["fuse"])
    model.build((cc.NUM_VERTICES, cc.IN_WIDTH))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert (loaded.chunks, loaded.schedule, loaded.rewrites) == (2, "dest-order", ["fuse"])
    np.testing.assert_allclose(loaded.predict(cc.features().numpy(), verbose=0),
                               model.predict(cc.features().numpy(), verbose=0), rtol=1e-6)


class ReadmeGatedConv(ngra_tf.SAGALayer):
    """The README's example layer: its gate matmuls must hoist and the gate must fuse."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.gate_src = keras.layers.Dense(input_shape[-1], use_bias=False)
        self.gate_dst = keras.layers.Dense(input_shape[-1])
        self.out = keras.layers.Dense(self.units, activation="relu")

    def apply_edge(self, edge):
        return tf.sigmoid(self.gate_src(edge.src) + self.gate_dst(edge.dst)) * edge.src

    def apply_vertex(self, vertex, accum):
        return self.out(accum)


def test_the_readme_example_hoists_and_fuses():
    graph = cc.graph_for("commnet")
    layer, x = ReadmeGatedConv(5), cc.features()
    out = layer(x, graph=graph.partition(3))
    text = layer.explain()
    assert "hoisted to the vertex stage: MatMul:S, MatMul:D, BiasAdd:D" in text, text
    assert "fused: yes, fused_gather program gate_sigmoid" in text
    cc.assert_close(out.numpy(), direct(layer, graph, x).numpy(), "P=3 vs direct")


def test_gin_computes_x_w1_once():
    """GIN's apply_vertex reads x W_1 beside accum W_1; narrowed, the source rows are x W_1 already: the hoisted
    vertex stage reuses them, one matmul of the input instead of two (and the same result)."""
    from ngra_tf.compiler.kernels import LayerKernels

    graph, x = cc.graph_for("gin"), cc.features()
    layer = ngra_tf.layers.GIN(3, hidden=2)
    want = layer(x, graph=graph).numpy()
    program = layer.compiled(x, graph)
    assert "apply_vertex's vertex @ W reuses them" in "\n".join(program.describe())
    kernels = LayerKernels(program, layer.variables)
    hoist = tf.function(kernels.hoist).get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
    assert [op.type for op in hoist.get_operations()].count("MatMul") == 1
    # float32 to 1e-5 of the output's largest value: (x + accum) W_1 and x W_1 + accum W_1 round differently,
    # and the weights are drawn afresh each run (an absolute 1e-6 failed on one entry near zero, 1 run in many).
    atol = 1e-5 * np.abs(want).max()
    np.testing.assert_allclose(layer(x, graph=graph.partition(3)).numpy(), want, rtol=1e-5, atol=atol)
    unreused = ngra_tf.layers.GIN(3, hidden=2, mlp_layers=2)
    unreused(x, graph=graph)
    unreused.set_weights(layer.get_weights())
    np.testing.assert_allclose(unreused(x, graph=graph, rewrites=["hoist", "fuse"]).numpy(), want, rtol=1e-5,
                               atol=atol)
