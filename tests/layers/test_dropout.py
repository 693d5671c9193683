"""ngra_tf.layers.Dropout: on a tf.SparseTensor it drops stored values only (same indices and dense shape, kept
values scaled by 1 / (1 - rate)), and exactly those keras.layers.Dropout with the same seed drops from the dense
rows; on dense rows it is keras.layers.Dropout; it serialises as itself."""

import keras
import numpy as np
import pytest
import scipy.sparse as sp
import tensorflow as tf

import ngra_tf
from ngra_tf import layers, tf_compat

RATE = 0.3


def sparse_rows(rows=400, width=500, density=0.1, seed=0):
    """A tf.SparseTensor of positive values (none of them zero, so a zero in the output is a dropped value)."""
    x = sp.random(rows, width, density=density, random_state=seed, dtype=np.float32,
                  data_rvs=lambda n: np.random.default_rng(seed).uniform(0.5, 1.5, n)).tocoo()
    indices = np.stack([x.row, x.col], 1).astype(np.int64)
    return tf.sparse.reorder(tf.SparseTensor(indices, x.data.astype(np.float32), x.shape))


def test_sparse_rows_drop_stored_values_only():
    x = sparse_rows()
    n = int(x.values.shape[0])
    assert n == 20_000
    out = layers.Dropout(RATE, seed=3)(x, training=True)
    assert isinstance(out, tf.SparseTensor)
    np.testing.assert_array_equal(out.indices.numpy(), x.indices.numpy())
    np.testing.assert_array_equal(out.dense_shape.numpy(), x.dense_shape.numpy())
    assert out.shape == x.shape == (400, 500)
    values, kept = out.values.numpy(), out.values.numpy() != 0
    np.testing.assert_allclose(values[kept], x.values.numpy()[kept] / (1 - RATE), rtol=1e-6)
    # About RATE of them dropped: the binomial's standard deviation is sqrt(0.3 * 0.7 / 20000) = 0.0032.
    assert abs((~kept).mean() - RATE) < 0.015, (~kept).mean()
    # Each value alone: dropped values are spread over the rows and the columns, not whole rows or columns.
    dropped = x.indices.numpy()[~kept]
    assert len(np.unique(dropped[:, 0])) > 350 and len(np.unique(dropped[:, 1])) > 400


def test_a_second_call_draws_another_mask_and_the_expectation_is_kept():
    x = sparse_rows(rows=100, width=100, density=0.5, seed=1)
    layer = layers.Dropout(0.5, seed=4)
    first, second = (layer(x, training=True).values.numpy() for _ in range(2))
    assert not np.array_equal(first != 0, second != 0)
    # The mean over many draws approaches the input (dropout keeps the expectation).
    draws = np.mean([layer(x, training=True).values.numpy() for _ in range(200)], axis=0)
    assert abs(draws.sum() / x.values.numpy().sum() - 1) < 0.01


@pytest.mark.parametrize("training", [False, None])
def test_not_training_passes_sparse_rows_through(training):
    x = sparse_rows(rows=50, width=40)
    out = layers.Dropout(0.9, seed=0)(x, training=training)
    np.testing.assert_array_equal(out.indices.numpy(), x.indices.numpy())
    np.testing.assert_array_equal(out.values.numpy(), x.values.numpy())
    np.testing.assert_array_equal(out.dense_shape.numpy(), x.dense_shape.numpy())


def test_rate_zero_keeps_every_value():
    x = sparse_rows(rows=50, width=40)
    out = layers.Dropout(0.0)(x, training=True)
    np.testing.assert_array_equal(out.values.numpy(), x.values.numpy())


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("traced", [False, True])
def test_sparse_rows_drop_what_dense_dropout_drops_with_the_same_seed(dtype, traced):
    """Call after call (the seed generators advance alike), eagerly and traced: the sparse output densified is
    keras.layers.Dropout's output on the dense rows, bit for bit."""
    x = sparse_rows(rows=60, width=50, density=0.2)
    x = tf.SparseTensor(x.indices, tf.cast(x.values, dtype), x.dense_shape)
    dense = tf.sparse.to_dense(x)
    ours, theirs = layers.Dropout(RATE, seed=5, dtype=dtype), keras.layers.Dropout(RATE, seed=5, dtype=dtype)
    drop_sparse = lambda: tf.sparse.to_dense(ours(x, training=True))  # noqa: E731
    drop_dense = lambda: theirs(dense, training=True)  # noqa: E731
    if traced:
        drop_sparse, drop_dense = tf.function(drop_sparse), tf.function(drop_dense)
    for _ in range(3):
        a, b = drop_sparse().numpy(), drop_dense().numpy()
        assert a.dtype == dtype.as_numpy_dtype and 0 < np.mean(a[dense.numpy() != 0] == 0) < 1
        np.testing.assert_array_equal(a, b)


def test_rate_one_drops_every_value():
    out = layers.Dropout(1.0)(sparse_rows(rows=10, width=10), training=True)
    assert out.values.shape == (10,) and not np.any(out.values.numpy())


@pytest.mark.parametrize("noise_shape", [None, (None, 1), (1, 20)])
@pytest.mark.parametrize("training", [True, False])
def test_dense_rows_are_keras_dropout(noise_shape, training):
    x = tf.random.stateless_uniform((30, 20), seed=(1, 2), minval=0.5, maxval=1.5)
    ours = layers.Dropout(RATE, noise_shape=noise_shape, seed=11)
    theirs = keras.layers.Dropout(RATE, noise_shape=noise_shape, seed=11)
    for _ in range(2):  # the second call too: both seed generators advance alike
        a, b = ours(x, training=training), theirs(x, training=training)
        assert isinstance(a, tf.Tensor)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    if training:
        assert 0 < np.mean(a.numpy() == 0) < 1
        if noise_shape == (None, 1):  # whole rows dropped together
            assert set(np.unique(np.mean(a.numpy() == 0, axis=1))) <= {0.0, 1.0}
    else:
        np.testing.assert_array_equal(a.numpy(), x.numpy())


def test_noise_shape_with_sparse_rows_is_refused():
    layer = layers.Dropout(RATE, noise_shape=(None, 1), name="rows_dropout")
    with pytest.raises(ValueError, match="rows_dropout: noise_shape applies to dense rows"):
        layer(sparse_rows(rows=10, width=10), training=True)


def test_sparse_rows_in_a_traced_function_keep_their_static_shape():
    """Inside a tf.function a SparseTensor built there knows no static shape; the output gets the input's."""
    x = sparse_rows(rows=20, width=30, density=0.3)
    layer = layers.Dropout(RATE, seed=2)
    shapes = []

    @tf.function
    def drop(values):
        rows = tf.SparseTensor(x.indices, values, x.dense_shape)
        rows.set_shape((20, 30))
        out = layer(rows, training=True)
        shapes.append(out.shape)
        return out.values

    values = drop(x.values).numpy()
    assert shapes == [(20, 30)]
    kept = values != 0
    np.testing.assert_allclose(values[kept], x.values.numpy()[kept] / (1 - RATE), rtol=1e-6)


def test_in_a_functional_model_on_a_sparse_input():
    inputs = keras.Input((30,), sparse=True)
    model = keras.Model(inputs, layers.Dropout(RATE, seed=0)(inputs))
    x = sparse_rows(rows=20, width=30, density=0.3)
    out = model(x, training=False)
    assert isinstance(out, tf.SparseTensor) and out.shape == (20, 30)
    np.testing.assert_array_equal(out.values.numpy(), x.values.numpy())
    dropped = model(x, training=True)
    assert isinstance(dropped, tf.SparseTensor) and 0 < np.mean(dropped.values.numpy() == 0) < 1


def test_serialisation_round_trip():
    layer = layers.Dropout(0.25, noise_shape=(None, 1), seed=9, name="drop")
    assert layers.Dropout is ngra_tf.layers.Dropout and issubclass(layers.Dropout, keras.layers.Dropout)
    config = keras.saving.serialize_keras_object(layer)
    assert config["registered_name"] == "ngra_tf>Dropout"
    again = keras.saving.deserialize_keras_object(config)
    assert type(again) is layers.Dropout
    assert (again.rate, tuple(again.noise_shape), again.seed, again.name) == (0.25, (None, 1), 9, "drop")
    assert again.get_config() == layer.get_config()


def test_a_saved_model_with_dropout_loads_it_as_ngra_dropout(tmp_path):
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(2)(layers.Dropout(0.4)(inputs)))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert [type(layer) for layer in loaded.layers[1:]] == [layers.Dropout, keras.layers.Dense]
    assert loaded.layers[1].rate == 0.4
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_dense_rows_train_as_with_keras_dropout(dtype):
    """In a traced training step the one-pass dropout (NgraDropout) gives keras.layers.Dropout's output and
    gradients, step after step."""
    x = tf.cast(tf.random.stateless_normal((40, 30), (1, 2)), dtype)
    w = tf.Variable(tf.cast(tf.random.stateless_normal((30, 5), (3, 4)), dtype))
    ours, theirs = layers.Dropout(RATE, seed=7, dtype=dtype), keras.layers.Dropout(RATE, seed=7, dtype=dtype)

    def step(layer):
        with tf.GradientTape() as tape:
            h = layer(x @ tf.ones((30, 30), dtype), training=True)
            loss = tf.reduce_sum(tf.tanh(h @ w))
        return loss, tape.gradient(loss, w)

    ours_step, theirs_step = tf.function(lambda: step(ours)), tf.function(lambda: step(theirs))
    ops = [op.type for op in ours_step.get_concrete_function().graph.get_operations()]
    assert "NgraDropout" in ops
    for _ in range(3):
        (a, da), (b, db) = ours_step(), theirs_step()
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(da.numpy(), db.numpy())


def test_dense_rows_traced_for_xla_use_keras_dropout():
    """Keras's jit_compile=True compiles the step with XLA, which cannot hold the op library's ops: there the
    layer is keras's dropout (XLA fuses it), so a model that trained with keras.layers.Dropout still trains."""
    x = tf.random.stateless_normal((64, 16), (1, 2))
    y = np.random.default_rng(0).integers(0, 3, 64)
    inputs = keras.Input((16,))
    outputs = keras.layers.Dense(3)(layers.Dropout(RATE, seed=1)(keras.layers.Dense(8)(inputs)))
    model = keras.Model(inputs, outputs)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    history = model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # (XLA draws its own stateless uniforms, unlike TensorFlow's kernels: compare within XLA)
    seen, ours, plain = [], layers.Dropout(RATE, seed=3), keras.layers.Dropout(RATE, seed=3)
    xla_ours = tf.function(lambda v: seen.append(tf_compat.traced_for_xla()) or ours(v, training=True),
                           jit_compile=True)
    xla_plain = tf.function(lambda v: plain(v, training=True), jit_compile=True)
    np.testing.assert_array_equal(xla_ours(x).numpy(), xla_plain(x).numpy())
    assert seen == [True] and not tf_compat.traced_for_xla()
