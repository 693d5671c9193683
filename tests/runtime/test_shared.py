"""Shared stage functions: traced once, called per layer with that layer's arguments, never specialised per call
site."""

import numpy as np
import tensorflow as tf

from ngra_tf.runtime.shared import SharedFunctions


def test_one_trace_for_every_call_site_and_no_constant_arguments():
    # Grappler's function optimizer specialises a function for a call site that passes it a constant (a spill
    # prefix, a cache offset): a copy of the body per layer, which a 16-layer residual GCN paid 245 MiB for.
    shared, traces = SharedFunctions(), []

    def body(args):
        traces.append(1)
        return {"y": args["x"] * tf.cast(args["scale"], tf.float32), "name": tf.strings.join([args["prefix"], "f"])}

    @tf.function
    def run(x):
        first = shared(("scale",), body, {"x": x, "scale": tf.constant(2), "prefix": "a/"}, "Scale")
        second = shared(("scale",), body, {"x": first["y"], "scale": tf.constant(3), "prefix": "b/"}, "Scale")
        return first, second

    first, second = run(tf.ones([2]))
    np.testing.assert_array_equal(second["y"].numpy(), [6.0, 6.0])
    assert (first["name"].numpy(), second["name"].numpy()) == (b"a/f", b"b/f")
    assert len(traces) == 1
    graph = run.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    calls = [op for op in graph.get_operations() if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
    assert len(calls) == 2
    assert all(t.op.type != "Const" for call in calls for t in call.inputs), \
        [[t.op.type for t in call.inputs] for call in calls]
