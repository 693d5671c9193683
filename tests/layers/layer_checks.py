"""Shared helpers of the layer tests: small graphs, dense incidence matrices,
weight randomisation, and output/gradient comparison.

The dense formulas of the tests are built from the edges as the caller gave
them (input order), never from the graph's stored order, so they also check
that edge data follows its edges through the CSC re-ordering.
"""

import os
import pathlib

import keras
import numpy as np
import tensorflow as tf

import ngra_tf

ROOT = pathlib.Path(ngra_tf.__file__).resolve().parent.parent
NUM_VERTICES, NUM_EDGES, ACTIVE = 12, 40, 9  # vertices ACTIVE.. have no edges at all


class Edges:
    """Edges as given to Graph.from_edges, and the graph built from them."""

    def __init__(self, src, dst, num_vertices, data=None):
        self.src, self.dst, self.num_vertices, self.data = np.asarray(src), np.asarray(dst), num_vertices, data
        self.graph = ngra_tf.Graph.from_edges(self.src, self.dst, num_vertices, edge_data=data)

    @property
    def num_edges(self):
        return len(self.src)

    def src_incidence(self, dtype=np.float64):
        """S [E, N]: S[e, u] = 1 if edge e leaves u, so S @ x gives each edge its source row."""
        s = np.zeros((self.num_edges, self.num_vertices), dtype)
        s[np.arange(self.num_edges), self.src] = 1
        return tf.constant(s)

    def dst_incidence(self, dtype=np.float64):
        """D [N, E]: D[v, e] = 1 if edge e enters v, so D @ m sums each vertex's in-messages."""
        d = np.zeros((self.num_vertices, self.num_edges), dtype)
        d[self.dst, np.arange(self.num_edges)] = 1
        return tf.constant(d)

    def adjacency(self, weights=None, dtype=np.float64):
        """A [N, N]: A[v, u] = the summed weight (or count) of the edges u -> v; multi-edges add up."""
        a = np.zeros((self.num_vertices, self.num_vertices), dtype)
        np.add.at(a, (self.dst, self.src), 1 if weights is None else weights)
        return tf.constant(a)

    def in_degree(self):
        return np.bincount(self.dst, minlength=self.num_vertices)


def random_edges(seed=0, num_vertices=NUM_VERTICES, num_edges=NUM_EDGES, active=ACTIVE, data="float"):
    """Edges among the first `active` vertices (the rest are isolated: no in- or
    out-edges), with multi-edges, self loops, and a vertex that only sends.

    data: "float" (normal float64 weights), "types3" (int32 edge types in
    [0, 3)) or None.
    """
    rng = np.random.default_rng(seed)
    src = rng.integers(0, active, num_edges)
    dst = rng.integers(1, active, num_edges)  # vertex 0 has no in-edges, only out-edges
    src[0] = 0
    src[-3:], dst[-3:] = src[:3], dst[:3]  # three repeated edges
    src[3] = dst[3] = 4  # self loops
    src[4] = dst[4] = 4
    if data == "float":
        values = rng.normal(size=num_edges)
    elif data == "types3":
        values = rng.integers(0, 3, num_edges).astype(np.int32)
    else:
        values = None
    edges = Edges(src, dst, num_vertices, values)
    degree = edges.in_degree()
    out_degree = np.bincount(src, minlength=num_vertices)
    assert degree[0] == 0 and out_degree[0] > 0  # vertex 0 only sends
    assert np.all(degree[active:] == 0) and np.all(out_degree[active:] == 0)  # isolated
    assert len(set(zip(src.tolist(), dst.tolist()))) < num_edges  # multi-edges
    assert np.any(src == dst)
    assert not np.all(edges.graph.edge_order == np.arange(num_edges))  # re-ordering is exercised
    return edges


def features(rows, width, seed=1, dtype=np.float64):
    return tf.constant(np.random.default_rng(seed).normal(size=(rows, width)).astype(dtype))


def randomize_weights(layer, seed=2, scale=0.5):
    """Every weight of a built layer (biases included) to random values, so that no term is zero."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=scale, size=weight.shape).astype(weight.dtype))


def value_and_grads(fn, x, variables, seed=3):
    """fn(x), and the gradients of sum(fn(x) * c) for a fixed random c w.r.t. x and the variables."""
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = fn(x)
        cotangent = tf.constant(np.random.default_rng(seed).normal(size=out.shape), out.dtype)
        loss = tf.reduce_sum(out * cotangent)
    grads = tape.gradient(loss, [x] + list(variables))
    return out, [None if g is None else tf.convert_to_tensor(g) for g in grads]


def check_against(layer, reference, x, graph, rtol=1e-9, atol=1e-10):
    """The layer's output and its gradients (input and every trainable weight)
    match reference(x), a formula in the same weights."""
    variables = layer.trainable_weights
    assert variables, "the layer has no trainable weights"
    out, grads = value_and_grads(lambda t: layer(t, graph=graph), x, variables)
    want, want_grads = value_and_grads(reference, x, variables)
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=rtol, atol=atol)
    names = ["inputs"] + [v.path for v in variables]
    for name, got, expected in zip(names, grads, want_grads):
        assert got is not None, f"no gradient for {name}"
        assert expected is not None, f"the reference has no gradient for {name}"
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(expected).numpy(),
                                   rtol=rtol, atol=atol, err_msg=name)
        assert np.any(tf.convert_to_tensor(got).numpy() != 0), f"the gradient of {name} is all zero"
    return out


def masked_softmax(scores, mask, axis):
    """softmax over `axis` among the entries where mask holds; all-masked slices give 0."""
    neg = tf.fill(tf.shape(scores), tf.constant(-np.inf, scores.dtype))
    masked = tf.where(mask, scores, neg)
    peak = tf.reduce_max(masked, axis=axis, keepdims=True)
    peak = tf.where(tf.math.is_finite(peak), peak, tf.zeros_like(peak))
    weights = tf.where(mask, tf.exp(scores - tf.stop_gradient(peak)), tf.zeros_like(scores))
    total = tf.reduce_sum(weights, axis=axis, keepdims=True)
    return tf.math.divide_no_nan(weights, total)


def masked_reduce(values, mask, reduce):
    """reduce over axis 1 of values [N, E, F] among mask [N, E]; rows with nothing masked give 0."""
    m = tf.cast(mask, values.dtype)[:, :, None]
    count = tf.reduce_sum(m, axis=1)
    if reduce == "sum":
        return tf.reduce_sum(values * m, axis=1)
    if reduce == "mean":
        return tf.math.divide_no_nan(tf.reduce_sum(values * m, axis=1), count)
    fill = tf.constant(-np.inf if reduce == "max" else np.inf, values.dtype)
    picked = tf.where(mask[:, :, None], values, fill)
    out = tf.reduce_max(picked, axis=1) if reduce == "max" else tf.reduce_min(picked, axis=1)
    return tf.where(count > 0, out, tf.zeros_like(out))


def subprocess_env(**overrides):
    """The environment for a Python subprocess that imports ngra_tf as this one does."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **overrides)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def tiny_classification(seed=0, num_vertices=60, num_edges=240, width=8, classes=3):
    """A small graph with features that predict the labels, and train/val/test masks."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, num_vertices)
    # Edges mostly within a class, so that propagation helps.
    src = rng.integers(0, num_vertices, num_edges)
    same = np.array([rng.choice(np.flatnonzero(labels == labels[u])) for u in src])
    dst = np.where(rng.random(num_edges) < 0.8, same, rng.integers(0, num_vertices, num_edges))
    graph = ngra_tf.Graph.from_edges(src, dst, num_vertices)
    centers = rng.normal(size=(classes, width))
    x = (centers[labels] + rng.normal(scale=1.0, size=(num_vertices, width))).astype(np.float32)
    order = rng.permutation(num_vertices)
    masks = []
    for part in (order[:30], order[30:45], order[45:]):
        mask = np.zeros(num_vertices, np.float32)
        mask[part] = 1
        masks.append(mask)
    return graph, x, labels.astype(np.int64), masks


def reset_keras(seed=0):
    keras.utils.set_random_seed(seed)


def example_train_module():
    """examples/train.py imported once per process (its absl flags can only be defined once)."""
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415

    name = "ngra_example_train"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "train.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def node_masks(dataset):
    """train/val/test masks (float32, one entry per vertex) of a Dataset."""
    out = []
    for index in (dataset.train_index, dataset.val_index, dataset.test_index):
        mask = np.zeros(dataset.graph.num_vertices, np.float32)
        mask[index] = 1
        out.append(mask)
    return out
