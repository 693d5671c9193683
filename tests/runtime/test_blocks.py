"""Blocks arrays: what is put is what is got, in every home, and a disk array's writes keep their order inside
compiled loops."""

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.runtime.blocks import HOMES, Blocks

SIZES = [5, 0, 7, 3]


def _blocks(home, tmp_path, row_shape=(4,)):
    return Blocks("x", home, SIZES, row_shape, tf.float32, path=str(tmp_path / "x.bin"))


@pytest.mark.parametrize("home", HOMES)
def test_put_get_add_and_concat_in_every_home(home, tmp_path):
    blocks = _blocks(home, tmp_path)
    rows = np.arange(sum(SIZES) * 4, dtype=np.float32).reshape(-1, 4)
    bounds = np.concatenate([[0], np.cumsum(SIZES)])

    @tf.function
    def run():
        state = blocks.from_rows(tf.constant(rows))
        state = blocks.add(state, 2, tf.ones([SIZES[2], 4]))
        state = blocks.put(state, 0, -tf.ones([SIZES[0], 4]))
        return blocks.concat(state), blocks.get_rows(state, 2, 1, 3), blocks.get(state, 3)

    whole, some, last = (t.numpy() for t in run())
    expected = rows.copy()
    expected[bounds[2]:bounds[3]] += 1
    expected[:SIZES[0]] = -1
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(some, expected[bounds[2] + 1:bounds[2] + 3])
    np.testing.assert_array_equal(last, expected[bounds[3]:])


@pytest.mark.parametrize("home", HOMES)
def test_puts_in_a_loops_conditionals_follow_the_fill(home, tmp_path):
    # The executor's shape: an array filled before a loop whose steps put blocks inside a tf.cond, the loop also
    # setting a variable (the chunks' seeds) and running two steps at a time. Here the fill waits on slow work.
    # Ordered by a control dependency on the state, a disk write overtook the fill in 19 runs of 20, and the
    # fill's zeros replaced what the step wrote (concurrent trainers differed by up to 0.025 in loss).
    blocks = _blocks(home, tmp_path, row_shape=(16,))
    seed = tf.Variable(0)
    matrix = tf.random.stateless_normal([300, 300], seed=[1, 2]) / 300.0

    @tf.function
    def run(values):
        slow = matrix
        for _ in range(20):
            slow = tf.matmul(slow, matrix)
        state = blocks.filled(tf.reduce_sum(slow) * 0.0)  # ready only after the matmuls

        def step(s, state):
            seed.assign(s)
            block = tf.gather(values, tf.range(tf.gather(blocks.bounds, s), tf.gather(blocks.bounds, s + 1)))
            return s + 1, tf.cond(s >= 0, lambda: blocks.put(state, s, block), lambda: state)

        _, state = tf.while_loop(lambda s, _: s < len(SIZES), step, (tf.constant(0), state),
                                 parallel_iterations=2)
        return blocks.concat(state)

    for k in range(8):
        values = tf.random.stateless_normal([sum(SIZES), 16], seed=[k, 0]) + 3.0
        np.testing.assert_array_equal(run(values).numpy(), values.numpy(), err_msg=f"run {k}")


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_a_disk_fill_never_makes_the_whole_array(value, tmp_path):
    # A fill of constant shape is folded by Grappler into a constant the graph holds: on reddit-middle one
    # 57 MiB constant per array and call site, 2.6 GiB at the smallest budget of a 16-layer model (0.93 GiB).
    # The disk fill writes interval by interval, each block's shape a loop value.
    blocks = _blocks("disk", tmp_path, row_shape=(3, 2))

    @tf.function
    def run():
        return blocks.concat(blocks.filled(value))

    np.testing.assert_array_equal(run().numpy(), np.full((sum(SIZES), 3, 2), value, np.float32))
    graph = run.get_concrete_function().graph
    bodies = [graph._get_function(op.get_attr("body").name).graph for op in graph.get_operations()
              if op.type in ("While", "StatelessWhile")]
    fills = [op for g in [graph] + bodies for op in g.get_operations() if op.type == "Fill"]
    assert fills and all(op.outputs[0].shape[0] is None for op in fills), [op.outputs[0].shape for op in fills]
