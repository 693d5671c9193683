"""Models that are graphs of layers (skip edges, several readers of one tensor, concatenations) train alike in
every mode: in memory at any P and schedule, from a store under a budget, over several devices, and after
save / load. The reference is each model in memory at P = 1."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf import layers, recipes
from ngra_tf.parallel import PLACEMENTS
from ngra_tf.store import write_store

NUM_VERTICES, NUM_EDGES, WIDTH, CLASSES, EPOCHS = 96, 600, 6, 3, 5
# The four example models: a residual GCN of 4 graph layers, APPNP (K = 10, alpha = 0.1), a jumping-knowledge
# net that concatenates every layer's output, GraphSAGE.
MODELS = {"resgcn": {"depth": 4}, "appnp": {"k": 10, "alpha": 0.1}, "jknet": {"depth": 3}, "sage": {}}
MODES = {
    "memory-P3-ngra": dict(chunks=3),
    "memory-P4-stage": dict(chunks=4, schedule="stage"),
    "memory-P2-dest-order": dict(chunks=2, schedule="dest-order"),
    "store-P3-spill": dict(store=3, spill="spill"),
    "store-P4-recompute-disk": dict(store=4, spill="recompute", spill_dir=True),
    "store-P2-stage-spill-disk": dict(store=2, schedule="stage", spill_dir=True),
    **{f"devices-{placement}": dict(chunks=4, devices=2, placement=placement) for placement in PLACEMENTS},
    "store-devices-ring": dict(store=4, devices=2),
}


def _problem(model):
    rng = np.random.default_rng(3)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, NUM_VERTICES, NUM_EDGES),
                                     rng.integers(0, NUM_VERTICES, NUM_EDGES), NUM_VERTICES)
    arrays = {"features": rng.normal(size=(NUM_VERTICES, WIDTH)).astype(np.float32),
              "labels": rng.integers(0, CLASSES, NUM_VERTICES),
              "train_mask": rng.random(NUM_VERTICES) < 0.6}
    return recipes.prepare_graph(model, graph), arrays


def _model(model, source, dropout=0.0, **options):
    recipe = dataclasses.replace(recipes.RECIPES[model], dropout=dropout)
    keras.utils.set_random_seed(1)
    built = recipes.build_model(model, source, CLASSES, hidden=5, recipe=recipe, num_features=WIDTH,
                                **MODELS[model], **options)
    built.compile(optimizer=keras.optimizers.Adam(0.05), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    return built


def _inputs(model, arrays, store):
    if store is None:
        return dict(x=arrays["features"], y=arrays["labels"], sample_weight=arrays["train_mask"])
    return dict(x=store.array("features"), y=store.array("labels"), sample_weight=store.array("train_mask"))


class _References(dict):
    """Per model, trained when a test first asks for it: its graph, arrays, initial weights, and 5 epochs' losses,
    final weights and predictions at P = 1."""

    def __missing__(self, model):
        graph, arrays = _problem(model)
        reference = _model(model, graph)
        reference.build(arrays["features"].shape)
        initial = reference.get_weights()
        history = reference.fit(**_inputs(model, arrays, None), epochs=EPOCHS, verbose=0).history
        self[model] = (graph, arrays, initial, history["loss"], reference.get_weights(),
                       reference.predict(arrays["features"], verbose=0))
        return self[model]


@pytest.fixture(scope="module")
def references():
    return _References()


def _assert_trains_like(reference, model, history):
    _, _, _, losses, weights, _ = reference
    np.testing.assert_allclose(history["loss"], losses, rtol=0, atol=1e-5)
    for want, have in zip(weights, model.get_weights()):
        np.testing.assert_allclose(have, want, rtol=0, atol=2e-5)


# Each mode with one of the four models, so that every model meets memory at P > 1 (sage: test_new_layers), a
# store and devices (the whole 4 x 10 product took 20 minutes of a 2-core CI machine, two models a mode 10);
# sage with the disk store stays in make test.
MODE_MODELS = ("jknet", "resgcn", "appnp", "jknet", "sage", "appnp", "sage", "appnp", "jknet", "resgcn")
MODE_PAIRS = list(zip(MODE_MODELS, MODES))


@pytest.mark.parametrize("model,mode", MODE_PAIRS)
def test_every_mode_trains_like_memory_at_p1(tmp_path, references, model, mode):
    graph, arrays, initial, _, _, predictions = references[model]
    options = dict(MODES[mode])
    store = None
    if "store" in options:
        store = write_store(tmp_path / "store", graph, options.pop("store"), arrays)
        if options.get("spill_dir"):
            options["spill_dir"] = str(tmp_path / "spill")
    built = _model(model, store if store is not None else graph, **options)
    built.build(store.array("features").shape if store is not None else arrays["features"].shape)
    built.set_weights(initial)
    if store is not None:
        built.executor().tile_bytes = 200  # several row tiles per interval
    history = built.fit(**_inputs(model, arrays, store), epochs=EPOCHS, verbose=0).history
    _assert_trains_like(references[model], built, history)
    if store is not None and options.get("spill_dir"):
        assert not (tmp_path / "spill").exists()  # its files gone, and the directory the run made


@pytest.mark.parametrize("model", ["jknet", "appnp"])  # a concatenation and a propagation (all four: 1 minute more)
def test_dropout_draws_do_not_change_with_p(references, model):
    """In memory, every P draws the same dropout masks (the prologue runs on all rows, in the user's order)."""
    graph, arrays, initial, _, _, _ = references[model]
    histories, weights = [], []
    for chunks in (1, 3):
        built = _model(model, graph, dropout=0.5, chunks=chunks)
        built.build(arrays["features"].shape)
        built.set_weights(initial)
        histories.append(built.fit(**_inputs(model, arrays, None), epochs=3, verbose=0).history["loss"])
        weights.append(built.get_weights())
    np.testing.assert_allclose(histories[1], histories[0], rtol=0, atol=1e-5)
    for want, have in zip(*weights):
        np.testing.assert_allclose(have, want, rtol=0, atol=2e-5)


# A model saved from memory and one from a store (the functional network is the same object in both).
@pytest.mark.parametrize("model,where", [("jknet", "memory"), ("appnp", "store")])
def test_save_and_load(tmp_path, references, model, where):
    graph, arrays, initial, _, _, _ = references[model]
    store = write_store(tmp_path / "store", graph, 3, arrays) if where == "store" else None
    built = _model(model, store if store is not None else graph, chunks=None if store is not None else 3)
    built.build(store.array("features").shape if store is not None else arrays["features"].shape)
    built.set_weights(initial)
    built.fit(**_inputs(model, arrays, store), epochs=2, verbose=0)
    path = str(tmp_path / "model.keras")
    built.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.network, keras.Model) or model == "sage"
    x = arrays["features"] if store is None else store.array("features")
    loaded_x = arrays["features"] if store is None else loaded.store.array("features")  # it reopens the store
    np.testing.assert_allclose(loaded.predict(loaded_x, verbose=0), built.predict(x, verbose=0), rtol=1e-6,
                               atol=1e-6)
    # Training goes on from the saved optimizer state exactly as it would have without saving.
    after = loaded.fit(**_inputs(model, arrays, loaded.store), epochs=2, verbose=0).history["loss"]
    expected = built.fit(**_inputs(model, arrays, store), epochs=2, verbose=0).history["loss"]
    np.testing.assert_allclose(after, expected, rtol=0, atol=1e-6)


def _tiny_graph():
    return ngra_tf.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], 4)


def test_a_list_of_layers_is_the_sequential_case():
    graph = recipes.prepare_graph("gcn", _tiny_graph())
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    keras.utils.set_random_seed(0)
    stack = [layers.GCN(4, activation="relu"), keras.layers.Dropout(0.5), layers.GCN(2)]
    listed = ngra_tf.GraphModel(graph, stack)
    inputs = keras.Input(shape=(3,))
    functional = ngra_tf.GraphModel(graph, keras.Model(inputs, stack[2](stack[1](stack[0](inputs)))))
    listed.build(x.shape)
    functional.build(x.shape)
    np.testing.assert_allclose(functional.predict(x, verbose=0), listed.predict(x, verbose=0), rtol=1e-6)
    assert [type(layer).__name__ for layer in listed.graph_layers] == ["GCN", "Dropout", "GCN"]


def test_the_stages_keep_what_several_layers_read():
    """The executor keeps the input, every graph layer's output, a per-vertex value read twice and the output;
    everything else runs fused into the step that reads it."""
    inputs = keras.Input(shape=(3,))
    h = keras.layers.Dense(4, name="shared")(inputs)  # read by the graph layer and by the skip
    a = layers.GCN(4, name="gcn_a")(keras.layers.Dropout(0.1, name="drop")(h))
    b = layers.GCN(4, name="gcn_b")(inputs)  # reads the input as is
    out = keras.layers.Dense(2, name="head")(keras.layers.Concatenate(name="cat")([a, h, b]))
    graph = recipes.prepare_graph("gcn", _tiny_graph())
    model = ngra_tf.GraphModel(graph, keras.Model(inputs, out))
    stages = model.stages()
    assert [(s.name, s.inputs, None if s.graph_layer is None else s.graph_layer.name,
             [layer.name for layer in s.prologue_layers]) for s in stages] == [
        ("shared", ("input",), None, ["shared"]),
        ("gcn_a", (0,), "gcn_a", ["drop"]),
        ("gcn_b", ("input",), "gcn_b", []),
        ("head", (1, 0, 2), None, ["cat", "head"]),
    ]


@pytest.mark.parametrize("build,message", [
    (lambda x: [layers.GCN(2)(x), layers.GCN(2)(x)], "one input .* and one output"),
    (lambda x: x, "needs at least one layer"),
    (lambda x: (lambda g: g(g(x)))(layers.GCN(3, name="twice")), "twice is called more than once"),
    (lambda x: keras.Sequential([keras.Input((3,)), layers.GCN(3)], name="inner")(x), "nested model inner holds graph"),
])
def test_models_the_executor_cannot_run_fail_when_made(build, message):
    inputs = keras.Input(shape=(3,))
    graph = recipes.prepare_graph("gcn", _tiny_graph())
    with pytest.raises(ValueError, match=message):
        ngra_tf.GraphModel(graph, keras.Model(inputs, build(inputs)))


def test_a_subclassed_model_is_refused():
    class Custom(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(TypeError, match="functional model .* or a list of layers"):
        ngra_tf.GraphModel(_tiny_graph(), Custom())


def test_features_of_another_width_are_named():
    inputs = keras.Input(shape=(5,))
    model = ngra_tf.GraphModel(recipes.prepare_graph("gcn", _tiny_graph()), keras.Model(inputs, layers.GCN(2)(inputs)))
    with pytest.raises(ValueError, match=r"rows of shape \(3,\), but the model's input .* \(5,\)"):
        model.fit(np.zeros((4, 3), np.float32), np.zeros(4, np.int64), epochs=1, verbose=0)


def test_running_statistics_cannot_stream(tmp_path):
    """BatchNormalization's moving statistics would be of one tile of rows: a store refuses it when made."""
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    inputs = keras.Input(shape=(WIDTH,))
    out = layers.GCN(CLASSES)(keras.layers.BatchNormalization(name="norm")(inputs))
    model = ngra_tf.GraphModel(store, keras.Model(inputs, out))
    model.compile(optimizer="adam", loss=ngra_tf.masked_loss())
    with pytest.raises(ValueError, match="norm .*BatchNormalization.* from a store"):
        model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"), epochs=1,
                  verbose=0)
    in_memory = ngra_tf.GraphModel(graph, keras.Model(inputs, out), chunks=2)  # whole rows at once: allowed
    in_memory.compile(optimizer="adam", loss=ngra_tf.masked_loss())
    in_memory.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"], epochs=1, verbose=0)
    assert np.isfinite(in_memory.predict(arrays["features"], verbose=0)).all()


def test_tf_function_gradients_of_a_functional_model_match_plain_keras():
    """The executor's custom gradient of a model with skip edges equals TF's own gradient of the same layers run
    directly (each SAGA layer called with graph=)."""
    graph, arrays = _problem("resgcn")
    model = _model("resgcn", graph, chunks=3)
    model.build(arrays["features"].shape)
    x = tf.constant(arrays["features"])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = model(x)
        direct = _direct(model.network, x, graph)
        loss_ours, loss_direct = tf.reduce_sum(ours * ours), tf.reduce_sum(direct * direct)
    np.testing.assert_allclose(ours, direct, rtol=1e-5, atol=1e-5)
    for a, b in zip(tape.gradient(loss_ours, [x] + model.trainable_variables),
                    tape.gradient(loss_direct, [x] + model.trainable_variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(b), rtol=1e-4, atol=1e-5)


def _direct(network, x, graph):
    """The functional model's layers in order, SAGA layers called with the graph (no executor around them)."""
    values = {id(network.inputs[0]): x}
    for op in network.operations:
        if isinstance(op, keras.layers.InputLayer):
            continue
        args = [values[id(t)] for t in tf.nest.flatten(op.input)]
        arg = args if isinstance(op.input, (list, tuple)) else args[0]
        values[id(op.output)] = op(arg, graph=graph) if isinstance(op, layers.SAGALayer) else op(arg)
    return values[id(network.outputs[0])]
