"""Replay: traced ops rebuilt on other inputs; an op that repeats within one evaluation is built once."""

import keras
import numpy as np
import tensorflow as tf

from ngra_tf.compiler.replay import Replay
from ngra_tf.compiler.trace import trace_stage

SPECS = {"src": tf.TensorSpec([None, 4]), "dst": tf.TensorSpec([None, 4])}


def both_projections():
    """GAT's shape: one W applied to each endpoint. Returns the replay and the two traced products."""
    w = keras.Variable(np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32))  # as a layer has it
    trace = trace_stage(lambda src, dst: tf.tanh(tf.matmul(src, w.value)) * tf.matmul(dst, w.value), SPECS)
    products = [op.outputs[0] for op in trace.graph.get_operations() if op.type == "MatMul"]
    assert len(products) == 2
    return Replay(trace, [w]), products, w


def test_the_same_rows_through_the_same_weights_are_one_product_with_its_gradient():
    replay, products, w = both_projections()
    names = [replay.trace.inputs[key].name for key in ("src", "dst")]
    x = tf.constant(np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32))
    other = tf.constant(np.random.default_rng(2).normal(size=(5, 4)).astype(np.float32))

    def step(src, dst=None):
        dst = src if dst is None else dst  # None: the very same tensor, as the hoist feeds both endpoints
        with tf.GradientTape() as tape:
            a, b = replay.evaluate(products, dict(zip(names, (src, dst))))
            loss = tf.reduce_sum(tf.tanh(a) * b)
        return a, b, tape.gradient(loss, w.value)

    for dst, products_built in ((None, 1), (other, 2)):
        args = (x,) if dst is None else (x, dst)
        traced = tf.function(step).get_concrete_function(*args)
        built = [op for op in traced.graph.get_operations() if op.type == "MatMul"]
        assert len(built) == 2 * products_built, [op.name for op in built]  # each product and its x^T dy
        a, b, d_w = traced(*args)
        dst = x if dst is None else dst
        np.testing.assert_allclose(a, x @ w.value, rtol=1e-6)
        np.testing.assert_allclose(b, dst @ w.value, rtol=1e-6)
        with tf.GradientTape() as tape:
            want = tf.reduce_sum(tf.tanh(x @ w.value) * (dst @ w.value))
        np.testing.assert_allclose(d_w, tape.gradient(want, w.value), rtol=1e-5, atol=1e-6)


def test_reads_of_a_variable_the_trace_assigns_stay_apart():
    """A seed that advances between two draws (one Keras dropout on both endpoints) gives two draws, not one."""
    counter = keras.Variable(3.0)

    def stage(src, dst):
        first = src * counter.value
        counter.assign_add(1.0)
        return first + dst * counter.value

    trace = trace_stage(stage, SPECS)
    replay = Replay(trace, [counter])
    products = [op.outputs[0] for op in trace.graph.get_operations() if op.type == "Mul"]
    x = tf.ones([2, 4])
    seen = {}  # shared, as the hoist shares it between the endpoints
    first = replay.evaluate(products[:1], {trace.inputs["src"].name: x}, seen=seen)[0]
    second = replay.evaluate(products[1:], {trace.inputs["dst"].name: x}, seen=seen)[0]
    np.testing.assert_array_equal(first, 3.0 * x)
    np.testing.assert_array_equal(second, 4.0 * x)  # read after the first evaluation advanced it
