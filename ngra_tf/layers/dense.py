"""The dense transform most SAGA layers end with, act(x W + b), with Keras's arguments."""

import keras


class DenseVertexMixin:
    """Adds `units`, `activation`, `use_bias` and the kernel/bias initialisers
    and regularisers to a SAGA layer: `self.dense` is the linear part and
    `self.activation` the non-linearity, kept apart so that a layer can add
    other terms before activating. Sublayers take the layer's dtype policy,
    so that e.g. dtype="float64" computes in float64 throughout."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        if int(units) != units or units < 1:
            raise ValueError(f"units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.activation = keras.activations.get(activation)
        self.dense = keras.layers.Dense(
            self.units, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, name="dense", dtype=self.dtype_policy)

    def linear(self, units=None, use_bias=False, name=None):
        """Another weight matrix with this layer's kernel initialiser and regulariser
        (and, with use_bias, a bias with this layer's bias initialiser and regulariser)."""
        return keras.layers.Dense(units or self.units, use_bias=use_bias, name=name,
                                  kernel_initializer=self.dense.kernel_initializer,
                                  kernel_regularizer=self.dense.kernel_regularizer,
                                  bias_initializer=self.dense.bias_initializer,
                                  bias_regularizer=self.dense.bias_regularizer, dtype=self.dtype_policy)

    def get_config(self):
        config = super().get_config()
        dense = self.dense.get_config()
        config.update({key: dense[key] for key in ("units", "use_bias", "kernel_initializer", "bias_initializer",
                                                   "kernel_regularizer", "bias_regularizer")})
        config["activation"] = keras.activations.serialize(self.activation)
        return config
