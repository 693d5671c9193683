"""Re-running parts of a traced stage in the current context, on other inputs.

The compiler decides *where* each traced op runs (once per vertex, once per
chunk edge, once per interval); `Replay.evaluate` then rebuilds the ops it
needs through `tf.raw_ops`, eagerly or into the graph being built, with some
traced tensors fed new values (a vertex matrix where the trace had edge.src,
a chunk's edge data where it had all edge data). Going through the op
wrappers keeps gradients (tapes and graph gradients) working as usual, and
variable reads go through the variables themselves, so a GradientTape that
watches accessed variables sees them.

A fed value may be sparse (a tf.SparseTensor of bag-of-words features, traced
as dense rows): a MatMul that reads it first becomes a sparse-dense product,
which is where a layer's hoisted, narrowed x W meets the input. Any other op
gets the rows densified, so the result never depends on the representation.
"""

from __future__ import annotations

import functools
import inspect
import re

import tensorflow as tf
from absl import logging

from ngra_tf.compiler.trace import Trace
from ngra_tf.ops._loader import library

_SIDE_EFFECTS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})


class Replay:
    """Evaluates tensors of one trace; `variables` are the layer's (tf.Variable or Keras) variables."""

    def __init__(self, trace: Trace, variables):
        self.trace = trace
        by_handle = {}
        for variable in variables:
            tf_variable = getattr(variable, "value", variable)
            if isinstance(tf_variable, tf.Variable):
                by_handle[id(tf_variable.handle)] = tf_variable
        self._variable_of = {name: by_handle.get(id(outer)) for name, outer in trace.external.items()}

    def bound(self, replacement: dict):
        """This replay reading other variables: replacement maps id(tf.Variable) of each variable read to the one
        to read instead (another layer's at the same position, or a traced function's argument)."""
        other = object.__new__(Replay)
        other.trace = self.trace
        other._variable_of = {name: None if variable is None else replacement[id(variable)]
                              for name, variable in self._variable_of.items()}
        return other

    @functools.cached_property
    def _updates(self) -> list:
        """The trace's variable updates (a dropout seed advancing)."""
        return [op for op in self.trace.graph.get_operations() if op.type in _SIDE_EFFECTS]

    @functools.cached_property
    def _assigned(self) -> frozenset:
        """Handles of the variables the trace updates: two reads of one may differ."""
        return frozenset(op.inputs[0].name for op in self._updates)

    def evaluate(self, targets, feeds=None, memo=None, seen=None):
        """Values of `targets` (traced tensors), with `feeds` (traced tensor name -> value) given.

        `memo` (a dict, updated in place) carries values between calls that
        share a context, such as the two halves of a chunk's edge stage.
        `seen` (a dict, updated in place) lets calls with contexts of their own
        share what they build alike (see _run_ops).
        """
        memo = {} if memo is None else memo
        memo.update(feeds or {})
        handles_read, seen = set(), {} if seen is None else seen
        self._run_ops(self.trace.ops_between(memo, targets), memo, handles_read, seen)
        # Variable updates that belong to what was just read (a dropout seed
        # advancing) run once per evaluation context, after the reads.
        if handles_read:
            updates = [op for op in self._updates if op.inputs[0].name in handles_read and op.name not in memo]
            for op in updates:
                self._run_ops(self.trace.ops_between(memo, list(op.inputs)), memo, handles_read, seen)
                self._call(op, [self._input(t, memo) for t in op.inputs])
                memo[op.name] = None
        return [memo[t.name] for t in targets]

    def _run_ops(self, ops, memo, handles_read, seen):
        """Runs `ops` into memo. A stateless op the same as one already built (same kind, attributes and input
        values) is not built again: `seen` maps such a signature to its outputs, and a variable the trace never
        assigns to its one read. So x W traced twice (GAT projects both endpoints with one W, and the hoist feeds
        both the same rows) is one product, and one in the gradient. Reads of an assigned variable (a dropout
        seed) stay apart, so what they feed is built again."""
        for op in ops:
            if op.type == "Placeholder":
                if op.outputs[0].name in self.trace.external:
                    continue  # a capture: _input reads the outer tensor
                raise ValueError(f"cannot evaluate {op.name}: it is a stage input that was not fed")
            if op.name in self.trace.markers:
                raise ValueError(f"cannot evaluate {op.name}: the plan computes it ({self.trace.markers[op.name]})")
            if op.type == "ReadVariableOp" and op.inputs[0].name in self._variable_of:
                handle = op.inputs[0].name
                handles_read.add(handle)
                variable = self._variable_of[handle]
                if variable is not None:
                    shared, key = handle not in self._assigned, ("read", id(variable))
                    value = seen.get(key) if shared else None
                    if value is None:
                        value = variable.value()
                        if shared:
                            seen[key] = value
                    memo[op.outputs[0].name] = value
                    continue
            if op.type == "Const":
                memo[op.outputs[0].name] = tf.constant(tf.make_ndarray(op.get_attr("value")))
                continue
            inputs = [self._input(t, memo) for t in op.inputs]
            key = None if op.op_def.is_stateful else _signature(op, inputs)
            if key in seen:
                values = seen[key][1]
            else:
                values = self._call(op, inputs)
                if key is not None:
                    seen[key] = (inputs, values)  # the inputs kept alive: their ids are in the key
            for tensor, value in zip(op.outputs, values):
                memo[tensor.name] = value

    def _input(self, tensor, memo):
        if tensor.name in memo:
            return memo[tensor.name]
        return self.trace.external[tensor.name]  # a captured outer tensor (a constant or a handle)

    @staticmethod
    def _call(op, inputs):
        """Builds `op` again on `inputs` through tf.raw_ops (a sparse input: see the module doc)."""
        if any(isinstance(value, tf.SparseTensor) for value in inputs):
            if (op.type == "MatMul" and isinstance(inputs[0], tf.SparseTensor)
                    and not isinstance(inputs[1], tf.SparseTensor) and not op.get_attr("transpose_a")):
                return [tf.sparse.sparse_dense_matmul(inputs[0], inputs[1], adjoint_b=op.get_attr("transpose_b"))]
            logging.log_first_n(logging.WARNING, "sparse rows reach %s (%s) before any matmul: densified there", 1,
                                op.type, op.name)
            inputs = [densified(value) for value in inputs]
        op_def = op.op_def
        kwargs, position, inferred = {}, 0, set()
        for arg in op_def.input_arg:
            if arg.number_attr or arg.type_list_attr:
                count = (op.get_attr(arg.number_attr) if arg.number_attr
                         else len(op.get_attr(arg.type_list_attr)))
                kwargs[arg.name] = inputs[position:position + count]
                position += count
            else:
                kwargs[arg.name] = inputs[position]
                position += 1
            inferred.update(filter(None, (arg.type_attr, arg.number_attr, arg.type_list_attr)))
        for attr in op_def.attr:
            if attr.name not in inferred:
                kwargs[attr.name] = op.get_attr(attr.name)
        raw = getattr(tf.raw_ops, op.type, None) or _own_op(op.type)
        if raw is None:
            raise ValueError(f"cannot re-run {op.name}: {op.type} has no tf.raw_ops wrapper")
        result = raw(**_python_names(raw, kwargs), name=op.name.rsplit("/", 1)[-1])
        if result is None or isinstance(result, tf.Operation):
            return []
        if isinstance(result, (list, tuple)):
            flat = []
            for item in result:
                flat.extend(item if isinstance(item, (list, tuple)) else [item])
            return flat
        return [result]


def _signature(op, inputs):
    """What makes two stateless ops compute the same: their kind, attributes and input values (by identity)."""
    attrs = tuple(sorted((name, value.SerializeToString()) for name, value in op.node_def.attr.items()))
    return op.type, tuple(id(value) for value in inputs), attrs


def sparse_with_values(sparse: tf.SparseTensor, values) -> tf.SparseTensor:
    """`sparse`'s indices and dense shape with other values, and its static shape (a SparseTensor made in a graph
    knows none: SparseTensor.with_values loses it too)."""
    out = tf.SparseTensor(sparse.indices, values, sparse.dense_shape)
    out.set_shape(sparse.shape)
    return out


def sparse_zeros(shape, dtype) -> tf.SparseTensor:
    """A tf.SparseTensor of `shape` with no entries."""
    return tf.SparseTensor(tf.zeros([0, len(shape)], tf.int64), tf.zeros([0], dtype), list(shape))


def densified(value):
    """value, as a dense tensor if it is a tf.SparseTensor (with its static shape, which to_dense loses)."""
    if not isinstance(value, tf.SparseTensor):
        return value
    dense = tf.sparse.to_dense(value)
    dense.set_shape(value.shape)
    return dense


@functools.lru_cache(maxsize=None)
def _parameters(raw):
    return tuple(name for name in inspect.signature(raw).parameters if name != "name")


def _own_op(op_type):
    """The op library's Python wrapper of one of our ops (NgraUniformAt -> ngra_uniform_at), or None."""
    lib = library() if op_type.startswith("Ngra") else None
    return None if lib is None else getattr(lib, re.sub(r"(?<!^)(?=[A-Z])", "_", op_type).lower(), None)


def _python_names(raw, kwargs):
    """kwargs keyed by the raw op's Python argument names.

    A few ops rename an argument in Python (Split's split_dim is `axis`); such
    renames keep the order, so unmatched names pair up in order.
    """
    params = _parameters(raw)
    unmatched = iter(p for p in params if p not in kwargs)
    return {(name if name in params else next(unmatched)): value for name, value in kwargs.items()}
