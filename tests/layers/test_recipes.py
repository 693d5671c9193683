"""ngra_tf.recipes: weight_decay is Kipf & Welling's / PyG's lambda (a loss term lambda / 2 * sum(w^2), whose
gradient is lambda * w, as torch's Adam(weight_decay=lambda) applies), and the callbacks a recipe trains with."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
import ngra_tf
from ngra_tf import layers, recipes


def regularizers(model):
    """Every kernel regulariser in the model: (layer path, regulariser), in layer order."""
    found = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        regularizer = getattr(layer, "kernel_regularizer", None)
        if regularizer is not None:
            found.append((layer.path if hasattr(layer, "path") else layer.name, regularizer))
    return found


@pytest.fixture(scope="module")
def tiny():
    return lc.tiny_classification(seed=0)


def build(name, graph, recipe=None, x_width=8):
    return recipes.build_model(name, recipes.prepare_graph(name, graph), 3, recipe=recipe, num_features=x_width)


def test_gcn_first_layer_regulariser_is_half_the_weight_decay(tiny):
    graph, *_ = tiny
    recipe = recipes.RECIPES["gcn"]
    assert recipe.weight_decay == 5e-4
    model = build("gcn", graph)
    graph_layers = [layer for layer in model.graph_layers if isinstance(layer, layers.SAGALayer)]
    first, second = graph_layers
    assert isinstance(first.dense.kernel_regularizer, keras.regularizers.L2)
    assert first.dense.kernel_regularizer.l2 == pytest.approx(recipe.weight_decay / 2)
    assert second.dense.kernel_regularizer is None


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_every_recipe_regularises_with_half_its_weight_decay(tiny, name):
    graph, *_ = tiny
    recipe = recipes.RECIPES[name]
    found = regularizers(build(name, graph))
    assert found, name
    for path, regularizer in found:
        assert isinstance(regularizer, keras.regularizers.L2), path
        assert regularizer.l2 == pytest.approx(recipe.weight_decay / 2), path


def test_gin_kernels_start_as_pytorchs_linear(tiny):
    """U(+-1 / sqrt(fan_in)), every MLP kernel of both GIN layers, each its own draw (glorot made the recipe
    collapse on some seeds of Amazon Computers)."""
    graph, *_ = tiny
    keras.utils.set_random_seed(0)
    model = build("gin", graph, x_width=400)
    model.build((graph.num_vertices, 400))
    kernels = [dense.kernel.numpy() for layer in model.graph_layers if isinstance(layer, layers.GIN)
               for dense in layer.mlp]
    assert [k.shape for k in kernels] == [(400, 64), (64, 64), (64, 64), (64, 3)]
    for kernel in kernels:
        bound = 1 / np.sqrt(kernel.shape[0])
        assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound, kernel.shape
    assert not np.array_equal(kernels[1], kernels[2])


@pytest.mark.parametrize("name", ["gcn", "gat", "appnp"])
def test_no_weight_decay_no_regulariser(tiny, name):
    graph, *_ = tiny
    model = build(name, graph, dataclasses.replace(recipes.RECIPES[name], weight_decay=0.0))
    assert regularizers(model) == []


def test_the_loss_term_and_its_gradient_are_pytorchs(tiny):
    """lambda = 0.1: the model's regularisation loss is 0.05 * sum(W^2) over the first layer's kernel, and its
    gradient 0.1 * W: what torch.optim.Adam(weight_decay=0.1) adds to the gradient (PyG's GCN example)."""
    graph, x, _, _ = tiny
    recipe = dataclasses.replace(recipes.RECIPES["gcn"], weight_decay=0.1)
    keras.utils.set_random_seed(0)
    model = build("gcn", graph, recipe)
    model(x)  # builds the layers
    kernel = next(layer for layer in model.graph_layers if isinstance(layer, layers.SAGALayer)).dense.kernel
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses)
    assert len(model.losses) == 1
    w = kernel.numpy()
    assert float(penalty) == pytest.approx(0.05 * float(np.sum(w ** 2)), rel=1e-6)
    np.testing.assert_allclose(tape.gradient(penalty, kernel).numpy(), 0.1 * w, rtol=1e-6, atol=1e-9)


def test_fit_reports_the_penalty_in_its_loss(tiny):
    """Keras's loss counts the regulariser: the same model with lambda and without differ by lambda/2 sum(W^2)
    on the first step (same initial weights, before any update)."""
    graph, x, labels, (train, _, _) = tiny
    losses = {}
    for decay in (0.0, 0.2):
        recipe = dataclasses.replace(recipes.RECIPES["gcn"], weight_decay=decay, dropout=0.0)
        keras.utils.set_random_seed(0)
        model = build("gcn", graph, recipe)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss=ngra_tf.masked_loss())
        losses[decay] = model.evaluate(x, labels, sample_weight=train, verbose=0)
        kernel = next(layer for layer in model.graph_layers if isinstance(layer, layers.SAGALayer)).dense.kernel
    assert losses[0.2] - losses[0.0] == pytest.approx(0.1 * float(np.sum(kernel.numpy() ** 2)), rel=1e-4)


# ---- callbacks ----


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_callbacks_follow_the_recipe_patience(name):
    recipe = recipes.RECIPES[name]
    found = recipes.callbacks(recipe)
    if recipe.patience is None:
        assert found == []
        return
    (stop,) = found
    assert isinstance(stop, keras.callbacks.EarlyStopping)
    assert (stop.monitor, stop.patience, stop.restore_best_weights) == ("val_loss", recipe.patience, True)


def test_callbacks_of_a_custom_recipe():
    base = recipes.RECIPES["gcn"]
    assert base.patience is None and recipes.callbacks(base) == []
    (stop,) = recipes.callbacks(dataclasses.replace(base, patience=7))
    assert (stop.monitor, stop.patience, stop.restore_best_weights) == ("val_loss", 7, True)
    first, second = recipes.callbacks(recipes.RECIPES["sage"]), recipes.callbacks(recipes.RECIPES["sage"])
    assert first[0] is not second[0]  # a fresh callback per call: one fit's state is not another's


def test_early_stopping_restores_the_best_weights(tiny):
    """With a learning rate that makes validation worse after the first epoch, fit stops after `patience` more
    epochs and the model holds the weights of the best epoch."""
    graph, x, labels, (train, val, _) = tiny
    recipe = dataclasses.replace(recipes.RECIPES["gcn"], dropout=0.0, patience=2, weight_decay=0.0)
    keras.utils.set_random_seed(0)
    model = build("gcn", graph, recipe)
    model.compile(optimizer=keras.optimizers.SGD(-5.0), loss=ngra_tf.masked_loss())  # ascends: val only worsens
    before = model.evaluate(x, labels, sample_weight=val, verbose=0)
    history = model.fit(x, labels, sample_weight=train, epochs=20, verbose=0,
                        validation_data=(x, labels, val), callbacks=recipes.callbacks(recipe))
    val_losses = history.history["val_loss"]
    assert len(val_losses) == 3, val_losses  # the best (epoch 1), then two worse ones
    assert val_losses[0] == min(val_losses) and val_losses[0] > before
    assert model.evaluate(x, labels, sample_weight=val, verbose=0) == pytest.approx(val_losses[0], rel=1e-5)
