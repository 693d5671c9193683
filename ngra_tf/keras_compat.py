"""The one Keras internal ngra-tf relies on, kept here with a test (tests/layers/test_keras_compat.py).

The compiler traces a layer's sublayers outside Keras's own `layer(x,
training=...)` call (the executor compiles a layer's kernels before any
call, e.g. for a store), yet sublayers such as Dropout must see `training`
as if inside that call. Keras 3 has no public way to set the call context,
so this uses Layer._get_call_context / _maybe_reset_call_context.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def training_context(layer, training: bool):
    """Layers called inside see `training` (unless given one), as inside `layer(..., training=training)`."""
    context = layer._get_call_context()
    previous = context.get_value("training")
    context.set_value("training", bool(training))
    try:
        yield
    finally:
        context.set_value("training", previous)
        layer._maybe_reset_call_context()


__all__ = ["training_context"]
