"""ngra_tf.keras_compat: the one Keras internal used (the call context's `training`) still does what it must."""

import keras
import numpy as np

from ngra_tf.keras_compat import training_context


def test_layers_inside_see_the_training_flag_and_it_is_reset_after():
    parent, dropout = keras.layers.Dense(1), keras.layers.Dropout(0.5, seed=1)
    ones = np.ones((1000, 4), np.float32)
    with training_context(parent, True):
        dropped = np.asarray(dropout(ones))
        explicit = np.asarray(dropout(ones, training=False))  # an explicit argument still wins
    assert 0.3 < (dropped == 0).mean() < 0.7
    np.testing.assert_array_equal(explicit, ones)
    with training_context(parent, False):
        np.testing.assert_array_equal(np.asarray(dropout(ones)), ones)
    np.testing.assert_array_equal(np.asarray(dropout(ones)), ones)  # no context left behind: inference


def test_functional_calls_are_the_models_own_even_for_a_shared_layer():
    from ngra_tf.keras_compat import functional_calls  # noqa: PLC0415

    dense, add = keras.layers.Dense(3, name="shared_dense"), keras.layers.Add(name="join")
    other = keras.Input((3,))
    dense(other)  # a call in another graph first: layer.input would name this one
    x = keras.Input((3,))
    h = dense(x)
    model = keras.Model(x, add([h, x]))
    calls = functional_calls(model)
    assert [op.name for op, _, _ in calls] == ["shared_dense", "join"]
    assert calls[0][1] == [x] and calls[0][2] == [h]
    assert calls[1][1] == [h, x] and calls[1][2] == list(model.outputs)


def test_in_symbolic_build_is_true_only_while_keras_learns_an_output_shape():
    from ngra_tf.keras_compat import in_symbolic_build  # noqa: PLC0415

    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(in_symbolic_build())
            return x

    class Subclassed(keras.Model):  # Keras runs its first call symbolically to learn the output
        def __init__(self):
            super().__init__()
            self.probe = Probe()

        def call(self, x):
            return self.probe(x)

    Subclassed()(np.ones((2, 3), np.float32))
    assert seen[0] is True and seen[-1] is False
    assert not in_symbolic_build()
