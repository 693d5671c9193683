"""Generic fused edge programs: random element-wise edge stages compile to edge code, fuse, and equal the
unfused path forward and backward at every chunk count; the kernels' gradients equal TF's numeric ones."""

import numpy as np
import pytest
import tensorflow as tf

import compiler_checks as cc
import ngra_tf
from ngra_tf.ops import edge_code as ec

HEADS, UNITS = 2, 3

UNARY = [
    ("tanh", tf.tanh), ("sigmoid", tf.sigmoid), ("relu", tf.nn.relu), ("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.3)),
    ("elu", tf.nn.elu), ("selu", tf.nn.selu), ("softplus", tf.math.softplus), ("softsign", tf.math.softsign),
    ("abs", tf.abs), ("neg", tf.negative), ("square", tf.square), ("exp", lambda x: tf.exp(-tf.square(x))),
    ("sqrt", lambda x: tf.sqrt(tf.math.softplus(x) + 0.1)), ("rsqrt", lambda x: tf.math.rsqrt(tf.math.softplus(x) + 0.1)),
    ("log", lambda x: tf.math.log(tf.sigmoid(x) + 0.5)), ("pow", lambda x: tf.pow(tf.sigmoid(x) + 0.5, 1.5)),
    ("expm1", lambda x: tf.math.expm1(tf.tanh(x))), ("log1p", lambda x: tf.math.log1p(tf.sigmoid(x))),
    ("reciprocal", lambda x: tf.math.reciprocal(tf.math.softplus(x) + 0.5)),
    ("cast", lambda x: tf.cast(tf.cast(x, tf.float64) * 0.5, tf.float32)),
]
BINARY = [
    ("add", tf.add), ("sub", tf.subtract), ("mul", tf.multiply), ("div", lambda a, b: a / (tf.math.softplus(b) + 0.5)),
    ("maximum", tf.maximum), ("minimum", tf.minimum), ("squared_difference", tf.math.squared_difference),
]


class RandomEdgeStage(ngra_tf.SAGALayer):
    """An edge stage drawn at random from `seed`: element-wise ops over hoisted source and destination rows
    ([heads, units], and a per-head scalar that broadcasts), the edge data and constants; `attention` wraps a
    random score in edge.softmax and weighs a random value with it."""

    def __init__(self, seed, accumulator="sum", attention=False, num_ops=6, **kwargs):
        super().__init__(**kwargs)
        self.seed, self.attention, self.num_ops = seed, attention, num_ops
        self._reduces = tuple(accumulator.split("|"))

    def build(self, input_shape):
        width = input_shape[-1]
        rng = np.random.default_rng(self.seed)

        def weight(name, units):
            return self.add_weight(name=name, shape=(width, units),
                                   initializer=tf.constant_initializer(rng.normal(scale=0.6, size=(width, units))))

        self.ws = [weight(f"ws{i}", HEADS * UNITS) for i in range(2)]
        self.wd = weight("wd", HEADS * UNITS)
        self.wh = weight("wh", HEADS)  # a per-head scalar of the source
        super().build(input_shape)

    def _program(self, leaves, rng, full):
        values = list(leaves)
        for _ in range(self.num_ops):
            if rng.random() < 0.45:
                _, fn = UNARY[rng.integers(len(UNARY))]
                values.append(fn(values[rng.integers(len(values))]))
            else:
                _, fn = BINARY[rng.integers(len(BINARY))]
                a, b = (values[i] for i in rng.integers(len(values), size=2))
                values.append(fn(a, b))
        out = values[-1] + values[-2] * values[-3]  # the last ops all count
        return out * full if out.shape[-1] != UNITS else out  # a broadcast value reaches every feature

    def apply_edge(self, edge):
        rng = np.random.default_rng(self.seed)
        heads = [-1, HEADS, UNITS]
        s0, s1 = (tf.reshape(edge.src @ w, heads) for w in self.ws)
        d0 = tf.reshape(edge.dst @ self.wd, heads)
        per_head = tf.reshape(edge.src @ self.wh, [-1, HEADS, 1])
        data = tf.reshape(edge.data[:, 0], [-1, 1, 1])
        leaves = [s0, s1, d0, per_head, data, tf.constant(0.5)]
        if not self.attention:
            return tf.reshape(self._program(leaves, rng, s1), [-1, HEADS * UNITS])
        score = self._program([s0[:, :, 0], d0[:, :, 1], per_head[:, :, 0], data[:, :, 0]], rng, 1.0)
        value = self._program(leaves, rng, s1)
        return tf.reshape(edge.softmax(score)[:, :, None] * value, [-1, HEADS * UNITS])

    def apply_vertex(self, vertex, accum):
        return accum


def _graph():
    src, dst = cc.stress_edges(3)
    data = np.random.default_rng(5).normal(size=(len(src), 2)).astype(np.float32)
    return ngra_tf.Graph.from_edges(src, dst, cc.NUM_VERTICES, edge_data=data)


def _compare(layer, graph, x):
    """Fused at P = 1 and 4 equal unfused (hoisted, not fused) at P = 1, forward and backward."""
    layer(x, graph=graph.partition(1))  # builds
    want, want_grads = cc.value_and_grads([layer], graph.partition(1), x, rewrites=["hoist"])
    assert "fused: no, fusion is off" in layer.explain()
    text = "\n".join(layer.compiled(x, graph, rewrites=True).describe())
    assert "fused: yes, " in text and "edge stage: 0 ops per edge" in text, text
    for parts in (1, 4):
        out, grads = cc.value_and_grads([layer], graph.partition(parts), x)
        cc.assert_close(out, want, f"P={parts}", rtol=2e-4)
        for name, grad in grads.items():  # a weight the random stage never reads has no gradient (or zeros)
            want_grad = want_grads[name]
            if want_grad is None or grad is None:
                assert not np.any(grad) and not np.any(want_grad), name
                continue
            cc.assert_close(grad, want_grad, f"P={parts} d/d{name}", rtol=2e-4)


# Each seed with two accumulators, rotating, so that each accumulator meets two or three programs.
ACCUMULATORS = ("sum", "mean", "max", "min", "sum|max")


@pytest.mark.parametrize("seed,accumulator", [(seed, ACCUMULATORS[(seed + k) % 5]) for seed in range(6) for k in (0, 3)])
def test_random_edge_stages_fuse_and_equal_the_unfused_path(seed, accumulator):
    _compare(RandomEdgeStage(seed, accumulator), _graph(), cc.features(seed))


@pytest.mark.parametrize("seed", range(4))
def test_random_attention_streams_and_equals_the_unfused_softmax(seed):
    layer = RandomEdgeStage(100 + seed, attention=True, num_ops=4)
    graph, x = _graph(), cc.features(seed)
    _compare(layer, graph, x)
    assert "attention (online softmax)" in "\n".join(layer.compiled(x, graph).describe())


def _random_code(rng, width, attention, num_src=2, num_dst=1):
    """An EdgeCode drawn at random: loads of identity and broadcast tables, then random ops."""
    tables = [np.arange(width) + k * width for k in range(num_src)] + [np.arange(width)]
    tables.append(np.arange(width) // 2 * 0)  # every feature reads element 0 (a broadcast)
    instructions = [("load_src", k, 0, -1) for k in range(num_src)] + [("load_dst", num_src, 0, -1),
                                                                        ("load_edge", num_src + 1, 0, -1)]
    constants = [0.3, 1.5]
    safe_unary = ["tanh", "sigmoid", "relu", "elu", "selu", "softplus", "softsign", "abs", "neg", "square"]
    for _ in range(6):
        n = len(instructions)
        if rng.random() < 0.5:
            op = safe_unary[rng.integers(len(safe_unary))]
            instructions.append((op, int(rng.integers(n)), 0, -1))
        else:
            op = ["add", "sub", "mul", "maximum", "minimum", "squared_difference"][rng.integers(6)]
            a, b = rng.integers(n, size=2)
            instructions.append((op, int(a), int(b), -1))
    n = len(instructions)
    instructions.append(("leaky_relu", n - 1, 0, 0))
    score = -1
    if attention:
        instructions.append(("mul", n - 2, 3, -1))
        score = len(instructions) - 1
    return ec.EdgeCode(tuple(instructions), tuple(constants), np.stack(tables).astype(np.int32),
                       len(instructions) - 1 if not attention else n, score)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "softmax"])
@pytest.mark.parametrize("seed", range(2))
def test_edge_code_gradients_equal_numeric_ones(seed, reduce):
    rng = np.random.default_rng(seed)
    V, E, width = 6, 17, 4
    src, dst = rng.integers(0, V, E), rng.integers(0, V, E)
    data = rng.normal(size=(E, 1))
    graph = ngra_tf.Graph.from_edges(src, dst, V, edge_data=data)
    code = _random_code(rng, width, reduce == "softmax")
    x_src = tf.constant(rng.normal(size=(V, 2 * width)))
    x_dst = tf.constant(rng.normal(size=(V, width)))
    edge = tf.constant(graph.stored_edge_data)

    def result(x_src, x_dst, edge):
        out = ec.edge_code_gather(graph.adjacency, code, x_src, x_dst, edge, reduce=reduce)
        return ec.softmax_result(out, width) if reduce == "softmax" else out

    theoretical, numerical = tf.test.compute_gradient(result, [x_src, x_dst, edge], delta=1e-6)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-6)
    if reduce == "softmax":  # two halves of the edges, chained through init, equal the whole
        state = None
        for half in (np.arange(E) < E // 2, np.arange(E) >= E // 2):
            part = ngra_tf.Graph.from_edges(src[half], dst[half], V, edge_data=data[half])
            state = ec.edge_code_gather(part.adjacency, code, x_src, x_dst, tf.constant(part.stored_edge_data),
                                        reduce="softmax", init=state)
        np.testing.assert_allclose(ec.softmax_result(state, width), result(x_src, x_dst, edge), rtol=1e-10,
                                   atol=1e-12)


def test_edge_code_rejects_bad_programs():
    adjacency = ngra_tf.Graph.from_edges([0, 1], [1, 0], 2).adjacency
    lib = ngra_tf.ops.library()
    x = tf.zeros([2, 3])
    good = dict(code=[0, 0, 0, -1], value=0)
    args = [x, tf.zeros([0, 0]), tf.zeros([0, 0]), tf.zeros([0], tf.int32), tf.zeros([0]),
            tf.constant([[0, 1, 2]], tf.int32), *adjacency.tensors(), tf.zeros([0]), tf.zeros([0], tf.int8)]
    lib.ngra_edge_code(*args, reduce="sum", **good)
    cases = [
        (dict(code=[5, 3, 0, -1], value=0), "operands must be earlier registers"),
        (dict(code=[99, 0, 0, -1], value=0), "unknown opcode 99"),
        (dict(code=[0, 0, 0], value=0), "4 ints per instruction"),
        (dict(code=[0, 0, 0, -1], value=3), "value must be a register"),
        (dict(code=[0, 7, 0, -1], value=0), "reads table 7 of 1"),
        (dict(code=[0, 0, 0, -1, 24, 0, 0, 5], value=1), r"code\[1\] reads constant 5 of 0"),
    ]
    for attrs, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            lib.ngra_edge_code(*args, reduce="sum", **attrs)
    bad_table = list(args)
    bad_table[5] = tf.constant([[0, 1, 3]], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tables\[0, 2\] = 3 is out of range \[0, 3\)"):
        lib.ngra_edge_code(*bad_table, reduce="sum", **good)
