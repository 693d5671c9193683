"""The TensorFlow internal ngra-tf relies on, kept here with a test (tests/runtime/test_tf_compat.py).

A `tf.custom_gradient` traced into a graph is registered in TensorFlow's
process-wide gradient registry under a fresh name ("CustomGradient-<uid>")
and never removed; the entry holds the traced output, hence the whole traced
graph (~25-30 MB for a GCN on Cora). Two are made per training trace: the
executor's backward, and Keras's optimizer's (its all-reduce of the
gradients, even on one device). A process that builds and drops models in a
loop would keep every one of them. TensorFlow has no public way to
unregister a gradient, so the executor records the names it registered
(`registered_gradient`), GraphModel those registered while it runs
(`gradients_registered`), and `forget_gradients` removes them when the
executor or the model is released.

A function traced for XLA (`tf.function(jit_compile=True)`, what Keras's
`jit_compile=True` makes) cannot hold ops without an XLA lowering, such as
the op library's; TensorFlow marks such a trace by entering an XLA
control-flow context, which `traced_for_xla` reads, so that a layer can
choose TensorFlow's own ops there.
"""

from __future__ import annotations

import contextlib

from tensorflow.python.framework import ops as _tf_ops
from tensorflow.python.ops import control_flow_util as _control_flow_util

_GRADIENT_TYPE = "_gradient_op_type"  # the attribute gradient_override_map sets on the op
_PREFIX = "CustomGradient-"  # (tensorflow/python/ops/custom_gradient.py, generate_name)


def registered_gradient(tensor) -> str | None:
    """The registry name of the custom gradient whose output `tensor` is (graph mode), else None."""
    try:
        op = tensor.op  # (an eager tensor has none)
    except AttributeError:
        return None
    try:
        name = op.get_attr(_GRADIENT_TYPE)
    except ValueError:
        return None
    return name.decode() if isinstance(name, bytes) else name


@contextlib.contextmanager
def gradients_registered(names: list):
    """Appends to `names` the custom gradients registered inside the block."""
    registry = _tf_ops._gradient_registry._registry
    before = set(registry)
    try:
        yield
    finally:
        names.extend(name for name in list(registry) if name not in before and name.startswith(_PREFIX))


def forget_gradients(names):
    """Removes registered gradients by name (those already gone are skipped); empties `names`."""
    registry = _tf_ops._gradient_registry._registry
    for name in names:
        registry.pop(name, None)
    names.clear()


def traced_for_xla() -> bool:
    """Whether the graph being traced now will be compiled by XLA (False eagerly)."""
    return bool(_control_flow_util.GraphOrParentsInXlaContext(_tf_ops.get_default_graph()))


__all__ = ["forget_gradients", "gradients_registered", "registered_gradient", "traced_for_xla"]
