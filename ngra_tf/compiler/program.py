"""A SAGA layer compiled for chunked execution: its two traced stages and the rewrites.

`compile_layer` traces apply_edge and apply_vertex, types their tensors and
decides, independently of any particular graph:

- Rewrite 1, hoisting (NGra §3.2): the S and D sub-graphs of apply_edge
  (and the vertex-only sub-graph of apply_vertex) run once per vertex, before
  the chunk loop, instead of once per edge (once per interval). What stays
  per edge starts from the *frontier*: the S/D tensors an E op consumes.
- Rewrite 2, fusion: when every op that stays per edge is element-wise,
  Scatter-ApplyEdge-Gather becomes one fused kernel per chunk: the stage is
  compiled to edge code (compiler/fusion.py), and `edge.softmax(s) * v`
  to attention reduced by an online softmax. A few common stages (a copy, a
  weight per edge, the G-GCN gates, GG-NN's typed select) keep a
  specialised fused_gather program, which benchmarks showed faster.
  Otherwise the chunk scatters the frontier, replays the edge ops and
  gathers.
- Rewrite 3, narrowing: when the fused edge stage is linear in edge.src
  (copy, or a scalar weight per edge), the accumulator is sum or mean, and
  apply_vertex begins with `accum @ W` where W narrows the rows, W is applied
  to the source rows before propagating (the matmul and the propagation
  commute), so narrower rows move; not when the narrower rows touch more
  cache lines at random (16 -> 12 float32s: 1 -> 1.5 lines), which is what
  a propagation's gathers cost.

`LayerProgram.describe()` says what was decided and why.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from ngra_tf.compiler.edges import TracedEdgeView
from ngra_tf.compiler.fusion import FusedCode, NotFusable, compile_code
from ngra_tf.compiler.trace import EDGE_ROWS, EDGES, Trace, trace_stage
from ngra_tf.ops import generated

REWRITES = ("hoist", "fuse", "narrow")
CACHE_LINE = 64  # bytes
_MATMULS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"})
_GATES = {"Sigmoid": "gate_sigmoid", "Tanh": "gate_tanh", "Relu": "gate_relu"}
_PAIRS = {"AddV2": "src_add_dst", "Add": "src_add_dst", "Sub": "src_sub_dst", "Mul": "src_mul_dst"}


def parse_rewrites(rewrites) -> frozenset:
    """True (all), False/None (none) or a collection of names from REWRITES."""
    if rewrites is True:
        return frozenset(REWRITES)
    if rewrites is False or rewrites is None:
        return frozenset()
    names = frozenset([rewrites] if isinstance(rewrites, str) else rewrites)
    unknown = names - set(REWRITES)
    if unknown:
        raise ValueError(f"rewrites must be True, False or a subset of {REWRITES}; got unknown {sorted(unknown)}")
    return names


# The fused_gather programs kept as specialised kernels (see tools/bench_kernels.py --code).
SPECIALISED = frozenset({"copy_src", "src_mul_edge", "src_add_dst", "src_sub_dst", "src_mul_dst", "gate_sigmoid",
                         "gate_tanh", "gate_relu", "type_select"})


@dataclasses.dataclass(frozen=True)
class Fused:
    """One fused kernel per chunk: a fused_gather program(x_src rows, x_dst rows, per-edge operand), or
    (program "code") the stage's edge code."""

    program: str
    src: tuple = ()  # frontier tensors forming x_src (two for the gates: a, c)
    dst: object = None  # the frontier tensor forming x_dst
    edge_operand: object = None  # a tensor of edge data only: the weight or the type
    weight_shape: tuple = ()  # the per-edge weight's shape after the edge axis
    code: FusedCode | None = None  # the stage as edge code (always, when it compiles)


@dataclasses.dataclass
class LayerProgram:
    """A compiled layer: what runs per vertex, per chunk edge and per interval."""

    name: str
    reduces: tuple
    rewrites: frozenset
    edge: Trace
    vertex: Trace
    src_frontier: list  # apply_edge tensors computed on source vertex rows
    dst_frontier: list  # ... on destination vertex rows
    vertex_frontier: list  # apply_vertex tensors computed on all vertex rows
    edge_ops: list  # traced ops left to run per edge (when not fused)
    fused: Fused | None
    why_not_fused: str | None
    narrow: object | None  # apply_vertex's leading MatMul op, moved before propagation
    why_not_narrow: str | None
    pass_seeds: tuple = ()  # seed-generator states edge.dropout reads: one draw per pass, not per chunk
    narrowed_vertex: tuple = ()  # tensors of the hoisted vertex stage that are the narrowed source rows (x @ W)

    @property
    def chunkable(self) -> bool:
        return not self.edge.mixing_ops

    def accum_spec(self):
        """(feature shape, dtype) of what the chunks accumulate, per reducer."""
        source = self.narrow.outputs[0] if self.narrow is not None else self.edge.output
        return list(source.shape[1:]), source.dtype

    def describe(self) -> list:
        """Lines for explain(): typing, hoisting, fusion and narrowing."""
        lines = [f"layer {self.name}: accumulator {'|'.join(self.reduces)}, "
                 f"rewrites {', '.join(sorted(self.rewrites)) or 'off'}"]
        lines.append("  typing: " + _typing_line(self.edge))
        hoisted = _hoisted_ops(self.edge, self.src_frontier + self.dst_frontier)
        hoisted += _hoisted_ops(self.vertex, self.vertex_frontier)
        lines.append("  hoisted to the vertex stage: " + (", ".join(hoisted) if hoisted else "nothing"))
        per_edge = [op.type for op in self.edge_ops]
        matmuls = sum(t in _MATMULS for t in per_edge)
        lines.append(f"  edge stage: {len(per_edge)} ops per edge, {matmuls} matmuls"
                     + (f" ({', '.join(per_edge)})" if per_edge else ""))
        fused = self.fused
        if fused is not None and fused.program == "code":
            kind = "attention (online softmax)" if fused.code.code.attention else "edge code"
            lines.append(f"  fused: yes, {kind}: {fused.code.code.expression()} "
                         f"({len(fused.code.code.instructions)} instructions)")
            lines.append(f"  kernels (CPU): {generated.status()}")
            if generated.gpus_visible():  # how the program runs on them
                lines.append(f"  kernels (GPU): {generated.cuda_status()}")
        elif fused is not None:
            lines.append(f"  fused: yes, fused_gather program {fused.program}"
                         + (f" (as edge code: {fused.code.code.expression()})" if fused.code is not None else ""))
        else:
            lines.append(f"  fused: no, {self.why_not_fused}")
        if self.narrow is not None:
            w_in, w_out = self.narrow.inputs[0].shape[-1], self.narrow.outputs[0].shape[-1]
            lines.append(f"  narrowed: yes, accum @ W applied before propagating ({w_in} -> {w_out} wide rows)"
                         + ("; apply_vertex's vertex @ W reuses them" if self.narrowed_vertex else ""))
        else:
            lines.append(f"  narrowed: no, {self.why_not_narrow}")
        if not self.chunkable:
            name, reason = self.edge.mixing_ops[0]
            lines.append(f"  chunks: 1 only, {name} mixes edges ({reason})")
        return lines


def _typing_line(trace: Trace) -> str:
    """'src:S data:E | MatMul:S AddV2:E ... -> message:E': the inputs, then each distinct op and kind."""
    used = {t.name for op in trace.ops_between([], [trace.output]) for t in op.inputs} | {trace.output.name}
    inputs = [f"{name}:{trace.kind(t)}" for name, t in trace.inputs.items() if t.name in used]
    seen, ops = set(), []
    for op in trace.ops_between([], [trace.output]):
        if op.name in trace.markers:
            label = f"edge.{trace.markers[op.name]}:E"
        elif op.type in ("Placeholder", "Const", "NoOp", "ReadVariableOp", "Identity") or not op.outputs:
            continue
        else:
            label = f"{op.type}:{trace.kind(op.outputs[0])}"
        if label not in seen and not label.endswith(":P"):
            seen.add(label)
            ops.append(label)
    return f"{' '.join(inputs)} | {' '.join(ops) or 'no ops'} -> message:{trace.kind(trace.output)}"


def _hoisted_ops(trace: Trace, frontier) -> list:
    inputs = [t.name for t in trace.inputs.values()]
    ops = trace.ops_between(inputs, frontier)
    return [f"{op.type}:{trace.kind(op.outputs[0])}" for op in ops
            if op.type not in ("Const", "ReadVariableOp", "Placeholder", "Identity", "StridedSlice")
            and trace.kind(op.outputs[0]) != "P"]


def compile_layer(layer, vertex_spec: tf.TensorSpec, data_spec: tf.TensorSpec | None, rewrites,
                  training: bool = False) -> LayerProgram:
    """Traces and analyses `layer` for vertex rows like vertex_spec and edge data like data_spec (`training`:
    whether edge.dropout drops)."""
    rewrites = parse_rewrites(rewrites)
    markers, pass_seeds = {}, []
    specs = {"src": vertex_spec, "dst": vertex_spec, "ids": tf.TensorSpec([None], tf.int64)}
    if data_spec is not None:
        specs["data"] = data_spec

    def edge_fn(src, dst, ids, data=None):
        with tf.name_scope("ApplyEdge"):
            return layer.apply_edge(TracedEdgeView(src, dst, data, markers, ids, training, pass_seeds))

    edge = trace_stage(edge_fn, specs, markers)
    accum_width = list(edge.output.shape[1:])
    if accum_width:
        accum_width[-1] *= len(layer._reduces)
    accum_spec = tf.TensorSpec([None] + accum_width, edge.output.dtype)
    vertex = trace_stage(lambda vertex, accum: layer.apply_vertex(vertex, accum),
                         {"vertex": vertex_spec, "accum": accum_spec})

    hoist = "hoist" in rewrites
    src_frontier, dst_frontier = _frontier(edge, {"S"}, hoist), _frontier(edge, {"D"}, hoist)
    fused, why_not = (_fuse(edge, src_frontier, dst_frontier) if "fuse" in rewrites
                      else (None, "fusion is off"))
    if fused is not None and fused.code is not None and fused.code.code.attention \
            and tuple(layer._reduces) != ("sum",):
        fused, why_not = None, (f"attention fuses with a sum accumulator, and this one is "
                                f"{'|'.join(layer._reduces)}")
    known = [t.name for t in src_frontier + dst_frontier] + [edge.inputs[name].name for name in EDGE_ROWS
                                                             if name in edge.inputs]
    edge_ops = [] if fused is not None else [
        op for op in edge.ops_between(known, [edge.output])
        if op.type not in ("Const", "ReadVariableOp", "Placeholder", "Identity")]
    narrow, why_not_narrow = _match_narrow(edge, vertex, fused, tuple(layer._reduces), "narrow" in rewrites)
    vertex_frontier = _frontier(vertex, {"V"}, hoist)
    narrowed_vertex = _narrowed_vertex(edge, vertex, fused, narrow, vertex_frontier)
    return LayerProgram(layer.name, tuple(layer._reduces), rewrites, edge, vertex, src_frontier, dst_frontier,
                        vertex_frontier, edge_ops, fused, why_not, narrow, why_not_narrow, tuple(pass_seeds),
                        narrowed_vertex)


def _frontier(trace: Trace, kinds, hoist: bool):
    """Tensors of the given kinds that the rest of the stage reads.

    Hoisting on: the largest sub-graphs of those kinds (their results, where
    another kind of op consumes them). Off: the stage inputs themselves.
    """
    if not hoist:
        inputs = [t for t in trace.inputs.values() if trace.kind(t) in kinds]
        needed = {t.name for op in trace.ops_between([], [trace.output]) for t in op.inputs}
        return [t for t in inputs if t.name in needed or t is trace.output]
    frontier, seen = [], set()

    def add(tensor):
        if tensor.name not in seen:
            seen.add(tensor.name)
            frontier.append(tensor)

    if trace.kind(trace.output) in kinds:
        add(trace.output)
    for op in trace.ops_between([], [trace.output]):
        if op.outputs and trace.kind(op.outputs[0]) not in kinds:
            for tensor in op.inputs:
                if trace.kind(tensor) in kinds:
                    add(tensor)
    return frontier


def _strip(tensor):
    while tensor.op.type == "Identity" and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor


def _fuse(edge: Trace, src_frontier, dst_frontier):
    """(Fused, None) when the per-edge part fuses (a specialised program where one matches), else (None, why)."""
    try:
        code, why_code = compile_code(edge, src_frontier, dst_frontier), None
    except NotFusable as error:
        code, why_code = None, str(error)
    template, _ = _match_fused(edge, src_frontier, dst_frontier)
    if template is not None and template.program in SPECIALISED:
        return dataclasses.replace(template, code=code), None
    if code is not None:
        return Fused("code", code=code), None
    return None, why_code


def _match_fused(edge: Trace, src_frontier, dst_frontier):
    """(Fused, None) when the per-edge part is one fused_gather program, else (None, why not)."""
    if edge.markers:
        return None, "edge.softmax normalises over each destination's in-edges, which no fused program does"
    src_names, dst_names = {t.name for t in src_frontier}, {t.name for t in dst_frontier}

    def is_src(t):
        return t.name in src_names

    def is_dst(t):
        return t.name in dst_names

    def is_edge_data(t):
        return edge.kind(t) == "E" and edge.deps[t.name] <= EDGE_ROWS

    def same_features(*tensors):
        shapes = [t.shape[1:] for t in tensors]
        return all(s.is_fully_defined() and s == shapes[0] for s in shapes)

    out = _strip(edge.output)
    if is_src(out):
        return Fused("copy_src", (out,)), None
    op = out.op
    operands = [_strip(t) for t in op.inputs]
    if op.type == "Mul":
        for a, b in (operands, operands[::-1]):
            if is_src(a) and is_edge_data(b):
                shape = _weight_shape(a, b)
                if shape is None:
                    return None, (f"the edge weight is shaped {b.shape}, which is neither per edge, per feature "
                                  f"nor per head of the {a.shape} rows")
                return Fused("src_mul_edge", (a,), edge_operand=b, weight_shape=shape), None
            if is_src(a) and b.op.type in _GATES:
                inner = [_strip(t) for t in b.op.inputs]
                gate = _strip(inner[0]).op
                if gate.type in ("AddV2", "Add"):
                    x, y = (_strip(t) for t in gate.inputs)
                    if is_dst(x):
                        x, y = y, x
                    if is_src(x) and is_dst(y) and same_features(a, x, y):
                        return Fused(_GATES[b.op.type], (x, a), dst=y), None
    if op.type in _PAIRS:
        a, b = operands
        if op.type != "Sub" and is_dst(a) and is_src(b):
            a, b = b, a
        if is_src(a) and is_dst(b) and same_features(a, b):
            return Fused(_PAIRS[op.type], (a,), dst=b), None
    if op.type == "GatherV2" and op.get_attr("batch_dims") == 1:
        params, indices = operands[:2]
        axis = tf.get_static_value(op.inputs[2])
        if is_src(params) and is_edge_data(indices) and indices.dtype.is_integer and axis == 1 \
                and indices.shape.rank == 1:
            return Fused("type_select", (params,), edge_operand=indices), None
    kinds = ", ".join(edge.kind(t) for t in op.inputs)
    return None, f"the edge stage ends in {op.type}({kinds}), which no fused_gather program computes"


def _weight_shape(rows, weight):
    """The weight's shape after the edge axis as fused_gather takes it ([] or a prefix of the
    features), or None. A weight broadcasts against the rows: trailing 1s are dropped."""
    features, dims = rows.shape[1:], weight.shape[1:]
    if not features.is_fully_defined() or not dims.is_fully_defined() or dims.rank != features.rank:
        return None if dims.rank != 0 or features.rank != 0 else ()
    dims = dims.as_list()
    while dims and dims[-1] == 1:
        dims.pop()
    return tuple(dims) if tuple(dims) == tuple(features.as_list()[:len(dims)]) else None


def _narrowed_vertex(edge: Trace, vertex: Trace, fused, narrow, vertex_frontier) -> tuple:
    """The tensors `vertex @ W` of the hoisted vertex stage, W narrowing's, when the narrowed rows are edge.src @ W:
    the same rows (GIN's (1 + eps) x W_1 beside accum W_1), computed once."""
    if narrow is None or _strip(fused.src[0]) is not edge.inputs["src"]:
        return ()

    def variable_read(tensor):
        tensor = _strip(tensor)
        return tensor.op.inputs[0].name if tensor.op.type == "ReadVariableOp" else None

    weight = variable_read(narrow.inputs[1])
    hoisted = vertex.ops_between([vertex.inputs["vertex"].name], vertex_frontier)
    return tuple(op.outputs[0].name for op in hoisted
                 if weight is not None and op.type == "MatMul" and _strip(op.inputs[0]) is vertex.inputs["vertex"]
                 and variable_read(op.inputs[1]) == weight and not op.get_attr("transpose_a")
                 and op.get_attr("transpose_b") == narrow.get_attr("transpose_b"))


def _row_lines(width: int, itemsize: int) -> float:
    """The cache lines a row of `width` items touches on average, rows packed from an aligned start: a propagation
    reads rows at random, so these lines, not its bytes, are what a row costs (16 float32s touch 1 line; 12 touch
    1.5, half of them straddling two)."""
    row = width * itemsize
    return (row - math.gcd(row, CACHE_LINE)) / CACHE_LINE + 1


def _match_narrow(edge: Trace, vertex: Trace, fused, reduces, enabled: bool):
    """(apply_vertex's leading MatMul, None) when it commutes with the propagation and narrows, else (None, why)."""
    if not enabled:
        return None, "narrowing is off"
    if fused is None or fused.program not in ("copy_src", "src_mul_edge") or fused.weight_shape:
        return None, "the edge stage is not a copy or a scalar weight per edge of edge.src"
    if len(reduces) != 1 or reduces[0] not in ("sum", "mean"):
        return None, f"accumulator {'|'.join(reduces)} does not commute with a matmul (only sum and mean do)"
    accum = vertex.inputs["accum"]
    consumers = accum.consumers()
    if len(consumers) != 1 or consumers[0].type != "MatMul" or consumers[0].inputs[0] is not accum \
            or consumers[0].get_attr("transpose_a") or vertex.kind(consumers[0].inputs[1]) != "P":
        return None, "apply_vertex does not begin with accum @ W"
    matmul = consumers[0]
    width_in, width_out = accum.shape[-1], matmul.outputs[0].shape[-1]
    if width_in is None or width_out is None or width_out >= width_in:
        return None, f"accum @ W does not narrow the rows ({width_in} -> {width_out})"
    itemsize = accum.dtype.size
    lines_in, lines_out = _row_lines(width_in, itemsize), _row_lines(width_out, itemsize)
    if lines_out > lines_in:
        return None, (f"accum @ W narrows the rows ({width_in} -> {width_out}) but not the cache lines a gathered "
                      f"row touches ({lines_in:g} -> {lines_out:g} of {CACHE_LINE} bytes)")
    if EDGES in edge.deps[fused.src[0].name]:
        return None, "the source rows depend on the edge set"
    return matmul, None

