"""Shared helpers of the compiler tests: a graph that stresses chunking, the
six models as layer stacks, and running a stack under given plan options."""

import keras
import numpy as np
import tensorflow as tf

import ngra_tf
from ngra_tf import layers

NUM_VERTICES, ACTIVE, HUB = 56, 44, 5  # vertices ACTIVE.. are isolated; HUB receives from almost everyone
IN_WIDTH, HIDDEN, OUT = 12, 6, 4
MODELS = ("gcn", "commnet", "mpgcn", "ggcn", "ggnn", "gat")


def stress_edges(seed=0):
    """(src, dst): sparse random edges among the active vertices, one vertex
    with a very high in-degree, multi-edges and self loops, isolated vertices."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, ACTIVE, 70)
    dst = rng.integers(0, ACTIVE, 70)
    hub_src = np.arange(ACTIVE)
    src = np.concatenate([src, hub_src, hub_src[:5]])  # the last five repeat hub edges
    dst = np.concatenate([dst, np.full(ACTIVE, HUB), np.full(5, HUB)])
    return src, dst


def graph_for(model, seed=0):
    """The stress graph with the edge data `model` reads."""
    src, dst = stress_edges(seed)
    if model == "gcn":
        plain = ngra_tf.Graph.from_edges(src, dst, NUM_VERTICES)
        return plain.with_edge_data(plain.gcn_norm())
    if model == "ggnn":
        types = np.random.default_rng(seed + 1).integers(0, 3, len(src)).astype(np.int32)
        return ngra_tf.Graph.from_edges(src, dst, NUM_VERTICES, edge_data=types)
    return ngra_tf.Graph.from_edges(src, dst, NUM_VERTICES)


def stack_for(model):
    """Two graph layers (with a projection where the model needs square widths), built and randomised."""
    if model == "gcn":
        stack = [layers.GCN(HIDDEN, activation="relu"), layers.GCN(OUT)]
    elif model == "commnet":
        stack = [layers.CommNet(HIDDEN, activation="tanh"), layers.CommNet(OUT)]
    elif model == "mpgcn":
        stack = [layers.MaxPoolGCN(HIDDEN, activation="relu"), layers.MaxPoolGCN(OUT, pool_activation="tanh")]
    elif model == "ggcn":
        stack = [keras.layers.Dense(HIDDEN), layers.GatedGCN(HIDDEN, activation="relu"), layers.GatedGCN(OUT)]
    elif model == "ggnn":
        stack = [keras.layers.Dense(HIDDEN), layers.GGNN(HIDDEN, num_edge_types=3),
                 layers.GGNN(HIDDEN, num_edge_types=3)]
    elif model == "gat":
        stack = [layers.GAT(3, heads=2, activation="elu"), layers.GAT(OUT, heads=1, concat_heads=False)]
    else:
        raise ValueError(model)
    graph = graph_for(model)
    run(stack, graph.partition(1), features())  # builds
    rng = np.random.default_rng(7)
    for layer in stack:
        for weight in layer.weights:
            if weight.trainable:
                weight.assign(rng.normal(scale=0.5, size=weight.shape).astype(weight.dtype))
    return stack


def features(seed=1, width=IN_WIDTH):
    return tf.constant(np.random.default_rng(seed).normal(size=(NUM_VERTICES, width)).astype(np.float32))


def run(stack, partition, x, schedule="ngra", rewrites=True):
    for layer in stack:
        if isinstance(layer, ngra_tf.SAGALayer):
            x = layer(x, graph=partition, schedule=schedule, rewrites=rewrites)
        else:
            x = layer(x)
    return x


def value_and_grads(stack, partition, x, schedule="ngra", rewrites=True):
    """Output, and gradients of a fixed random projection of it w.r.t. x and every trainable weight."""
    variables = [w for layer in stack for w in layer.trainable_weights]
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = run(stack, partition, x, schedule, rewrites)
        cotangent = tf.constant(np.random.default_rng(3).normal(size=out.shape), out.dtype)
        loss = tf.reduce_sum(out * cotangent)
    grads = tape.gradient(loss, [x] + variables)
    names = ["inputs"] + [w.path for w in variables]
    return out.numpy(), {name: None if g is None else tf.convert_to_tensor(g).numpy() for name, g in zip(names, grads)}


def assert_close(got, want, what, rtol=1e-5):
    """Equal within rtol, relative to the largest magnitude of `want` for entries near zero."""
    assert got is not None, f"no gradient for {what}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-30), err_msg=what)
