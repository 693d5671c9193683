"""Rewrite 2, fusion: an element-wise edge stage as edge code (ngra_tf.ops.edge_code).

After hoisting, what is left of apply_edge reads the frontier: S tensors
(rows of the source vertex), D tensors (of the destination) and E tensors of
edge data. When every op between them and the message is element-wise, the
stage becomes straight-line code that one fused kernel evaluates per edge
and feature, reducing into the accumulator with no per-edge tensor.

The message is evaluated at each of its features f. Every tensor of the
stage is reached with an *index*: for each f, which element of that
tensor's row feeds it. Broadcasting (a per-head score against [heads,
units] rows), reshapes, expand_dims and slices of the features only change
indices, so they cost nothing at run time: at the frontier an index becomes a
load's table. A tensor reached with two different indices is loaded twice.

Attention: a message `edge.softmax(scores) * values` (up to reshapes and
broadcasting) becomes an attention code, the scores' and the values' code
side by side, that the kernels reduce with an online softmax, chunk by chunk.
Other factors of the weights (edge.dropout's mask, an edge row) multiply
the values: the softmax still normalises the scores alone.

Anything else is refused with the op that stops it, for explain().
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from ngra_tf.compiler.replay import Replay
from ngra_tf.compiler.trace import EDGE_ROWS, Trace, has_rows
from ngra_tf.ops.edge_code import MAX_INSTRUCTIONS, EdgeCode

_UNARY = {"Neg": "neg", "Abs": "abs", "Square": "square", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Exp": "exp",
          "Expm1": "expm1", "Log": "log", "Log1p": "log1p", "Reciprocal": "reciprocal", "Inv": "reciprocal",
          "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Elu": "elu", "Selu": "selu",
          "Softplus": "softplus", "Softsign": "softsign", "LeakyRelu": "leaky_relu"}
_BINARY = {"AddV2": "add", "Add": "add", "BiasAdd": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div",
           "Div": "div", "Maximum": "maximum", "Minimum": "minimum", "SquaredDifference": "squared_difference"}
_SAME_ORDER = frozenset({"Reshape", "ExpandDims", "Squeeze"})  # a row's elements keep their order
_INDEX_OPS = frozenset({"StridedSlice", "Slice", "Transpose", "Tile", "BroadcastTo", "GatherV2"})
_PRECISION = {tf.float16: 1, tf.bfloat16: 1, tf.float32: 2, tf.float64: 3}


class NotFusable(Exception):
    """Why an edge stage is not edge code: the op and the reason."""


@dataclasses.dataclass(frozen=True)
class FusedCode:
    """An edge stage as edge code, and where its operand rows come from.

    src / dst / edge: the traced tensors packed side by side (each row
    flattened) into x_src, x_dst and the per-edge rows; types: the integer
    edge-data tensor that typed loads read, or None.
    """

    code: EdgeCode
    src: tuple
    dst: tuple
    edge: tuple
    types: object
    feature_shape: tuple  # the message's features
    dtype: tf.DType

    def widths(self):
        """Row widths of the packed x_src, x_dst and edge rows."""
        return tuple(sum(_size(t) for t in tensors) for tensors in (self.src, self.dst, self.edge))


def compile_code(edge: Trace, src_frontier, dst_frontier) -> FusedCode:
    """The edge stage as FusedCode; raises NotFusable (with the reason) when it is not element-wise."""
    dtype = edge.output.dtype
    if dtype not in (tf.float32, tf.float64):
        raise NotFusable(f"the message is {dtype.name}; fused edge code computes in float32 or float64")
    feature_shape = edge.output.shape[1:]
    if not feature_shape.is_fully_defined():
        raise NotFusable(f"the message's features {feature_shape} are not all known")
    builder = _Builder(edge, src_frontier, dst_frontier, dtype)
    width = _size(edge.output)
    everything = np.arange(width, dtype=np.int64)
    score = -1
    attention = builder.attention(edge.output, everything)
    if attention is not None:
        (scores, score_index), factors = attention
        score = builder.register(scores, score_index)
        value = builder.register(*factors[0])
        for factor in factors[1:]:
            value = builder.emit("mul", value, builder.register(*factor))
    else:
        value = builder.register(edge.output, everything)
    return builder.finish(value, score, tuple(feature_shape.as_list()))


def _size(tensor) -> int:
    return int(np.prod(tensor.shape[1:].as_list(), dtype=np.int64))


def _strip(tensor):
    while tensor.op.type == "Identity" and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor


class _Builder:
    def __init__(self, edge: Trace, src_frontier, dst_frontier, dtype):
        self.edge, self.dtype = edge, dtype
        self.side = {t.name: "src" for t in src_frontier}
        self.side.update({t.name: "dst" for t in dst_frontier})
        self.instructions, self.constants = [], []
        self.loads = []  # (register, side, tensor, index, typed)
        self.memo = {}
        self.types = None

    # ---- instructions ----

    def emit(self, op, a=0, b=0, k=-1) -> int:
        if len(self.instructions) >= MAX_INSTRUCTIONS:
            raise NotFusable(f"the edge stage needs more than {MAX_INSTRUCTIONS} instructions")
        self.instructions.append((op, a, b, k))
        return len(self.instructions) - 1

    def constant(self, value) -> int:
        value = float(value)
        if value not in self.constants:
            self.constants.append(value)
        return self.constants.index(value)

    def load(self, side, tensor, index, typed=None) -> int:
        shape = tensor.shape[1:]
        if not shape.is_fully_defined():
            raise NotFusable(f"{tensor.name} has features {shape} that are not all known")
        register = self.emit("load_src_typed" if typed is not None else f"load_{side}")
        self.loads.append((register, side, tensor, index, typed))
        return register

    # ---- tensors ----

    def register(self, tensor, index) -> int:
        """The register holding `tensor` at element index[f] of its row, for every message feature f."""
        key = (tensor.name, index.tobytes())
        if key not in self.memo:
            self.memo[key] = self._build(tensor, index)
        return self.memo[key]

    def _build(self, tensor, index) -> int:
        edge = self.edge
        if tensor.name in self.side:
            return self.load(self.side[tensor.name], tensor, index)
        op = tensor.op
        if op.name in edge.markers:
            raise NotFusable("edge.softmax is used other than as the weights of the message "
                             "(edge.softmax(scores) * values)")
        kind = edge.kind(tensor)
        if kind == "E" and edge.deps[tensor.name] <= EDGE_ROWS and tensor.dtype.is_floating:
            return self.load("edge", tensor, index)
        if kind == "P":
            value = tf.get_static_value(tensor)
            if value is not None:
                return self._constant(tensor, value, index)
            if op.type in ("ReadVariableOp", "Placeholder") or not op.inputs:
                raise NotFusable(f"{op.type} {op.name} (a parameter) is read per edge; apply it to edge.src or "
                                 "edge.dst instead so that it is hoisted")
        if op.type in ("Identity", "Cast"):
            source = op.inputs[0]
            if op.type == "Cast":
                if not source.dtype.is_floating:
                    raise NotFusable(f"Cast from {source.dtype.name} of a tensor that is not edge data")
                if _PRECISION[tensor.dtype] < _PRECISION[self.dtype]:
                    raise NotFusable(f"Cast to {tensor.dtype.name} rounds below the message's {self.dtype.name}")
            return self.register(source, index)
        if op.type in _SAME_ORDER:
            return self.register(op.inputs[0], index)
        if op.type == "GatherV2" and op.get_attr("batch_dims") == 1:
            return self._typed(op, index)
        if op.type in _INDEX_OPS:
            return self.register(op.inputs[0], _index_through(op, index))
        if op.type in _UNARY:
            a = self.register(op.inputs[0], index)
            alpha = self.constant(op.get_attr("alpha")) if op.type == "LeakyRelu" else -1
            return self.emit(_UNARY[op.type], a, k=alpha)
        if op.type == "Pow":
            exponent = tf.get_static_value(op.inputs[1])
            if exponent is None or np.size(exponent) != 1:
                raise NotFusable("Pow's exponent is not one constant")
            return self.emit("pow_const", self.register(op.inputs[0], _broadcast(op.inputs[0], tensor, index)),
                             k=self.constant(np.ravel(exponent)[0]))
        if op.type in _BINARY:
            x, y = op.inputs[:2]
            return self.emit(_BINARY[op.type], self.register(x, _broadcast(x, tensor, index)),
                             self.register(y, _broadcast(y, tensor, index)))
        if op.type in ("Sum", "Mean", "Max", "Min", "Prod"):
            raise NotFusable(f"the edge stage reduces along the features ({op.type}, {op.name}), which is not "
                             "element-wise")
        raise NotFusable(f"the edge stage computes {op.type} ({op.name}), which edge code does not evaluate")

    def _constant(self, tensor, value, index) -> int:
        values = np.ravel(np.asarray(value))[index if np.size(value) > 1 else np.zeros_like(index)]
        if values.size and np.any(values != values[0]):
            raise NotFusable(f"the constant {tensor.op.name} varies along the features")
        return self.emit("const", k=self.constant(values[0] if values.size else 0.0))

    def _typed(self, op, index) -> int:
        """GatherV2(params [rows, types, F...], types [rows], batch_dims=1): the slot of the edge's type."""
        params, types = op.inputs[:2]
        axis = tf.get_static_value(op.inputs[2])
        edge = self.edge
        if not (self.side.get(params.name) == "src" and axis == 1 and types.dtype.is_integer
                and types.shape.rank == 1 and edge.deps[types.name] <= {"data"}):
            raise NotFusable("GatherV2 with batch_dims=1 is fused only as hoisted source rows [V, types, ...] "
                             "indexed by an integer type per edge")
        if self.types is not None and self.types.name != types.name:
            raise NotFusable("typed loads read two different edge-type tensors")
        self.types = types
        return self.load("src", params, index, typed=_size(op.outputs[0]))

    # ---- attention ----

    def attention(self, output, index):
        """((scores, index), [(values, index), ...]) when the message is edge.softmax(scores) times values (a
        product: dropout's mask on the weights is one more factor of the values), else None."""
        found = self._softmax_factor(output, index)
        if found is None or not found[1]:
            return None
        return found

    def _softmax_factor(self, tensor, index):
        """`tensor` as edge.softmax(scores) * factors: ((scores, index), [(factor, index)]), or None."""
        tensor, index = self._through_order(tensor, index)
        if tensor.op.name in self.edge.markers:
            return (tensor.op.inputs[0], index), []
        if tensor.op.type != "Mul":
            return None
        x, y = tensor.op.inputs
        for weights, values in ((x, y), (y, x)):
            found = self._softmax_factor(weights, _broadcast(weights, tensor, index))
            if found is not None:
                return found[0], found[1] + [(values, _broadcast(values, tensor, index))]
        return None

    def _through_order(self, tensor, index):
        """Past Identity and the ops that only move a row's elements: (the tensor they read, its index)."""
        while True:
            op = tensor.op
            if op.type in ("Identity",) + tuple(_SAME_ORDER) and op.name not in self.edge.markers \
                    and tensor.name not in self.side:
                tensor = op.inputs[0]
            elif op.type in _INDEX_OPS and tensor.name not in self.side and op.type != "GatherV2":
                index, tensor = _index_through(op, index), op.inputs[0]
            else:
                return tensor, index

    # ---- the result ----

    def finish(self, value, score, feature_shape) -> FusedCode:
        # Typed rows last in x_src, so that the kernel's range check on types is exact.
        packed = {"src": [], "dst": [], "edge": []}
        for _, side, tensor, _, typed in sorted(self.loads, key=lambda load: load[4] is not None):
            if all(t.name != tensor.name for t in packed[side]):
                packed[side].append(tensor)
        offsets = {}
        for side, tensors in packed.items():
            at = 0
            for t in tensors:
                offsets[t.name] = at
                at += _size(t)
        tables, rows = [], {}
        instructions = list(self.instructions)
        for register, side, tensor, index, typed in self.loads:
            table = (offsets[tensor.name] + index).astype(np.int32)
            key = table.tobytes()
            if key not in rows:
                rows[key] = len(tables)
                tables.append(table)
            op = instructions[register][0]
            instructions[register] = (op, rows[key], typed or 0, -1)
        width = int(np.prod(feature_shape, dtype=np.int64))
        table_array = np.stack(tables) if tables else np.zeros([0, width], np.int32)
        code = EdgeCode(tuple(instructions), tuple(self.constants), table_array, value, score)
        return FusedCode(code, tuple(packed["src"]), tuple(packed["dst"]), tuple(packed["edge"]), self.types,
                         feature_shape, self.dtype)


def _features(tensor) -> list:
    """The shape an index indexes: a row tensor's features, or all of a tensor without rows."""
    return tensor.shape[1:].as_list() if has_rows(tensor) else tensor.shape.as_list()


def _broadcast(operand, result, index):
    """The index into `operand` of each message feature, given `result`'s (numpy broadcasting, aligned to the
    trailing axes)."""
    out_shape, shape = _features(result), _features(operand)
    if shape == out_shape:
        return index
    shape = shape[len(shape) - len(out_shape):] if len(shape) > len(out_shape) else shape
    shape = [1] * (len(out_shape) - len(shape)) + shape
    table = np.broadcast_to(np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape), out_shape).reshape(-1)
    return table[index]


def _index_through(op, index):
    """The index into op's first input of each message feature, for an op that only picks elements of a row
    (a slice, transpose, tile, constant gather): the op run on one row holding 0, 1, 2, ..."""
    source = op.inputs[0]
    shape = source.shape[1:]
    if not shape.is_fully_defined():
        raise NotFusable(f"{op.type} ({op.name}) reads features {shape} that are not all known")
    size = int(np.prod(shape.as_list(), dtype=np.int64))
    if size >= 1 << 24:
        raise NotFusable(f"{op.type} ({op.name}) reads rows of {size} features, too many to index")
    positions = np.arange(size, dtype=np.float64).reshape([1] + shape.as_list())
    rest = [tf.get_static_value(t) for t in op.inputs[1:]]
    if any(value is None for value in rest):
        raise NotFusable(f"{op.type} ({op.name}) takes arguments that are not constants")
    with tf.init_scope():
        picked = Replay._call(op, [tf.constant(positions, source.dtype)] + [tf.constant(v) for v in rest])[0]
        picked = np.asarray(picked.numpy()).reshape(-1).astype(np.int64)
    return picked[index]


__all__ = ["FusedCode", "NotFusable", "compile_code"]
