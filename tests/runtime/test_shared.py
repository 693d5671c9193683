"""Shared stage functions: traced once, called per layer with that layer's arguments, never specialised per call
site."""

import keras
import numpy as np
import tensorflow as tf

import ngra_tf
from ngra_tf import layers
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


def test_in_memory_the_shared_functions_hold_the_chunk_loops_alone():
    # In memory a graph layer's hoist and ApplyVertex run once a step, under tapes the executor keeps. The
    # backward function once ran the hoist again, and for GAT that was a second x W in every step: the scores'
    # gradient reads the projected rows, so the product was not pruned.
    rng = np.random.default_rng(0)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, 40, 160), rng.integers(0, 40, 160), 40)
    x, labels = rng.normal(size=(40, 6)).astype(np.float32), rng.integers(0, 3, 40)
    model = ngra_tf.GraphModel(graph, [layers.GAT(4, heads=2, activation="elu"), layers.GAT(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
    model.fit(x, labels, epochs=1, verbose=0)
    shared = model.executor().shared
    kinds = {key[0] for key in shared.keys()}
    assert kinds == {"whole_forward", "whole_backward"}, kinds
    for key in shared.keys():
        ops = _every_op(shared.graph(key))  # (the chunk loops' bodies are functions of the graph's library)
        assert any(op.startswith("NgraEdgeCode") for _, op in ops), (key[0], sorted({op for _, op in ops}))
        per_vertex = [name for name, op in ops if "Hoisted" in name or "MatMul" in op]
        assert per_vertex == [], (key[0], per_vertex)


def _every_op(graph):
    """(name, type) of every op in a traced graph and in the functions of its library."""
    graph_def = graph.as_graph_def()
    nodes = list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]
    return [(node.name, node.op) for node in nodes]
