"""The public propagation ops: scatter, gather and fused_gather.

`graph` is a Graph, a Chunk of a Partition, or a bare Adjacency. Vertex
tensors have one row per source (x_src) or destination (x_dst) vertex; edge
tensors have one row per edge:

- for a Graph, in the order the user gave the edges (graph.src, graph.dst,
  graph.edge_data). The kernels walk the stored (CSC / CSR) order and read
  and write edge rows through the graph's user_edge_ids(), so this costs no
  extra pass; explicit edge_data of fused_gather is put in stored order by
  one tf.gather (the graph's own edge data is already stored that way).
- for a Chunk or an Adjacency, in its own CSC order (edge id = CSC position),
  the order of Chunk.edge_data; the compiler's chunk steps use this. A
  LoadedAdjacency (a chunk's arrays as tensors, inside a compiled loop) is
  taken like an Adjacency, with its sizes known only when the ops run.

`gather` and `fused_gather` can also return each result element's winning
edge (max/min), and `gather_grad` / `fused_gather_grads` compute their
vector-Jacobian products from it directly: the executor differentiates a
chunk step with these, without running its forward kernel again.

Arguments are validated here, before any op is built, so mistakes surface as
a ValueError that names the argument.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf

from ngra_tf.graph import Adjacency, Graph
from ngra_tf.graph.adjacency import LoadedAdjacency
from ngra_tf.ops import reference
from ngra_tf.ops._loader import library

REDUCES = ("sum", "mean", "max", "min")

# What each edge program reads. src_slots: rows of x_src per vertex between
# the vertex axis and the features (None: the number of edge types).
Program = collections.namedtuple("Program", ["src_slots", "uses_dst", "uses_weight", "uses_type"])
PROGRAMS = {
    "copy_src": Program(0, False, False, False),
    "src_mul_edge": Program(0, False, True, False),
    "src_add_dst": Program(0, True, False, False),
    "src_sub_dst": Program(0, True, False, False),
    "src_mul_dst": Program(0, True, False, False),
    "gate_sigmoid": Program(2, True, False, False),
    "gate_tanh": Program(2, True, False, False),
    "gate_relu": Program(2, True, False, False),
    "type_select": Program(None, False, False, True),
}

_NATIVE_DTYPES = (tf.float32, tf.float64)
_WIDENED_DTYPES = (tf.float16, tf.bfloat16)  # computed in float32


def _resolve(graph):
    """(adjacency, its own edge data in adjacency order or None, the Graph if edges are in user order)."""
    if isinstance(graph, (Adjacency, LoadedAdjacency)):
        return graph, None, None
    adjacency = getattr(graph, "adjacency", None)
    if not isinstance(adjacency, (Adjacency, LoadedAdjacency)):
        raise TypeError(f"graph must be a Graph, a Chunk or an Adjacency, got {type(graph).__name__}")
    # Edge data as the tensor a Graph or chunk keeps (made once, eagerly): a traced function captures it
    # rather than embedding a copy, and an eager call does not convert it again.
    edge_data = graph.edge_data_tensor() if hasattr(graph, "edge_data_tensor") else getattr(graph, "edge_data", None)
    return adjacency, edge_data, graph if isinstance(graph, Graph) else None


def _user_ids(user_graph):
    """The Graph's UserEdgeIds, or None when edge tensors are in adjacency order."""
    return None if user_graph is None else user_graph.user_edge_ids()


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _float_tensor(name, x):
    x = tf.convert_to_tensor(x)
    if x.dtype not in _NATIVE_DTYPES + _WIDENED_DTYPES:
        raise ValueError(f"{name} must be float32, float64, float16 or bfloat16, got {x.dtype.name}")
    return x


def _check_rows(name, x, rows, what):
    """rows: the expected count, or None where it is known only at run time (a LoadedAdjacency)."""
    if x.shape.rank == 0:
        raise ValueError(f"{name} must have one row per {what}, got a scalar")
    if rows is not None and x.shape[0] is not None and x.shape[0] != rows:
        raise ValueError(f"{name} must have one row per {what} ({rows}), got shape {x.shape}")


def _compute_dtype(dtype):
    return tf.float32 if dtype in _WIDENED_DTYPES else dtype


def empty_operand(dtype):
    """The empty tensor the ops take for an operand they do not read: a constant in a graph, and eagerly one
    made once per dtype (an eager call would otherwise convert up to four of them)."""
    if not tf.executing_eagerly():
        return tf.constant([], dtype)
    empty = _EMPTY.get(dtype)
    if empty is None:
        empty = _EMPTY[dtype] = tf.constant([], dtype)
    return empty


_EMPTY = {}  # dtype -> an eager empty tensor


def _cast(x, dtype):
    """tf.cast, skipped where x is a tensor of that dtype already: eagerly, tf.cast's dispatch costs more
    than the no-op cast itself."""
    return x if isinstance(x, tf.Tensor) and x.dtype == dtype else tf.cast(x, dtype)


def prepare_graph(tensors):
    """NgraPrepareGraph of an adjacency's five index arrays (AdjacencyTensors), on the current device: the
    fused ops' checks of them, once, as an int8 plan the fused ops take instead of checking again (on a GPU
    it also holds the walks' schedules); None without the compiled library."""
    lib = library()
    return None if lib is None else lib.ngra_prepare_graph(*tensors)


def vouched_plan(num_src, num_dst, num_edges):
    """The CPU plan prepare_graph makes of index arrays of these sizes, for arrays checked as it checks them
    elsewhere (a store's chunks, verified when it is opened): the fused ops then check only their shapes. None
    without the compiled library."""
    lib = library()
    return None if lib is None else lib.ngra_vouched_plan(num_src, num_dst, num_edges)


def graph_plan(adjacency):
    """The plan the fused ops take with adjacency's arrays: its prepared one (made once per Adjacency, or by
    the loader of a LoadedAdjacency), else an empty one (the ops then check the arrays themselves)."""
    plan = adjacency.plan(prepare_graph)
    return empty_operand(tf.int8) if plan is None else plan


def _num_dst(adjacency):
    """The destination count: an int, or a tensor for a LoadedAdjacency."""
    return adjacency.num_dst if adjacency.num_dst is not None else adjacency.num_dst_tensor()


def scatter(graph, x_src, x_dst=None):
    """Copies vertex rows to edges.

    Returns x_src[src[e]] for every edge e, shaped [num_edges, ...]; with
    x_dst, returns the pair (x_src[src[e]], x_dst[dst[e]]).
    """
    src_rows = scatter_side(graph, x_src, "src")
    if x_dst is None:
        return src_rows
    return src_rows, scatter_side(graph, x_dst, "dst")


def scatter_side(graph, x, side):
    """x[src[e]] (side="src") or x[dst[e]] (side="dst") for every edge e."""
    _check_choice("side", side, ("src", "dst"))
    adjacency, _, user_graph = _resolve(graph)
    name = "x_src" if side == "src" else "x_dst"
    rows, what = ((adjacency.num_src, "source vertex") if side == "src"
                  else (adjacency.num_dst, "destination vertex"))
    x = _float_tensor(name, x)
    _check_rows(name, x, rows, what)
    dtype = x.dtype
    x = _cast(x, _compute_dtype(dtype))
    lib = library()
    if lib is None:
        edges = adjacency if user_graph is None else user_graph  # src, dst in the edge tensors' order
        out = reference.scatter(x, edges.src if side == "src" else edges.dst)
    else:
        t, ids = adjacency.tensors(), _user_ids(user_graph)
        if side == "src":  # grouped by source: the CSR view
            out = lib.ngra_scatter(x, t.csr_indptr, t.csr_edge if ids is None else ids.csr)
        else:  # grouped by destination: CSC, where edge ids are positions
            out = lib.ngra_scatter(x, t.csc_indptr, empty_operand(adjacency.index_dtype) if ids is None else ids.csc)
        out.set_shape([adjacency.num_edges] + x.shape[1:].as_list())
    return _cast(out, dtype)


def _init_tensor(init, reduce, num_dst, feature_shape, dtype):
    """Validates the initial accumulator of a gather: [num_dst] + feature_shape in `dtype`, not with mean."""
    if init is None:
        return None
    if reduce == "mean":
        raise ValueError("init cannot be used with reduce='mean': reduce with 'sum' from init, then divide by "
                         "the whole in-degree")
    init = _float_tensor("init", init)
    if init.dtype != dtype:
        raise ValueError(f"init must have the dtype of the values it accumulates ({dtype.name}), got {init.dtype.name}")
    want = tf.TensorShape([num_dst]).concatenate(feature_shape)
    if not init.shape.is_compatible_with(want):
        raise ValueError(f"init must be shaped like the result {want}, got {init.shape}")
    return init


def gather(graph, edge_values, reduce="sum", init=None, return_argedge=False):
    """Reduces edge rows into their destination vertices.

    reduce is sum, mean, max or min; a vertex with no in-edges gets 0. The
    gradient of max and min goes to one edge per element: of those that
    attain the extreme, the first in stored order (lowest source id, then
    the earliest given).

    init ([num_dst, ...] like the result, in edge_values' dtype; not with
    mean) is where each vertex's reduction starts, as if it were a message
    before all of its edges: sum adds to it, max/min compare with it (and it
    wins ties, taking the gradient), and a vertex with no in-edges gets
    init's row. The kernel may reduce into init's buffer in place.

    With return_argedge, returns (result, argedge): for max and min the
    winning edge of each element (-1 where init or nothing won), for sum
    and mean an empty tensor; gather_grad takes it.
    """
    _check_choice("reduce", reduce, REDUCES)
    adjacency, _, user_graph = _resolve(graph)
    values = _float_tensor("edge_values", edge_values)
    _check_rows("edge_values", values, adjacency.num_edges, "edge")
    dtype = values.dtype
    init = _init_tensor(init, reduce, adjacency.num_dst, values.shape[1:], dtype)
    compute = _compute_dtype(dtype)
    values = _cast(values, compute)
    init = None if init is None else _cast(init, compute)
    lib = library()
    if lib is None:
        edges = adjacency if user_graph is None else user_graph  # dst in the edge tensors' order
        out, argedge = reference.gather(values, edges.dst, _num_dst(adjacency), reduce, init, return_argedge=True)
    else:
        ids = _user_ids(user_graph)
        out, argedge = lib.ngra_gather(values, adjacency.tensors().csc_indptr,
                                       empty_operand(adjacency.index_dtype) if ids is None else ids.csc,
                                       empty_operand(compute) if init is None else init, reduce=reduce)
    out = _cast(out, dtype)
    return (out, argedge) if return_argedge else out


def gather_grad(graph, grad, reduce, argedge=None):
    """d loss / d edge_values of gather(graph, edge_values, reduce, init), given d loss / d result.

    argedge is gather's (return_argedge=True), needed for max and min. The
    result's gradient does not depend on init (d init is `grad` for sum and
    grad where argedge is -1 for max/min), so a chunk reduced into a column
    accumulator is differentiated alone.
    """
    _check_choice("reduce", reduce, REDUCES)
    adjacency, _, user_graph = _resolve(graph)
    grad = _float_tensor("grad", grad)
    dtype = grad.dtype
    grad = _cast(grad, _compute_dtype(dtype))
    lib = library()
    if lib is None:
        edges = adjacency if user_graph is None else user_graph
        out = reference.gather_grad(grad, edges.dst, reduce, argedge)
    else:
        t, ids = adjacency.tensors(), _user_ids(user_graph)
        edge_ids = empty_operand(adjacency.index_dtype) if ids is None else ids.csc
        if reduce in ("max", "min"):
            out = lib.ngra_gather_grad_arg(grad, argedge, t.csc_indptr, edge_ids)
        else:
            if reduce == "mean":
                degree = tf.cast(tf.maximum(t.csc_indptr[1:] - t.csc_indptr[:-1], 1), grad.dtype)
                grad = grad / tf.reshape(degree, [-1] + [1] * (grad.shape.rank - 1))
            out = lib.ngra_scatter(grad, t.csc_indptr, edge_ids)
        out.set_shape([adjacency.num_edges] + grad.shape[1:].as_list())
    return _cast(out, dtype)


# A fused gather's operands as the kernels take them: x_src [V, (slots,) width] and x_dst [V, width] in
# the compute dtype, weight [E, W], types [E] int32, init [V, width] or None; `dtype` and `feature_shape`
# are the result's.
_Operands = collections.namedtuple("_Operands", ["adjacency", "x_src", "x_dst", "weight", "types", "init", "dtype",
                                                 "feature_shape"])


def fused_gather(graph, x_src, x_dst=None, edge_data=None, program="copy_src", reduce="sum", init=None,
                 return_argedge=False):
    """Scatter -> element-wise ApplyEdge -> Gather in one kernel, with no per-edge tensor.

    out[v] = reduce over edges e = (u -> v) of program(u, v, e), where program is:
      copy_src      x_src[u]
      src_mul_edge  x_src[u] * w[e]; w is [E] (scalar per edge), [E, F...] (per
                    feature) or [E, H] with features [H, ...] (per head)
      src_add_dst   x_src[u] + x_dst[v]       (and src_sub_dst, src_mul_dst)
      gate_sigmoid  sigmoid(a[u] + x_dst[v]) * c[u] with x_src = [V, 2, F...] holding
                    a = x_src[:, 0] and c = x_src[:, 1] (and gate_tanh, gate_relu)
      type_select   x_src[u, type[e]] with x_src = [V, T, F...] and int edge types
    Edge data defaults to the graph's own; float weights are cast to x_src's dtype.
    init ([num_dst, F...] in x_src's dtype; not with mean) is where each
    vertex's reduction starts, as in gather: a column of chunks reduces into
    one accumulator this way.
    Returns [num_dst, F...] in x_src's dtype; with return_argedge, also the
    winning edge per element ([num_dst, width]) for max and min, as gather.
    """
    f = _fused_operands(graph, x_src, x_dst, edge_data, program, reduce, init)
    adjacency, compute = f.adjacency, f.x_src.dtype
    lib = library()
    if lib is None:
        out, argedge = reference.fused_gather(adjacency.src, adjacency.dst, _num_dst(adjacency),
                                              _dense_gradient(f.x_src), _dense_gradient(f.x_dst),
                                              f.weight, f.types, program, reduce, f.init,
                                              return_argedge=True)
    else:
        out, argedge = lib.ngra_fused_gather(
            f.x_src,
            empty_operand(compute) if f.x_dst is None else f.x_dst,
            empty_operand(compute) if f.weight is None else f.weight,
            empty_operand(tf.int32) if f.types is None else f.types,
            *adjacency.tensors(),
            empty_operand(compute) if f.init is None else f.init,
            graph_plan(adjacency),
            program=program,
            reduce=reduce,
        )
    if f.feature_shape.rank != 1:
        out = tf.reshape(out, [-1 if adjacency.num_dst is None else adjacency.num_dst] + f.feature_shape.as_list())
    out = _cast(out, f.dtype)
    return (out, argedge) if return_argedge else out


def fused_gather_grads(graph, grad, x_src, x_dst=None, edge_data=None, program="copy_src", reduce="sum",
                       argedge=None):
    """The vector-Jacobian product of fused_gather: (d x_src, d x_dst, d edge_data) for d loss / d result.

    argedge is fused_gather's (return_argedge=True), needed for max and min.
    The result's gradient does not depend on init (see gather_grad). Entries
    are None where the program does not read the operand. Each is computed
    by NgraFusedGatherGrad directly, without running the forward kernel
    again; the operands' reshapes and casts are undone by a tape over them.
    """
    originals = [None if t is None else tf.convert_to_tensor(t) for t in (x_src, x_dst, edge_data)]
    with tf.GradientTape() as tape:
        tape.watch([t for t in originals if t is not None and t.dtype.is_floating])
        f = _fused_operands(graph, originals[0], originals[1], originals[2], program, reduce, None)
    compute = f.x_src.dtype
    grad = tf.reshape(_cast(_float_tensor("grad", grad), compute), [-1, f.x_src.shape[-1]])
    operands = [f.x_src, f.x_dst, f.weight]
    lib = library()
    if lib is None:
        d_messages = reference.gather_grad(grad, f.adjacency.dst, reduce, argedge)
        present = [t for t in operands if t is not None]
        with tf.GradientTape() as inner:
            inner.watch(present)
            messages = reference.messages(f.adjacency.src, f.adjacency.dst, f.x_src, f.x_dst, f.weight, f.types,
                                          program)
        found = iter(inner.gradient(messages, present, output_gradients=d_messages))
        d_operands = [None if t is None else next(found) for t in operands]
    else:
        spec = PROGRAMS[program]
        if argedge is None:
            argedge = empty_operand(f.adjacency.index_dtype)
        args = [grad, argedge, f.x_src, empty_operand(compute) if f.x_dst is None else f.x_dst,
                empty_operand(compute) if f.weight is None else f.weight,
                empty_operand(tf.int32) if f.types is None else f.types,
                *f.adjacency.tensors(), graph_plan(f.adjacency)]
        d_operands = [lib.ngra_fused_gather_grad(*args, program=program, reduce=reduce, wrt=name) if used else None
                      for name, used in (("x_src", True), ("x_dst", spec.uses_dst), ("edge_weight", spec.uses_weight))]
    wanted = [(t, d) for t, d in zip(operands, d_operands) if t is not None and d is not None]
    if not wanted:
        return None, None, None
    back = iter(tape.gradient([t for t, _ in wanted], [t for t in originals if t is not None and t.dtype.is_floating],
                              output_gradients=[tf.reshape(d, tf.shape(t)) for t, d in wanted]))
    return tuple(next(back) if t is not None and t.dtype.is_floating else None for t in originals)


def _fused_operands(graph, x_src, x_dst, edge_data, program, reduce, init) -> _Operands:
    """Validates a fused gather's arguments and brings them to the kernels' shapes and dtypes."""
    _check_choice("program", program, tuple(PROGRAMS))
    _check_choice("reduce", reduce, REDUCES)
    spec = PROGRAMS[program]
    adjacency, own_edge_data, user_graph = _resolve(graph)

    x_src = _float_tensor("x_src", x_src)
    _check_rows("x_src", x_src, adjacency.num_src, "source vertex")
    dtype = x_src.dtype
    compute = _compute_dtype(dtype)
    slot_axes = 0 if spec.src_slots == 0 else 1
    if x_src.shape.rank is None or x_src.shape.rank < 1 + slot_axes:
        raise ValueError(f"x_src of program {program} must have rank >= {1 + slot_axes}, got shape {x_src.shape}")
    if spec.src_slots == 2 and x_src.shape[1] != 2:
        raise ValueError(f"x_src of program {program} must be shaped [V, 2, F...] (a and c), got {x_src.shape}")
    feature_shape = x_src.shape[1 + slot_axes:]
    if not feature_shape.is_fully_defined():
        raise ValueError(f"x_src must have known feature dimensions, got shape {x_src.shape}")
    width = int(np.prod(feature_shape.as_list(), dtype=np.int64))
    init = _init_tensor(init, reduce, adjacency.num_dst, feature_shape, dtype)
    x_src = _rows(_cast(x_src, compute), x_src.shape[1:1 + slot_axes].as_list() + [width])
    if init is not None:
        init = _rows(_cast(init, compute), [width])

    if spec.uses_dst:
        if x_dst is None:
            raise ValueError(f"program {program} reads x_dst; pass one row per destination vertex")
        x_dst = _float_tensor("x_dst", x_dst)
        if x_dst.dtype != dtype:
            raise ValueError(f"x_dst must have the dtype of x_src ({dtype.name}), got {x_dst.dtype.name}")
        _check_rows("x_dst", x_dst, adjacency.num_dst, "destination vertex")
        if x_dst.shape[1:] != feature_shape:
            raise ValueError(f"x_dst must have features shaped {feature_shape} like x_src, got shape {x_dst.shape}")
        x_dst = _rows(_cast(x_dst, compute), [width])
    elif x_dst is not None:
        raise ValueError(f"program {program} does not read x_dst; pass x_dst=None")

    # The kernel reads edge data in stored order. A Graph's own edge data is
    # kept that way; edge data passed with a Graph is in the user's order.
    given_order = user_graph
    if edge_data is None and (spec.uses_weight or spec.uses_type):
        edge_data, given_order = own_edge_data, None
    weight = types = None
    if spec.uses_weight:
        weight = _in_stored_order(_edge_weight(edge_data, adjacency.num_edges, feature_shape, compute), given_order)
    elif spec.uses_type:
        types = _in_stored_order(_edge_types(edge_data, adjacency.num_edges, x_src.shape[1]), given_order)
    elif edge_data is not None:
        raise ValueError(f"program {program} does not read edge data; pass edge_data=None")
    return _Operands(adjacency, x_src, x_dst, weight, types, init, dtype, feature_shape)


def _rows(x, row_shape):
    """x as [rows] + row_shape; as it is when it has that shape already, so that nothing stands between a
    kernel's output and the next kernel's init (the chained column reductions of the compiler), and an eager
    call runs no reshape."""
    return x if x.shape[1:] == row_shape else tf.reshape(x, [-1, *row_shape])


def _in_stored_order(edge_rows, user_graph):
    """Edge rows in a Graph's user order, permuted into stored order (one tf.gather, whose
    gradient comes back in user order); rows in adjacency order (user_graph None) as they are."""
    ids = _user_ids(user_graph)
    return edge_rows if ids is None else tf.gather(_dense_gradient(edge_rows), ids.csc)


def _dense_gradient(x):
    """x, through a reshape whose gradient turns tf.gather's IndexedSlices into a tensor: the gradient a
    caller gets back is a tensor, as the kernels' is, and a permutation's or a row gather's touches most rows."""
    return None if x is None else tf.reshape(x, tf.shape(x))


def _edge_weight(edge_data, num_edges, feature_shape, dtype):
    """Edge weights as [E], or [E, W] where W covers a prefix of the feature shape."""
    if edge_data is None:
        raise ValueError("program src_mul_edge needs edge_data (per-edge weights); the graph has none")
    w = _float_tensor("edge_data", edge_data)
    _check_rows("edge_data", w, num_edges, "edge")
    prefix = w.shape[1:]
    if w.shape.rank is None or prefix != feature_shape[:prefix.rank] or not prefix.is_fully_defined():
        raise ValueError(f"edge_data must be [E], or [E] + a prefix of the feature shape {feature_shape}, "
                         f"got shape {w.shape}")
    if prefix.rank == 0:
        return _cast(w, dtype)  # [E]: the kernels take a scalar per edge as it is
    return _rows(_cast(w, dtype), [int(np.prod(prefix.as_list(), dtype=np.int64))])


def _edge_types(edge_data, num_edges, num_types):
    if edge_data is None:
        raise ValueError("program type_select needs edge_data (an integer type per edge); the graph has none")
    types = tf.convert_to_tensor(edge_data)
    if not types.dtype.is_integer:
        raise ValueError(f"edge_data of type_select must be integer edge types, got {types.dtype.name}")
    if types.shape.rank != 1:
        raise ValueError(f"edge_data of type_select must be shaped [E], got {types.shape}")
    _check_rows("edge_data", types, num_edges, "edge")
    if types.dtype == tf.int32:
        return types  # the kernel checks the range
    # Narrowing to int32 could wrap an out-of-range type into a valid one: check first.
    if hasattr(types, "numpy"):
        values = types.numpy()
        bad = values[(values < 0) | (values >= num_types)]
        if bad.size:
            raise ValueError(f"edge_data holds type {int(bad[0])}, out of range for the {num_types} "
                             "type slots of x_src")
        return tf.cast(types, tf.int32)
    in_range = tf.logical_and(tf.reduce_all(types >= 0), tf.reduce_all(types < num_types))
    check = tf.debugging.Assert(in_range, ["edge_data holds a type out of range for the type slots of x_src"])
    with tf.control_dependencies([check]):
        return tf.cast(types, tf.int32)
