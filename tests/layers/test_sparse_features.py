"""Sparse input features (a scipy.sparse matrix or a tf.SparseTensor) in memory on one device: every recipe trains,
predicts and evaluates on Cora exactly as it does on the same features dense, chunked or not, whichever form the
sparse rows come in; a SAGA layer called alone on sparse rows equals its dense call; sparse rows get no gradient;
a store-backed model and one over several devices refuse them.

Dropout is the recipe's: sparse rows drop exactly the entries dense dropout drops (ngra_tf.layers.Dropout), so
from one seed both runs draw the same weights and masks, and the losses agree to float32 rounding. GAT's attention
dropout is 0: edge stages draw per chunk, so its masks change with P (docs/architecture/runtime.md, Random state). The dense reference is one run per model at one chunk (chunks change
no result: tests/compiler/test_compiler_invariance.py), so every sparse case is checked against the same numbers.
The default suite keeps gcn with scipy CSR rows at P = 1 and appnp (sparse rows into Keras's Dense, not a SAGA
layer) with tf.SparseTensor rows at P = 3; the whole model x form x chunks matrix is slow.
"""

import dataclasses

import keras
import numpy as np
import pytest
import scipy.sparse as sp
import tensorflow as tf

import ngra_tf
from ngra_tf import layers, recipes
from ngra_tf.compiler import replay
from ngra_tf.graph import datasets
from ngra_tf.store import write_store

MODELS = ("gcn", "sage", "gin", "gat", "appnp", "resgcn")
EPOCHS = 3
DEFAULT = {("gcn", "csr", 1), ("appnp", "tf", 3)}  # the rest of the matrix is slow


@pytest.fixture(scope="module")
def cora():
    data = datasets.cora()
    x = data.training_features(sparse=True)
    assert isinstance(x, sp.csr_matrix) and x.dtype == np.float32
    return data, x


def sparse_tensor(x):
    """A scipy matrix as a tf.SparseTensor, its entries in row-major order."""
    coo = x.tocoo()
    return tf.sparse.reorder(tf.SparseTensor(np.stack([coo.row, coo.col], 1).astype(np.int64), coo.data, coo.shape))


def run(data, name, x, **options):
    """3 epochs of the recipe from seed 0: the losses, predict()'s logits and evaluate()'s metrics."""
    recipe = recipes.RECIPES[name]
    assert recipe.dropout > 0
    keras.utils.set_random_seed(0)
    extra = {"attention_dropout": 0.0} if name == "gat" else {}
    model = recipes.build_model(name, recipes.prepare_graph(name, data.graph), data.num_classes, recipe=recipe,
                                num_features=data.num_features, sparse=not isinstance(x, np.ndarray), **extra,
                                **options)
    model.compile(optimizer=keras.optimizers.Adam(recipe.learning_rate), loss=ngra_tf.masked_loss(),
                  weighted_metrics=["accuracy"])
    history = model.fit(x, data.labels, sample_weight=data.train_mask, epochs=EPOCHS, verbose=0)
    logits = model.predict(x, verbose=0)
    metrics = model.evaluate(x, data.labels, sample_weight=data.test_mask, verbose=0, return_dict=True)
    return np.array(history.history["loss"]), logits, metrics


_dense_runs = {}


def dense_run(cora, name):
    if name not in _dense_runs:
        data, x = cora
        _dense_runs[name] = run(data, name, x.toarray())
    return _dense_runs[name]


def assert_same_run(actual, expected):
    losses, logits, metrics = actual
    dense_losses, dense_logits, dense_metrics = expected
    assert len(losses) == EPOCHS and np.all(np.diff(dense_losses) < 0), dense_losses  # it trains
    np.testing.assert_allclose(losses, dense_losses, rtol=1e-5)
    assert logits.shape == dense_logits.shape
    np.testing.assert_allclose(logits, dense_logits, rtol=0, atol=1e-4 * np.abs(dense_logits).max())
    assert metrics["accuracy"] == dense_metrics["accuracy"], (metrics, dense_metrics)
    assert metrics["loss"] == pytest.approx(dense_metrics["loss"], rel=1e-5)


def _matrix():
    """Each model in both forms, one at P = 1 and the other at P = 3 (which goes with which alternating by model:
    the whole product took 15 minutes of a 2-core CI machine)."""
    for i, name in enumerate(MODELS):
        for form in ("csr", "tf"):
            for chunks in (1, 3):
                if (i + (form == "tf") + (chunks == 3)) % 2 and (name, form, chunks) not in DEFAULT:
                    continue
                marks = () if (name, form, chunks) in DEFAULT else (pytest.mark.slow,)
                yield pytest.param(name, form, chunks, marks=marks, id=f"{name}-{form}-P{chunks}")


@pytest.mark.parametrize("name, form, chunks", list(_matrix()))
def test_sparse_features_train_like_dense(cora, name, form, chunks):
    data, x = cora
    features = x if form == "csr" else sparse_tensor(x)
    assert_same_run(run(data, name, features, chunks=chunks), dense_run(cora, name))


@pytest.mark.parametrize("name", [  # (make test: the custom layers below densify quicker)
    pytest.param("gcn", marks=pytest.mark.slow),
    pytest.param("appnp", marks=pytest.mark.slow),  # (its first SAGA layer reads Dense's output: nothing to densify)
    pytest.param("gat", marks=pytest.mark.slow),  # (sage, gin and resgcn: sparse with rewrites, test above)
])
def test_without_rewrites_sparse_features_are_densified_and_train_like_dense(cora, name):
    data, x = cora
    assert_same_run(run(data, name, x, rewrites=[]), dense_run(cora, name))


@pytest.mark.slow
def test_unordered_entries_and_other_scipy_formats(cora):
    """A tf.SparseTensor whose entries are in no order, and CSC and COO (with duplicate entries that add up)."""
    data, x = cora
    coo = x.tocoo()
    order = np.random.default_rng(0).permutation(coo.nnz)
    indices = np.stack([coo.row, coo.col], 1)[order].astype(np.int64)
    half = coo.data[order] / 2
    duplicated = sp.coo_matrix((np.concatenate([half, half]), (np.tile(indices[:, 0], 2), np.tile(indices[:, 1], 2))),
                               coo.shape)
    for features in (tf.SparseTensor(indices, coo.data[order], coo.shape), x.tocsc(), duplicated):
        assert_same_run(run(data, "gcn", features), dense_run(cora, "gcn"))


def test_sparse_features_get_no_gradient_and_the_weights_the_same(cora):
    data, x = cora
    grads = {}
    for form in ("dense", "sparse"):
        keras.utils.set_random_seed(0)
        model = recipes.build_model("gcn", recipes.prepare_graph("gcn", data.graph), data.num_classes,
                                    recipe=dataclasses.replace(recipes.RECIPES["gcn"], dropout=0.0))
        if form == "dense":
            values = tf.Variable(x.toarray())
            features = values
        else:
            st = sparse_tensor(x)
            values = tf.Variable(st.values)
            features = tf.SparseTensor(st.indices, values, st.dense_shape)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(features, training=True) ** 2)
        d_values, *d_weights = tape.gradient(loss, [values] + model.trainable_weights)
        grads[form] = float(loss), d_values, d_weights
    (dense_loss, d_dense_x, d_dense), (sparse_loss, d_sparse_x, d_sparse) = grads["dense"], grads["sparse"]
    assert d_sparse_x is None and d_dense_x is not None and float(tf.reduce_max(tf.abs(d_dense_x))) > 0
    assert sparse_loss == pytest.approx(dense_loss, rel=1e-6)
    assert len(d_sparse) == len(d_dense) == 4
    for a, b in zip(d_sparse, d_dense):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6 * float(tf.reduce_max(tf.abs(b))))


# ---- a SAGA layer alone ----


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    n, e = 30, 120
    graph = ngra_tf.Graph.from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n,
                                     edge_data=rng.uniform(0.1, 1.0, e).astype(np.float32))
    dense = sp.random(n, 12, density=0.2, random_state=1, dtype=np.float32).toarray()
    dense[3] = 0  # a row with nothing stored
    x = sp.csr_matrix(dense)
    assert x.nnz > 0 and x[3].nnz == 0
    return graph, x


@pytest.mark.parametrize("make", [lambda: layers.GCN(4, activation="tanh"), lambda: layers.GAT(3, heads=2),
                                  lambda: layers.GraphSAGE(5), lambda: layers.GIN(4, train_eps=True)],
                         ids=["GCN", "GAT", "GraphSAGE", "GIN"])
def test_a_layer_called_alone_on_sparse_rows_equals_its_dense_call(small, make):
    graph, x = small
    layer = make()
    dense = layer(x.toarray(), graph=graph).numpy()
    assert np.abs(dense).max() > 0
    for g in (graph, graph.partition(3)):  # the whole graph, and chunk by chunk
        out = layer(sparse_tensor(x), graph=g)
        assert isinstance(out, tf.Tensor) and out.shape == dense.shape
        np.testing.assert_allclose(out.numpy(), dense, rtol=1e-5, atol=1e-6)


class TanhMessages(ngra_tf.SAGALayer):
    """tanh(src): the edge stage reads the rows themselves (no matmul first)."""

    def apply_edge(self, edge):
        return tf.tanh(edge.src)


class SigmoidGate(ngra_tf.SAGALayer):
    """relu(src W) * sigmoid(dst[:, :6]): the slice hoists, so the replay meets the sparse rows in a StridedSlice."""

    accumulator = "sum|max"

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 6), initializer="glorot_uniform")

    def apply_edge(self, edge):
        return tf.nn.relu(edge.src @ self.w) * tf.sigmoid(edge.dst[:, :6])


@pytest.mark.parametrize("layer_type, op", [(TanhMessages, "Tanh"), (SigmoidGate, "StridedSlice")])
def test_custom_layers_densify_sparse_rows_where_no_matmul_reads_them(small, monkeypatch, layer_type, op):
    graph, x = small
    warnings = []
    monkeypatch.setattr(replay.logging, "log_first_n",
                        lambda level, message, n, *args: warnings.append((level, n, message % args)))
    layer = layer_type()
    dense = layer(x.toarray(), graph=graph).numpy()
    assert not warnings
    out = layer(sparse_tensor(x), graph=graph)
    np.testing.assert_allclose(out.numpy(), dense, rtol=1e-5, atol=1e-6)
    assert [(level, n) for level, n, _ in warnings] == [(replay.logging.WARNING, 1)], warnings
    assert f"sparse rows reach {op} " in warnings[0][2] and "densified" in warnings[0][2], warnings


# ---- where sparse features are refused ----


def test_sparse_features_over_several_devices_are_refused(small):
    graph, x = small
    assert len(tf.config.list_logical_devices("CPU")) >= 2  # (conftest splits the CPU)
    labels, mask = np.arange(graph.num_vertices) % 3, np.ones(graph.num_vertices, np.float32)
    model = ngra_tf.GraphModel(graph, [layers.GCN(4, activation="relu"), layers.GCN(3)], chunks=2, devices=2)
    model.compile(optimizer="adam", loss=ngra_tf.masked_loss())
    with pytest.raises(ValueError, match="sparse features in memory train on one device; .*train from a store"):
        model.fit(x, labels, sample_weight=mask, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="sparse features in memory train on one device; .*train from a store"):
        model.predict(sparse_tensor(x), verbose=0)


def test_sparse_features_are_refused_by_a_store_backed_model(small, tmp_path):
    graph, x = small
    labels = np.arange(graph.num_vertices) % 3
    store = write_store(tmp_path / "store", graph, 2, vertex_data={
        "features": x.toarray(), "labels": labels, "train_mask": np.ones(graph.num_vertices, bool)})
    model = ngra_tf.GraphModel(store, [layers.GCN(4, activation="relu"), layers.GCN(3)])
    model.compile(optimizer="adam", loss=ngra_tf.masked_loss())
    for features in (x, sparse_tensor(x)):
        # (the model refuses any features but its store's before the executor's own "sparse features" check)
        with pytest.raises(ValueError, match=r"reads its features from its store: pass store\.array"):
            model.fit(features, store.array("labels"), sample_weight=store.array("train_mask"), epochs=1, verbose=0)

