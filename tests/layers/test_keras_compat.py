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
