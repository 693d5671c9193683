"""The Keras internals ngra-tf relies on, kept here with a test (tests/layers/test_keras_compat.py).

The compiler traces a layer's sublayers outside Keras's own `layer(x,
training=...)` call (the executor compiles a layer's kernels before any
call, e.g. for a store), yet sublayers such as Dropout must see `training`
as if inside that call. Keras 3 has no public way to set the call context,
so this uses Layer._get_call_context / _maybe_reset_call_context.

GraphModel cuts a functional model at its graph layers, so it needs each
layer's call *in that model*: the tensors it read and made. The public
`layer.input` / `layer.output` give a layer's first call anywhere, which is
another model's when a layer is shared; `functional_calls` reads the model's
own nodes instead (Functional._nodes, Operation._inbound_nodes).

A subclassed Keras model that calls SAGA layers is first run *symbolically*
by Keras to learn its output (Model.compute_output_spec, inside a
SymbolicScope and a StatelessScope, where variables read as their initial
values): a layer must not compile its program there, or the program would
hold the initial weights as constants. `in_symbolic_build` says when.
"""

from __future__ import annotations

import contextlib

import keras
from keras.src.backend.common.symbolic_scope import in_symbolic_scope


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


def functional_calls(network) -> list:
    """[(layer, input tensors (a flat list), output tensors (a list))] of every call in the functional model
    `network`, in an order that runs (input layers left out)."""
    own = network._nodes
    calls = []
    for op in network.operations:
        if isinstance(op, keras.layers.InputLayer):
            continue
        for index, node in enumerate(op._inbound_nodes):
            if f"{id(op)}_ib-{index}" in own:  # (keras.src.ops.function.make_node_key)
                calls.append((op, list(keras.tree.flatten(node.input_tensors)),
                              list(keras.tree.flatten(node.output_tensors))))
    return calls


def in_symbolic_build() -> bool:
    """Whether Keras is running a call symbolically, only to learn its output's shape (see the module doc)."""
    return in_symbolic_scope()


__all__ = ["functional_calls", "in_symbolic_build", "training_context"]
