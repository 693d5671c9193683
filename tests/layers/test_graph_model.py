"""GraphModel: full-graph fit/evaluate/predict with masks, Keras callbacks,
saving and loading with the graph as an asset, and the mistakes it reports."""

import glob

import keras
import numpy as np
import pytest

import layer_checks as lc
import ngra_tf
from ngra_tf import layers, recipes


@pytest.fixture(scope="module")
def data():
    return lc.tiny_classification(seed=0)


def gcn_model(graph, classes=3, hidden=8):
    graph = recipes.prepare_graph("gcn", graph)
    return ngra_tf.GraphModel(graph, [layers.GCN(hidden, activation="relu"), keras.layers.Dropout(0.2),
                                      layers.GCN(classes)])


def compiled(model, lr=0.05, **kwargs):
    model.compile(optimizer=keras.optimizers.Adam(lr), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"],
                  **kwargs)
    return model


class CountBatches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.train = self.test = 0

    def on_train_batch_end(self, batch, logs=None):
        self.train += 1

    def on_test_batch_end(self, batch, logs=None):
        self.test += 1


def test_fit_with_mask_validation_and_callbacks(data, tmp_path):
    graph, x, y, (train, val, test) = data
    lc.reset_keras(0)
    model = compiled(gcn_model(graph))
    counter = CountBatches()
    history = model.fit(
        x, y, sample_weight=train, epochs=25, verbose=0, validation_data=(x, y, val),
        callbacks=[keras.callbacks.EarlyStopping("val_loss", patience=50, restore_best_weights=True),
                   keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), monitor="val_loss",
                                                   save_best_only=True),
                   keras.callbacks.TensorBoard(str(tmp_path / "tb")), counter])
    losses = history.history["loss"]
    assert len(losses) == 25 and np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses  # it learns
    assert history.history["val_loss"][-1] < history.history["val_loss"][0]
    assert history.history["accuracy"][-1] > 0.8
    # The whole graph is one batch: one training step per epoch, one validation step.
    assert counter.train == 25 and counter.test == 25
    # ModelCheckpoint saved a model that loads and predicts.
    best = keras.models.load_model(tmp_path / "best.keras")
    assert isinstance(best, ngra_tf.GraphModel)
    assert best.predict(x, verbose=0).shape == (graph.num_vertices, 3)
    # TensorBoard wrote event files for training and validation.
    for part in ("train", "validation"):
        assert glob.glob(str(tmp_path / "tb" / part / "events.out.tfevents.*")), part

    # evaluate / predict shapes; masked metrics.
    result = model.evaluate(x, y, sample_weight=test, verbose=0, return_dict=True)
    assert set(result) >= {"loss", "accuracy"} and result["accuracy"] > 0.6
    logits = model.predict(x, verbose=0)
    assert logits.shape == (graph.num_vertices, 3) and logits.dtype == np.float32
    # The loss is the mean over the masked vertices only (not over the whole graph).
    picked = test > 0
    manual = keras.losses.sparse_categorical_crossentropy(y[picked], logits[picked], from_logits=True)
    l2 = float(sum(model.losses)) if model.losses else 0.0
    np.testing.assert_allclose(result["loss"], float(np.mean(manual)) + l2, rtol=1e-4)
    np.testing.assert_allclose(result["accuracy"], np.mean(np.argmax(logits[picked], -1) == y[picked]), rtol=1e-6)


def test_early_stopping_stops(data):
    graph, x, y, (train, val, _) = data
    lc.reset_keras(1)
    model = compiled(gcn_model(graph))
    stop = keras.callbacks.EarlyStopping("val_loss", min_delta=1e9, patience=2)
    history = model.fit(x, y, sample_weight=train, epochs=40, verbose=0, validation_data=(x, y, val),
                        callbacks=[stop])
    assert len(history.history["loss"]) == 3 and stop.stopped_epoch == 2


def test_only_masked_vertices_train(data):
    """Labels outside the mask do not matter: scrambling them changes nothing."""
    graph, x, y, (train, _, _) = data
    scrambled = np.where(train > 0, y, (y + 1) % 3)
    results = []
    for labels in (y, scrambled):
        lc.reset_keras(2)
        model = compiled(gcn_model(graph))
        model.fit(x, labels, sample_weight=train, epochs=3, verbose=0)
        results.append(model.predict(x, verbose=0))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["gcn", "ggnn", "gat"])
def test_save_and_load_round_trip(data, tmp_path, name):
    graph, x, y, (train, val, _) = data
    lc.reset_keras(3)
    prepared = recipes.prepare_graph(name, graph)
    model = compiled(recipes.build_model(name, prepared, num_classes=3, hidden=8), lr=0.01)
    model.fit(x, y, sample_weight=train, epochs=2, verbose=0, validation_data=(x, y, val))
    want = model.predict(x, verbose=0)
    path = tmp_path / f"{name}.keras"
    model.save(path)

    loaded = keras.models.load_model(path)
    assert type(loaded) is ngra_tf.GraphModel and loaded is not model
    # The graph came back with its edges and edge data, in the user's order.
    assert not np.array_equal(prepared.edge_order, np.arange(prepared.num_edges))  # not given in CSC order
    np.testing.assert_array_equal(loaded.graph.edge_order, prepared.edge_order)
    np.testing.assert_array_equal(loaded.graph.src, prepared.src)
    np.testing.assert_array_equal(loaded.graph.dst, prepared.dst)
    if prepared.edge_data is None:
        assert loaded.graph.edge_data is None
    else:
        np.testing.assert_array_equal(loaded.graph.edge_data, prepared.edge_data)
        assert loaded.graph.edge_data.dtype == prepared.edge_data.dtype
    assert [type(l).__name__ for l in loaded.graph_layers] == [type(l).__name__ for l in model.graph_layers]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), want)
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(loaded.optimizer.iterations) == 2

    # Training continues from where it was (Adam's moments and step count came
    # back): the same step on both gives the same weights. Keras does not save
    # the dropout seed generators' state, so copy it for identical masks.
    states = [v for v in model.non_trainable_variables if "seed_generator" in v.path]
    loaded_states = [v for v in loaded.non_trainable_variables if "seed_generator" in v.path]
    assert len(states) == len(loaded_states) > 0
    for mine, theirs in zip(states, loaded_states):
        theirs.assign(mine)
    model.fit(x, y, sample_weight=train, epochs=1, verbose=0)
    history = loaded.fit(x, y, sample_weight=train, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and int(loaded.optimizer.iterations) == 3
    for a, b in zip(model.trainable_variables, loaded.trainable_variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=a.path)
    assert not np.array_equal(loaded.predict(x, verbose=0), want)


def test_save_before_training_and_load(data, tmp_path):
    graph, x, _, _ = data
    model = gcn_model(graph)
    want = model.predict(x, verbose=0)
    model.save(tmp_path / "fresh.keras")
    loaded = keras.models.load_model(tmp_path / "fresh.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), want)


# ---- mistakes ----


@pytest.fixture
def model(data):
    graph, x, _, _ = data
    m = compiled(gcn_model(graph))
    m.predict(x, verbose=0)  # built
    return m


def test_features_with_wrong_row_count(data, model):
    _, x, y, (train, _, _) = data
    for call in (lambda: model.fit(x[:-1], y[:-1], epochs=1, verbose=0),
                 lambda: model.evaluate(x[:-1], y[:-1], verbose=0),
                 lambda: model.predict(x[:-1], verbose=0)):
        with pytest.raises(ValueError, match=r"features must have one row per vertex \(60\), got shape \(59, 8\)"):
            call()


def test_mask_and_labels_of_wrong_length(data, model):
    _, x, y, (train, val, _) = data
    with pytest.raises(ValueError, match=r"sample_weight \(the vertex mask\) must have one entry per vertex \(60\)"):
        model.fit(x, y, sample_weight=train[:-5], epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"labels must have one entry per vertex \(60\)"):
        model.fit(x, y[:10], sample_weight=train, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"validation_data.*sample_weight"):
        model.fit(x, y, sample_weight=train, validation_data=(x, y, val[:3]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"evaluate: sample_weight"):
        model.evaluate(x, y, sample_weight=np.ones(61), verbose=0)


def test_labels_out_of_range(data, model):
    _, x, y, (train, _, _) = data
    for bad, shown in ((3, "3"), (-1, "-1")):
        labels = y.copy()
        labels[5] = bad
        with pytest.raises(ValueError, match=rf"labels must lie in \[0, 3\) .* got {shown}"):
            model.fit(x, labels, sample_weight=train, epochs=1, verbose=0)
        with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
            model.evaluate(x, labels, verbose=0)


def test_labels_checked_before_the_first_build(data):
    graph, x, y, (train, _, _) = data
    fresh = compiled(gcn_model(graph))
    labels = y.copy()
    labels[0] = 7
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        fresh.fit(x, labels, sample_weight=train, epochs=1, verbose=0)


def test_batch_size_must_stay_unset(data, model):
    _, x, y, (train, _, _) = data
    with pytest.raises(ValueError, match="whole graph: leave batch_size unset"):
        model.fit(x, y, sample_weight=train, batch_size=16, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="leave batch_size unset"):
        model.predict(x, batch_size=8, verbose=0)
    with pytest.raises(ValueError, match="leave batch_size unset"):
        model.evaluate(x, y, batch_size=1, verbose=0)
    # The vertex count itself is what it uses anyway.
    assert model.predict(x, batch_size=60, verbose=0).shape == (60, 3)


def test_constructor_mistakes(data):
    graph = data[0]
    with pytest.raises(TypeError, match="ngra_tf.Graph"):
        ngra_tf.GraphModel("not a graph", [layers.GCN(2)])
    with pytest.raises(ValueError, match="at least one layer"):
        ngra_tf.GraphModel(graph, [])
    with pytest.raises(ValueError, match="no graph"):
        ngra_tf.GraphModel(None, [layers.CommNet(2)])(np.zeros((3, 2), np.float32))


def test_jit_compile_falls_back_instead_of_failing(data):
    """The custom ops have no XLA lowering. Keras turns XLA on by itself on GPU
    machines (jit_compile="auto"), and on request anywhere: the SAGA layers
    must say they do not support it, so that Keras runs without XLA."""
    graph, x, y, (train, _, _) = data
    for layer in (layers.GCN(2), layers.GAT(2), layers.GGNN(2, 1), ngra_tf.SAGALayer()):
        assert layer.supports_jit is False
    lc.reset_keras(5)
    model = gcn_model(graph)
    with pytest.warns(UserWarning, match="jit_compile"):
        compiled(model, jit_compile=True)
    assert model.jit_compile is False
    history = model.fit(x, y, sample_weight=train, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_float64_edge_data_with_float32_model(data):
    """Edge weights built with numpy's default float64 work in a float32 model."""
    graph, x, y, (train, _, _) = data

    class Weighted(ngra_tf.SAGALayer):
        def apply_edge(self, edge):
            return edge.src * edge.data[:, None]  # as in the SAGALayer docstring

    weighted = graph.with_edge_data(np.random.default_rng(0).random(graph.num_edges))  # float64
    model = compiled(ngra_tf.GraphModel(weighted, [Weighted(), keras.layers.Dense(3)]))
    history = model.fit(x, y, sample_weight=train, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert model.predict(x, verbose=0).dtype == np.float32
