"""A dropped model frees what it compiled: nothing it traced stays in TensorFlow's gradient registry
(ngra_tf.tf_compat), so its executor, traced graphs and weights go with it."""

import gc
import weakref

import keras
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

import layer_checks as lc
import ngra_tf
from ngra_tf import layers, recipes, tf_compat


def _custom_gradients():
    return {name for name in tf_ops._gradient_registry._registry if name.startswith("CustomGradient-")}


def test_registered_custom_gradients_are_found_and_forgotten():
    @tf.custom_gradient
    def double(x):
        return 2 * x, lambda dy: 2 * dy

    names = []
    with tf_compat.gradients_registered(names):
        traced = tf.function(double).get_concrete_function(tf.TensorSpec([None]))
    assert len(names) == 1 and names[0] in _custom_gradients()
    assert tf_compat.registered_gradient(traced.graph.outputs[0].op.inputs[0]) == names[0]
    assert tf_compat.registered_gradient(tf.constant(1.0)) is None  # eager: nothing registered
    name = names[0]
    tf_compat.forget_gradients(names)
    assert names == [] and name not in _custom_gradients()


def _fit_and_drop(make):
    """A model fitted, evaluated and predicted with, then dropped: (a weak reference to it, the names its
    executors registered)."""
    graph, x, y, (train, val, _) = lc.tiny_classification(seed=0)
    model = make(recipes.prepare_graph("gcn", graph))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    whole = {} if isinstance(model, ngra_tf.GraphModel) else {"batch_size": len(x), "shuffle": False}
    history = model.fit(x, y, sample_weight=train, validation_data=(x, y, val), epochs=3, verbose=0, **whole)
    assert history.history["loss"][-1] < history.history["loss"][0]  # it trains
    model.predict(x, verbose=0, batch_size=len(x))
    executors = [model.executor()] if isinstance(model, ngra_tf.GraphModel) else [
        executor for layer in (model.gcn1, model.gcn2) for _, _, executor in layer._executors.values()]
    registered = [name for executor in executors for name in executor._registered]
    assert registered
    return weakref.ref(model), registered


def _graph_model(graph):
    return ngra_tf.GraphModel(graph, [layers.GCN(8, activation="relu"), layers.GCN(3)], chunks=2)


class PlainModel(keras.Model):
    """SAGA layers called by the user inside a plain Keras model: each layer runs an executor of its own."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.gcn1, self.gcn2 = layers.GCN(8, activation="relu"), layers.GCN(3)

    def call(self, x):
        return self.gcn2(self.gcn1(x, graph=self.graph), graph=self.graph)


@pytest.mark.parametrize("make", [_graph_model, PlainModel], ids=["graph_model", "saga_layers"])
def test_a_dropped_model_leaves_nothing_registered(make):
    """Nothing the executors registered stays; a GraphModel also releases what Keras's optimizer registered for
    its train function (a plain Keras model keeps that one, as every Keras model does)."""
    before = _custom_gradients()
    model, registered = _fit_and_drop(make)
    gc.collect()
    assert model() is None
    left = _custom_gradients() - before
    assert not left & set(registered)
    if make is _graph_model:
        assert not left, sorted(left)


def test_models_built_and_dropped_in_a_loop_do_not_accumulate():
    """Models fitted and dropped in a loop are all freed, and resident memory levels off (each kept ~30 MB
    before: ~180 MB over these models)."""
    from ngra_tf.runtime.resident import resident_bytes  # noqa: PLC0415

    before = _custom_gradients()
    sizes, models = [], []
    for _ in range(8):
        models.append(_fit_and_drop(_graph_model)[0])
        keras.backend.clear_session()
        gc.collect()
        sizes.append(resident_bytes())
    assert all(model() is None for model in models)
    assert _custom_gradients() <= before
    growth = (sizes[-1] - sizes[1]) / 2**20
    assert growth < 60, [round(s / 2**20, 1) for s in sizes]
