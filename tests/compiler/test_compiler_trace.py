"""Tracing and typing: which tensors are S, D, E or P, and which ops mix rows."""

import pytest
import tensorflow as tf

from ngra_tf.compiler.trace import trace_stage

SPECS = {"src": tf.TensorSpec([None, 4]), "dst": tf.TensorSpec([None, 4]), "data": tf.TensorSpec([None])}
W = tf.constant(tf.ones([4, 3]))


def traced(fn):
    return trace_stage(lambda src, dst, data: fn(src, dst, data), SPECS)


def kinds(trace):
    """{op type: kind} of the ops between the inputs and the output."""
    return {op.type: trace.kind(op.outputs[0]) for op in trace.ops_between([], [trace.output])
            if op.outputs and op.type not in ("Placeholder", "Const")}


def test_kinds_follow_what_a_tensor_depends_on():
    trace = traced(lambda s, d, e: tf.sigmoid(s @ W + tf.tanh(d) @ W) * tf.reduce_sum(s, -1, keepdims=True))
    assert trace.kind(trace.inputs["src"]) == "S" and trace.kind(trace.inputs["dst"]) == "D"
    found = kinds(trace)
    assert found["Tanh"] == "D" and found["Sum"] == "S"
    assert found["AddV2"] == "E" and found["Sigmoid"] == "E" and found["Mul"] == "E"
    assert trace.kind(trace.output) == "E" and not trace.mixing_ops


def test_parameters_alone_are_p_and_edge_data_is_e():
    trace = traced(lambda s, d, e: s * tf.exp(e)[:, None] + tf.reduce_sum(W))
    found = kinds(trace)
    assert found["Exp"] == "E" and trace.deps[trace.output.name] == {"src", "data"}
    sums = [op for op in trace.graph.get_operations() if op.type == "Sum"]
    assert trace.kind(sums[0].outputs[0]) == "P"


@pytest.mark.parametrize("fn, reason", [
    (lambda s, d, e: s - tf.reduce_mean(s, axis=0), "reduces over the rows"),
    (lambda s, d, e: tf.transpose(tf.transpose(s)), "moves the row axis"),
    (lambda s, d, e: tf.cumsum(s, axis=0), "Cumsum is not known to keep rows apart"),
    (lambda s, d, e: s + tf.gather(s, [0, 1, 1])[:1], "gathers across rows"),
    (lambda s, d, e: tf.reshape(s, [-1, 2]), "may fold rows together"),
    (lambda s, d, e: s[1:], "slices the rows"),
    (lambda s, d, e: tf.concat([s, d], axis=0), "joins along the rows"),
    (lambda s, d, e: tf.nn.softmax(e)[:, None] * s, "normalises over the rows"),
])
def test_row_mixing_ops_are_found(fn, reason):
    trace = traced(fn)
    assert trace.mixing_ops, "expected a row-mixing op"
    assert any(reason in why for _, why in trace.mixing_ops), trace.mixing_ops
    assert trace.kind(trace.output) == "E"


@pytest.mark.parametrize("fn", [
    lambda s, d, e: tf.reshape(tf.reshape(s, [-1, 2, 2]) * 2.0, [-1, 4]),
    lambda s, d, e: tf.concat([s, d], axis=-1),
    lambda s, d, e: tf.stack([s, d], axis=1)[:, 0],
    lambda s, d, e: tf.einsum("ef,fg->eg", s, W),
    lambda s, d, e: tf.gather(tf.einsum("ef,tfg->etg", s, tf.ones([2, 4, 3])), tf.cast(e, tf.int32) % 2,
                              batch_dims=1),
    lambda s, d, e: tf.nn.softmax(s, axis=-1) * tf.reduce_max(d, axis=1, keepdims=True),
    lambda s, d, e: tf.gather(tf.ones([3, 4]), tf.cast(e, tf.int32)) * s,
    lambda s, d, e: tf.nn.dropout(s, 0.5),
])
def test_row_wise_ops_are_accepted(fn):
    trace = traced(fn)
    assert trace.mixing_ops == []


def test_a_stage_must_return_rows():
    with pytest.raises(ValueError, match="one row per input row"):
        traced(lambda s, d, e: tf.reduce_sum(s, axis=0))
