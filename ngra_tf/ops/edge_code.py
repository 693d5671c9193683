"""Edge code: any element-wise edge stage as one fused Scatter-ApplyEdge-Gather.

An `EdgeCode` is straight-line code over per-edge operands (see
ops/kernels/edge_code.h): instruction i computes register i from a load of
an operand, a constant, or earlier registers. Operands are three matrices,
packed by the caller:

    x_src  [num_src, Ks]   rows of the source vertex (hoisted tensors, flattened side by side)
    x_dst  [num_dst, Kd]   rows of the destination vertex
    edge   [num_edges, Ke] rows of the edge (edge data, in the adjacency's order)

and, for typed loads, an int32 type per edge. Everything is evaluated per
message feature f in [0, width); load i reads its operand row at
`tables[table][f]` (+ type[e] * stride for a typed source load), so
broadcasting, reshapes and slices of a row are folded into the tables.

`edge_code_gather(graph, code, ...)` reduces the message into destinations
(sum, mean, max, min), or, with `reduce="softmax"`, computes attention:
softmax over each destination's in-edges of register `score`, times register
`value`, summed. The softmax result is a state [acc | sum | m] per row (3 x
width) that chains through `init` across chunks (online softmax);
`softmax_result(state)` is acc / sum. Gradients are generated from the same
code and run as fused kernels too (NgraEdgeCodeGrad). On the CPU each program
runs as C++ generated for it (ngra_tf.ops.generated), or interpreted where no
compiler is at hand.

Without the compiled library, `reference_messages` evaluates the code with TF
ops on per-edge tensors, and the gathers reduce them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.graph import Adjacency
from ngra_tf.graph.adjacency import LoadedAdjacency
from ngra_tf.ops import generated, reference
from ngra_tf.ops.edge_program import BINARY, LOADS, MAX_INSTRUCTIONS, OPCODES, UNARY, EdgeCode  # noqa: F401
from ngra_tf.ops._loader import library
from ngra_tf.ops.generated import CODE_REDUCES
from ngra_tf.ops.propagation import empty_operand, graph_plan

_TF_UNARY = {
    "neg": tf.negative, "abs": tf.abs, "square": tf.square, "sqrt": tf.sqrt, "rsqrt": tf.math.rsqrt, "exp": tf.exp,
    "expm1": tf.math.expm1, "log": tf.math.log, "log1p": tf.math.log1p, "reciprocal": tf.math.reciprocal,
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "relu": tf.nn.relu, "elu": tf.nn.elu, "selu": tf.nn.selu,
    "softplus": tf.math.softplus, "softsign": tf.math.softsign,
}
_TF_BINARY = {"add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "div": tf.math.truediv, "maximum": tf.maximum,
              "minimum": tf.minimum, "squared_difference": tf.math.squared_difference}


def _adjacency(graph):
    """A Chunk's (or a LoadedChunk's) adjacency; an adjacency as it is."""
    if isinstance(graph, (Adjacency, LoadedAdjacency)):
        return graph
    adjacency = getattr(graph, "adjacency", None)
    if not isinstance(adjacency, (Adjacency, LoadedAdjacency)):
        raise TypeError(f"graph must be a Chunk or an Adjacency (edge rows in CSC order), got {type(graph).__name__}")
    return adjacency


def _operands(code: EdgeCode, x_dst, edge_data, edge_type, dtype):
    """The kernel's operand tensors, checked against what the code reads."""
    def matrix(name, x, needed, rows):
        if not needed:
            if x is not None:
                raise ValueError(f"the edge code reads no {name}; pass {name}=None")
            return tf.zeros([0, 0], dtype)
        if x is None:
            raise ValueError(f"the edge code reads {name}; pass one row per {rows}")
        x = tf.convert_to_tensor(x)
        if x.dtype != dtype:
            raise ValueError(f"{name} must have x_src's dtype {dtype.name}, got {x.dtype.name}")
        if x.shape.rank != 2:
            raise ValueError(f"{name} must be a matrix [rows, width], got shape {x.shape}")
        return x

    x_dst = matrix("x_dst", x_dst, code.reads("dst"), "destination vertex")
    edge_data = matrix("edge_data", edge_data, code.reads("edge"), "edge")
    if code.reads("type"):
        if edge_type is None:
            raise ValueError("the edge code has typed loads; pass edge_type, an int32 type per edge")
        edge_type = tf.cast(edge_type, tf.int32)
    elif edge_type is not None:
        raise ValueError("the edge code has no typed load; pass edge_type=None")
    else:
        edge_type = empty_operand(tf.int32)
    return x_dst, edge_data, edge_type


def _kernels(code, dtype, index_dtype, reduce) -> dict:
    """The ops' `kernel` and `cuda_kernel` attributes: the program's generated code for the CPU and for GPUs
    (paths; empty to interpret)."""
    return {"kernel": generated.library_for(code, dtype, index_dtype, reduce),
            "cuda_kernel": generated.cuda_kernels_for(code, dtype, index_dtype, reduce)}


def edge_code_gather(graph, code: EdgeCode, x_src, x_dst=None, edge_data=None, edge_type=None, reduce="sum",
                     init=None, return_aux=False):
    """out[v] = reduce over edges e = (u -> v) of the code's message (see the module doc).

    graph: a Chunk, Adjacency or LoadedAdjacency (edge rows in its CSC order).
    Returns [num_dst, width] ([num_dst, 3 * width] softmax state); with
    return_aux also the winning edges (max / min) or an empty tensor.
    """
    adjacency = _adjacency(graph)
    if reduce not in CODE_REDUCES:
        raise ValueError(f"reduce must be one of {', '.join(CODE_REDUCES)}; got {reduce!r}")
    if (reduce == "softmax") != code.attention:
        raise ValueError("reduce='softmax' goes with (and only with) an attention code (one with a score)")
    x_src = tf.convert_to_tensor(x_src)
    if x_src.shape.rank != 2 or x_src.dtype not in (tf.float32, tf.float64):
        raise ValueError(f"x_src must be a float32/float64 matrix [num_src, width], got {x_src.dtype.name} "
                         f"{x_src.shape}")
    dtype = x_src.dtype
    x_dst, edge_data, edge_type = _operands(code, x_dst, edge_data, edge_type, dtype)
    if init is not None and reduce == "mean":
        raise ValueError("init cannot be used with reduce='mean': reduce with 'sum' from init, then divide by "
                         "the whole in-degree")
    lib = library()
    if lib is None:
        out, aux = _reference_gather(adjacency, code, x_src, x_dst, edge_data, edge_type, reduce, init)
    else:
        out, aux = lib.ngra_edge_code(
            x_src, x_dst, edge_data, edge_type, tf.constant(code.constants, dtype), tf.constant(code.tables),
            *adjacency.tensors(), empty_operand(dtype) if init is None else init, graph_plan(adjacency),
            reduce=reduce, **_kernels(code, dtype, adjacency.index_dtype, reduce), **code.attrs())
    return (out, aux) if return_aux else out


# Ops that take more than a few cycles a feature: a division, a root, a transcendental function (not tanh: a
# rational function in edge code).
_COSTLY = {OPCODES[name] for name in ("div", "reciprocal", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sigmoid",
                                      "elu", "selu", "softplus", "softsign", "pow_const")}


def src_walk_takes_dst(x_src, x_dst, opcodes) -> bool:
    """Whether one gradient walk over sources should also give d x_dst (wrt="x_src_and_dst"). It keeps each
    edge's share of d x_dst in a row of its own and adds them per destination after each block of sources,
    instead of a second walk that reads every edge's source row again and evaluates the program again
    (opcodes: its instructions'). That pays where the destination's rows are at most a quarter of the
    source's (attention's per-head scores) or the program has two costly ops or more: one walk took
    0.83-0.92x the time of two for an exp/div score, 0.99-1.20x for a sigmoid gate, 1.12-1.73x for an RBF
    and a ratio (one costly op each) and 1.34-1.45x for a relu gate, at 11,650 vertices x 64 features and
    46,600 x 128, once the second walk sums its tiles in registers (docs/results/fused-edges.md). Rows of
    unknown width: no."""
    src_width, dst_width = x_src.shape[-1], x_dst.shape[-1]
    if src_width is None or dst_width is None:
        return False
    return 4 * dst_width <= src_width or sum(int(op) in _COSTLY for op in opcodes) >= 2


def edge_code_grads(graph, code: EdgeCode, grad, x_src, x_dst=None, edge_data=None, edge_type=None,
                    reduce="sum", aux=None, state=None, src_and_dst=None):
    """(d x_src, d x_dst, d edge_data) of edge_code_gather for d (its result) = grad; None where the code reads
    nothing of that operand. aux: the forward's winners (max / min); state: its finished softmax state
    (softmax). The result's gradient does not depend on init. src_and_dst: both d x_src and d x_dst from one
    walk (None: as the registered gradient decides, src_walk_takes_dst)."""
    adjacency = _adjacency(graph)
    x_src = tf.convert_to_tensor(x_src)
    dtype = x_src.dtype
    x_dst, edge_data, edge_type = _operands(code, x_dst, edge_data, edge_type, dtype)
    lib = library()
    if lib is None:
        present = [t for t, side in ((x_src, "src"), (x_dst, "dst"), (edge_data, "edge")) if code.reads(side)]
        with tf.GradientTape() as tape:
            tape.watch(present)
            out = _reference_result(adjacency, code, x_src, x_dst, edge_data, edge_type, reduce, aux, state)
        found = iter(tape.gradient(out, present, output_gradients=grad))
        return tuple(next(found) if code.reads(side) else None for side in ("src", "dst", "edge"))
    args = [grad, empty_operand(adjacency.index_dtype) if aux is None else aux,
            empty_operand(dtype) if state is None else state,
            x_src, x_dst, edge_data, edge_type, tf.constant(code.constants, dtype), tf.constant(code.tables),
            *adjacency.tensors(), graph_plan(adjacency)]
    attrs = dict(reduce=reduce, **_kernels(code, dtype, adjacency.index_dtype, reduce), **code.attrs())
    if src_and_dst is None:
        src_and_dst = code.reads("dst") and src_walk_takes_dst(x_src, x_dst, code.attrs()["code"][0::4])
    if src_and_dst and code.reads("src") and code.reads("dst"):
        d_src, d_dst = lib.ngra_edge_code_grad(*args, wrt="x_src_and_dst", **attrs)
        return d_src, d_dst, lib.ngra_edge_code_grad(*args, wrt="edge_data", **attrs)[0] if code.reads("edge") else None
    return tuple(lib.ngra_edge_code_grad(*args, wrt=wrt, **attrs)[0] if code.reads(side) else None
                 for side, wrt in (("src", "x_src"), ("dst", "x_dst"), ("edge", "edge_data")))


def softmax_result(state, width: int):
    """acc / sum of an online-softmax state [acc | sum | m] (0 where nothing was reduced)."""
    del width  # the state's thirds

    @tf.custom_gradient
    def finish(state):
        acc, total, _ = tf.split(state, 3, axis=1)
        out = tf.math.divide_no_nan(acc, total)

        def grad(d_out):  # d state in one concat (slicing's gradient would pad each third to the whole state)
            d_acc = tf.math.divide_no_nan(d_out, total)
            return tf.concat([d_acc, -d_acc * out, tf.zeros_like(total)], axis=1)

        return out, grad

    return finish(state)


def softmax_init_grad(grad, init, out, width: int):
    """d init of a softmax step out = step(init, chunk), for d out = grad: acc and sum were rescaled by
    exp(m_init - m_out); m is a shift that no result acc / sum depends on."""
    m_in, m_out = init[:, 2 * width:], out[:, 2 * width:]
    scale = tf.where(tf.math.is_inf(m_in) & (m_in < 0), tf.zeros_like(m_in), tf.exp(m_in - m_out))
    return tf.concat([grad[:, :width] * scale, grad[:, width:2 * width] * scale, tf.zeros_like(m_in)], axis=1)


# ---- the reference: per-edge tensors and TF ops ----

def reference_messages(adjacency, code: EdgeCode, x_src, x_dst, edge_data, edge_type, registers=None):
    """Every register of the code on every edge of the adjacency ([E, width] each), in CSC order."""
    src, dst = adjacency.src, adjacency.dst
    src_rows = tf.gather(x_src, src)
    dst_rows = tf.gather(x_dst, dst) if code.reads("dst") else None
    regs = []
    for op, a, b, k in code.instructions:
        if op in LOADS:
            table = tf.constant(code.tables[a], tf.int32)
            if op == "load_src_typed":
                index = table[None, :] + edge_type[:, None] * b
                regs.append(tf.gather(src_rows, index, batch_dims=1))
            else:
                rows = {"load_src": src_rows, "load_dst": dst_rows, "load_edge": edge_data}[op]
                regs.append(tf.gather(rows, table, axis=1))
        elif op == "const":
            regs.append(tf.fill(tf.shape(regs[0]) if regs else [tf.shape(src)[0], code.width],
                                tf.constant(code.constants[k], x_src.dtype)))
        elif op in _TF_BINARY:
            regs.append(_TF_BINARY[op](regs[a], regs[b]))
        elif op == "leaky_relu":
            regs.append(tf.nn.leaky_relu(regs[a], float(code.constants[k])))
        elif op == "pow_const":
            regs.append(tf.pow(regs[a], tf.constant(code.constants[k], x_src.dtype)))
        else:
            regs.append(_TF_UNARY[op](regs[a]))
    return regs


def _reference_result(adjacency, code, x_src, x_dst, edge_data, edge_type, reduce, aux=None, state=None):
    """The result the kernels compute, built from TF ops (differentiable by TF)."""
    regs = reference_messages(adjacency, code, x_src, x_dst, edge_data, edge_type)
    dst, num_dst = adjacency.dst, adjacency.num_dst_tensor() if adjacency.num_dst is None else adjacency.num_dst
    if reduce != "softmax":
        if aux is not None and reduce in ("max", "min"):  # d flows to the winners only
            message = regs[code.value]
            edge = tf.range(tf.shape(message, out_type=aux.dtype)[0], dtype=aux.dtype)
            won = tf.equal(tf.gather(aux, dst), edge[:, None])
            return tf.math.unsorted_segment_sum(tf.where(won, message, tf.zeros_like(message)), dst, num_dst)
        return reference.segment_reduce(regs[code.value], dst, num_dst, reduce)
    z, x = regs[code.score], regs[code.value]
    m = tf.stop_gradient(state[:, 2 * code.width:] if state is not None
                         else tf.math.unsorted_segment_max(z, dst, num_dst))
    weight = tf.exp(z - tf.gather(m, dst))
    acc = tf.math.unsorted_segment_sum(weight * x, dst, num_dst)
    total = tf.math.unsorted_segment_sum(weight, dst, num_dst)
    return tf.concat([acc, total, m], axis=1)


def _reference_gather(adjacency, code, x_src, x_dst, edge_data, edge_type, reduce, init):
    regs = reference_messages(adjacency, code, x_src, x_dst, edge_data, edge_type)
    num_dst = adjacency.num_dst_tensor() if adjacency.num_dst is None else adjacency.num_dst
    if reduce != "softmax":
        return reference.gather(regs[code.value], adjacency.dst, num_dst, reduce, init, return_argedge=True)
    chunk = _reference_result(adjacency, code, x_src, x_dst, edge_data, edge_type, "softmax")
    if init is None:
        width = code.width
        has = tf.math.unsorted_segment_sum(tf.ones_like(adjacency.dst), adjacency.dst, num_dst)[:, None] > 0
        m = tf.where(has, chunk[:, 2 * width:], tf.constant(-np.inf, chunk.dtype))
        return tf.concat([chunk[:, :2 * width], m], 1), empty_operand(adjacency.index_dtype)
    return _merge_states(init, chunk, code.width), empty_operand(adjacency.index_dtype)


def _merge_states(a, b, width):
    """Two online-softmax states of the same destinations as one."""
    m = tf.maximum(a[:, 2 * width:], b[:, 2 * width:])
    finite = tf.math.is_finite(m)

    def scale(s):
        return tf.where(finite, tf.exp(s[:, 2 * width:] - tf.where(finite, m, 0)), tf.zeros_like(m))

    sa, sb = scale(a), scale(b)
    acc = a[:, :width] * sa + b[:, :width] * sb
    total = a[:, width:2 * width] * sa + b[:, width:2 * width] * sb
    return tf.concat([acc, total, m], axis=1)


__all__ = ["CODE_REDUCES", "EdgeCode", "OPCODES", "edge_code_gather", "edge_code_grads", "reference_messages",
           "softmax_init_grad", "softmax_result", "src_walk_takes_dst"]
