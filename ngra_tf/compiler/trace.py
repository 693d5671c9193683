"""Tracing a SAGA stage into a TF graph, and typing every tensor in it.

A stage function (apply_edge or apply_vertex) is traced once into a FuncGraph
whose inputs have an unknown leading dimension: the rows (edges or
vertices). Every traced tensor then gets the set of stage inputs it depends
on, and from that its *kind* (NGra §3.2; Seastar §5.1 states the rules):

    P   depends on no input: parameters and constants
    S   only on edge.src            (V: only on the vertex, in apply_vertex)
    D   only on edge.dst
    E   anything else: edge data, edge ids, both endpoints, the edge set itself

Only *row-wise* ops keep row r of the output a function of row r of the
inputs (element-wise math, matmul by a parameter, reshapes that keep the
row axis...). A sub-graph of them may run on vertex rows instead of edge
rows, and on a chunk's rows instead of the whole graph's. An op that mixes
rows (a reduction over the rows, a transpose that moves them) depends on
the edge set as a whole: it is typed E and recorded, and the layer then runs
only unchunked.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

EDGES = "edges"  # the pseudo-input "the set of rows itself" (counts, softmax groups)
EDGE_ROWS = frozenset({"data", "ids"})  # inputs a chunk carries per edge: a tensor of them alone is an edge row

# Ops whose output row r reads only row r of every input with rows (numpy
# broadcasting, rows never mixed), given that inputs without rows broadcast.
_ELEMENTWISE = frozenset("""
    Identity Cast Neg Abs Sign Square Sqrt Rsqrt Exp Expm1 Log Log1p Sigmoid Tanh Relu Relu6 Elu Selu
    LeakyRelu Softplus Softsign Sin Cos Reciprocal Inv Floor Ceil Round Erf Erfc IsNan IsFinite
    AddV2 Add Sub Mul RealDiv Div DivNoNan MulNoNan Maximum Minimum Pow SquaredDifference FloorDiv
    FloorMod Mod Greater GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr LogicalNot
    Select SelectV2 BiasAdd ZerosLike OnesLike StopGradient PreventGradient ClipByValue
""".split())
# Ops that only read their inputs' shapes: no rows, but they depend on the row count.
_SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax", "ArgMin"})


def has_rows(tensor) -> bool:
    """Whether the tensor's leading axis is the rows: the only unknown dimension of a trace."""
    shape = tensor.shape
    return shape.rank is not None and shape.rank >= 1 and shape[0] is None


def _const(tensor):
    """The value of a traced constant, or None."""
    value = tf.get_static_value(tensor)
    return None if value is None else np.asarray(value)


def _axes_avoid_rows(axes, rank) -> bool:
    return axes is not None and rank is not None and all(int(a) % rank != 0 for a in np.ravel(axes))


def row_wise_problem(op) -> str | None:
    """None if `op` keeps rows apart, else why it does not. Called for ops with a row input."""
    kind = op.type
    rows_in = [has_rows(t) for t in op.inputs]
    out = op.outputs[0] if op.outputs else None
    if kind in _SHAPE_OPS or kind.startswith(("StatelessRandom", "Random")) or kind in ("Fill", "NoOp"):
        return None
    if kind in ("NgraUniformAt", "NgraDropoutMask"):  # row r draws at row r's positions / id (edge.dropout)
        return None
    if kind in _ELEMENTWISE or kind in ("Softmax", "LogSoftmax"):
        rank = out.shape.rank
        for t, rows in zip(op.inputs, rows_in):
            if rows and t.shape.rank != rank:
                return "broadcasts a row tensor against one of higher rank"
            if not rows and t.shape.rank == rank and rank and t.shape[0] != 1:
                return "combines rows with a tensor of the same rank that has no rows"
        if kind in ("Softmax", "LogSoftmax") and rank < 2:
            return "normalises over the rows"
        return None
    if kind == "MatMul":
        if rows_in[1] or op.get_attr("transpose_a"):
            return "contracts over the rows"
        return None
    if kind in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        x, y = op.inputs[:2]
        if (x.shape.rank == 2 and rows_in[0] and op.get_attr("adj_x")) or (rows_in[1] and y.shape.rank == 2):
            return "contracts over the rows"
        return None
    if kind == "Einsum":
        inputs, output = op.get_attr("equation").decode().replace(" ", "").split("->")
        row_letter = output[:1]
        for term, rows in zip(inputs.split(","), rows_in):
            if rows != (term[:1] == row_letter) or (not rows and row_letter in term):
                return f"equation {op.get_attr('equation').decode()} does not keep the row axis first"
        return None
    if kind in ("Reshape", "ExpandDims", "Squeeze"):
        if not has_rows(out):
            return "moves the row axis"
        if kind == "Reshape":
            source, target = op.inputs[0].shape[1:], out.shape[1:]
            if not (source.is_fully_defined() and target.is_fully_defined()
                    and np.prod(source.as_list()) == np.prod(target.as_list())):
                return "may fold rows together"
        return None
    if kind == "StridedSlice":
        if op.get_attr("ellipsis_mask") & 1:
            return None
        strides = _const(op.inputs[3])
        whole = (op.get_attr("begin_mask") & 1 and op.get_attr("end_mask") & 1
                 and not op.get_attr("new_axis_mask") & 1 and not op.get_attr("shrink_axis_mask") & 1)
        return None if whole and strides is not None and strides[0] == 1 else "slices the rows"
    if kind == "Slice":
        begin, size = _const(op.inputs[1]), _const(op.inputs[2])
        return None if begin is not None and size is not None and begin[0] == 0 and size[0] == -1 \
            else "slices the rows"
    if kind == "Transpose":
        perm = _const(op.inputs[1])
        return None if perm is not None and perm[0] == 0 else "moves the row axis"
    if kind in ("ConcatV2", "Pack"):
        axis = _const(op.inputs[-1]) if kind == "ConcatV2" else op.get_attr("axis")
        tensors = op.inputs[:-1] if kind == "ConcatV2" else op.inputs
        if not all(has_rows(t) for t in tensors):
            return "joins row tensors with tensors that have no rows"
        return None if _axes_avoid_rows(axis, out.shape.rank) else "joins along the rows"
    if kind in ("Unpack", "Split", "SplitV"):
        axis = {"Unpack": lambda: op.get_attr("axis"), "Split": lambda: _const(op.inputs[0]),
                "SplitV": lambda: _const(op.inputs[2])}[kind]()
        return None if _axes_avoid_rows(axis, op.inputs[0 if kind != "Split" else 1].shape.rank) \
            else "splits the rows"
    if kind in _REDUCTIONS:
        axes = _const(op.inputs[1])
        return None if _axes_avoid_rows(axes, op.inputs[0].shape.rank) else "reduces over the rows"
    if kind == "GatherV2":
        params_rows, indices_rows = rows_in[:2]
        axis, batch_dims = _const(op.inputs[2]), op.get_attr("batch_dims")
        if batch_dims >= 1:
            return None if params_rows and indices_rows else "batches over rows on one side only"
        if indices_rows and not params_rows:
            return None  # a lookup per row: row r reads indices[r]
        if params_rows and not indices_rows and _axes_avoid_rows(axis, op.inputs[0].shape.rank):
            return None
        return "gathers across rows"
    return f"{kind} is not known to keep rows apart"


@dataclasses.dataclass
class Trace:
    """A traced stage: its FuncGraph, typed tensors and the ops of interest."""

    graph: tf.Graph
    inputs: dict  # input name -> placeholder
    output: tf.Tensor
    markers: dict  # op name -> marker kind ("softmax"): ops the plan evaluates itself
    external: dict  # captured placeholder name -> the outer tensor it stands for
    deps: dict  # tensor name -> frozenset of input names (and EDGES)
    mixing_ops: list  # (op name, reason) of ops that mix rows

    def kind(self, tensor) -> str:
        """P, S, D, V, A or E, by what the tensor depends on (see the module doc)."""
        deps = self.deps[tensor.name]
        if not deps:
            return "P"
        if len(deps) == 1:
            return {"src": "S", "dst": "D", "vertex": "V", "accum": "A"}.get(next(iter(deps)), "E")
        return "E" if "accum" not in deps else "A"

    def ops_between(self, known, targets):
        """The ops needed to compute `targets` from the tensors named in `known`, in graph order."""
        stop = set(known)
        needed, stack = set(), [t.op for t in targets if t.name not in stop]
        while stack:
            op = stack.pop()
            if op.name in needed:
                continue
            needed.add(op.name)
            stack.extend(t.op for t in op.inputs if t.name not in stop)
        return [op for op in self.graph.get_operations() if op.name in needed]


def trace_stage(fn, specs: dict, markers_out: dict | None = None) -> Trace:
    """Traces fn(**placeholders) into a graph with the given TensorSpecs.

    fn may record marker ops into `markers_out` (op name -> kind) while it runs.
    """
    names = list(specs)
    markers = {} if markers_out is None else markers_out

    def stage(*args):
        return fn(**dict(zip(names, args)))

    concrete = tf.function(stage, autograph=False).get_concrete_function(*specs.values())
    graph = concrete.graph
    output = graph.outputs[0]
    if output.op.type == "Identity":  # the FuncGraph's own copy of what fn returned
        output = output.op.inputs[0]
    placeholders = dict(zip(names, graph.inputs[:len(names)]))
    external = {internal.name: outer for outer, internal in graph.captures}
    deps, mixing = {}, []
    input_of = {t.name: name for name, t in placeholders.items()}
    for op in graph.get_operations():
        if op.type == "Placeholder":
            for t in op.outputs:
                deps[t.name] = frozenset({input_of[t.name]}) if t.name in input_of else frozenset()
            continue
        depends = frozenset().union(*(deps[t.name] for t in op.inputs)) if op.inputs else frozenset()
        if op.type in _SHAPE_OPS and any(has_rows(t) for t in op.inputs):
            depends |= {EDGES}
        elif op.name in markers:
            depends |= {EDGES}
        elif any(has_rows(t) for t in op.inputs):
            problem = row_wise_problem(op)
            if problem is not None:
                mixing.append((op.name, f"{op.type}: {problem}"))
                depends |= {EDGES}
        for t in op.outputs:
            deps[t.name] = depends
    if not has_rows(output):
        raise ValueError(f"the stage must return one row per input row, shaped [rows, ...]; "
                         f"it returned shape {output.shape}")
    return Trace(graph, placeholders, output, dict(markers), external, deps, mixing)
