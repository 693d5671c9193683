"""Shared helpers of the op tests: random graphs, program inputs, a numpy oracle.

The oracle is written independently of ngra_tf.ops.reference: plain numpy,
one destination at a time, in stored (CSC) edge order.
"""

import os
import pathlib

import numpy as np
import tensorflow as tf

import ngra_tf
from ngra_tf.graph import Adjacency
from ngra_tf.ops import PROGRAMS, REDUCES

PROGRAM_NAMES = tuple(PROGRAMS)
NUM_TYPES = 3  # type slots of x_src for type_select
GRAPH_KINDS = ("random", "chunk", "no_edges", "no_vertices")


def lib():
    return ngra_tf.ops.library()


def subprocess_env(**overrides):
    """The environment for a Python subprocess that imports ngra_tf as this one does."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **overrides)
    root = str(pathlib.Path(ngra_tf.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


# ---- graphs ----


def random_graph(rng, num_vertices=9, num_edges=24, edge_data=None):
    """A graph with isolated vertices (the last two), multi-edges and self loops."""
    active = max(num_vertices - 2, 1)
    src = rng.integers(0, active, num_edges)
    dst = rng.integers(0, active, num_edges)
    if num_edges >= 4:
        src[-2:], dst[-2:] = src[:2], dst[:2]  # two duplicated edges
        dst[2] = src[2]  # a self loop
    return ngra_tf.Graph.from_edges(src, dst, num_vertices, edge_data=edge_data)


def to_int64(adjacency):
    """The same adjacency with int64 index arrays."""
    arrays = [np.array(a, dtype=np.int64) for a in (adjacency.csc_indptr, adjacency.csc_src,
                                                     adjacency.csr_indptr, adjacency.csr_dst,
                                                     adjacency.csr_edge)]
    return Adjacency(adjacency.num_src, adjacency.num_dst, *arrays)


def make_adjacency(kind, rng, index_dtype=np.int32):
    """An Adjacency of one of GRAPH_KINDS, with int32 or int64 indices."""
    if kind == "random":
        adjacency = random_graph(rng).adjacency
    elif kind == "chunk":  # rectangular: interval 0 -> interval 2 of a 3-way partition
        adjacency = random_graph(rng, num_vertices=20, num_edges=120).partition(3).chunk(0, 2).adjacency
        assert adjacency.num_src != adjacency.num_dst and adjacency.num_edges > 0
    elif kind == "rect":  # rectangular, built directly: 5 sources, 3 destinations
        src, dst = rng.integers(0, 5, 12), rng.integers(0, 2, 12)
        adjacency, _ = Adjacency.from_coo(src, dst, 5, 3)
    elif kind == "no_edges":
        adjacency = ngra_tf.Graph.from_edges([], [], num_vertices=4).adjacency
    elif kind == "no_vertices":
        adjacency = ngra_tf.Graph.from_edges([], [], num_vertices=0).adjacency
    else:
        raise ValueError(kind)
    if np.dtype(index_dtype) == np.int64:
        adjacency = to_int64(adjacency)
    assert adjacency.index_dtype == np.dtype(index_dtype)
    return adjacency


# Shapes that make the kernels cut the gathered rows into cache blocks (see
# ReduceSegments in ops/kernels/propagate.h): many gathered rows (over 1 MiB
# of feature tiles) and high degree. "wide_src" blocks the forward and x_dst
# gradient walks (5000 source rows, in-degree 133), "wide_dst" the x_src
# gradient walk (5000 destination rows, out-degree 133); "unsorted" is
# wide_src with the edges of every segment, CSC and CSR, in shuffled order.
BLOCKED_KINDS = ("wide_src", "wide_dst", "unsorted")
BLOCKED_WIDTH = 130  # two full feature tiles of float32 (128) or three of float64 (64), then a partial one


def blocked_adjacency(kind, index_dtype=np.int32, seed=0):
    rng = np.random.default_rng(seed)
    many, few, edges = 5000, 30, 4000
    if kind == "wide_dst":
        adjacency, _ = Adjacency.from_coo(rng.integers(0, few, edges), rng.integers(0, many, edges), few, many)
    else:
        adjacency, _ = Adjacency.from_coo(rng.integers(0, many, edges), rng.integers(0, few, edges), many, few)
    if kind == "unsorted":
        adjacency = shuffled_within_segments(adjacency, rng)
    return to_int64(adjacency) if np.dtype(index_dtype) == np.int64 else adjacency


def cache_blocks(gathered_rows, parts, itemsize, positions, segments):
    """How many row blocks ReduceSegments cuts a full feature tile's walk into (1: none)."""
    tile_bytes = 512 * parts
    rows_per_block = max(1, (1 << 20) // tile_bytes)
    blocks = -(-gathered_rows // rows_per_block)
    return blocks if blocks > 1 and positions >= 16 * blocks * segments else 1  # kMinEdgesPerBlock


def _shuffle_segments(indptr, rng):
    """A permutation of positions that shuffles within each segment only."""
    order = np.arange(indptr[-1])
    for s in range(len(indptr) - 1):
        rng.shuffle(order[indptr[s]:indptr[s + 1]])
    return order


def shuffled_within_segments(adjacency, rng):
    """The same edges, with each CSC segment's and CSR segment's positions in random
    order: valid input to the kernels, but not sorted by the gathered row."""
    csc_src = adjacency.csc_src[_shuffle_segments(adjacency.csc_indptr, rng)]
    csr_edge = np.argsort(csc_src, kind="stable")
    csr_indptr = np.zeros(adjacency.num_src + 1, np.int64)
    np.cumsum(np.bincount(csc_src, minlength=adjacency.num_src), out=csr_indptr[1:])
    csr_edge = csr_edge[_shuffle_segments(csr_indptr, rng)]
    dtype = adjacency.index_dtype
    arrays = (adjacency.csc_indptr, csc_src, csr_indptr, dst_of(adjacency)[csr_edge], csr_edge)
    return Adjacency(adjacency.num_src, adjacency.num_dst, *(np.array(a, dtype) for a in arrays))


def dst_of(adjacency):
    return np.repeat(np.arange(adjacency.num_dst), np.diff(adjacency.csc_indptr))


# ---- program inputs ----


def program_inputs(program, adjacency, rng, dtype=np.float64, features=(3,), weight="vector"):
    """Random (x_src, x_dst, edge_data) for a program; unused ones are None.

    weight picks the edge_data shape of src_mul_edge: "scalar" [E], "vector"
    [E, *features], or "head" [E, features[0]] (one weight per head).
    """
    spec = PROGRAMS[program]
    num_src, num_dst, num_edges = adjacency.num_src, adjacency.num_dst, adjacency.num_edges
    slots = {0: (), 2: (2,), None: (NUM_TYPES,)}[spec.src_slots]
    x_src = rng.uniform(-2, 2, (num_src,) + slots + tuple(features)).astype(dtype)
    x_dst = rng.uniform(-2, 2, (num_dst,) + tuple(features)).astype(dtype) if spec.uses_dst else None
    edge_data = None
    if spec.uses_weight:
        shape = {"scalar": (), "vector": tuple(features), "head": tuple(features[:1])}[weight]
        edge_data = rng.uniform(-2, 2, (num_edges,) + shape).astype(dtype)
    elif spec.uses_type:
        edge_data = rng.integers(0, NUM_TYPES, num_edges).astype(np.int32)
    return x_src, x_dst, edge_data


_ACTIVATIONS = {
    "gate_sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "gate_tanh": np.tanh,
    "gate_relu": lambda z: np.maximum(z, 0),
}


def oracle_messages(program, adjacency, x_src, x_dst, edge_data):
    """Per-edge messages [E, *features], by edge id."""
    src, dst = adjacency.csc_src, dst_of(adjacency)
    s = x_src[src]
    if program == "copy_src":
        return s
    if program == "type_select":
        return x_src[src, edge_data]
    if program == "src_mul_edge":
        w = edge_data.reshape(edge_data.shape + (1,) * (s.ndim - edge_data.ndim))
        return s * w
    t = x_dst[dst]
    if program == "src_add_dst":
        return s + t
    if program == "src_sub_dst":
        return s - t
    if program == "src_mul_dst":
        return s * t
    return _ACTIVATIONS[program](s[:, 0] + t) * s[:, 1]


def oracle_reduce(messages, adjacency, reduce, init=None):
    """Reduces [E, ...] messages by destination in stored order; an empty one gives 0.

    With init (any shape holding [num_dst, ...] in order), each destination
    starts from its row of init, and an empty one gives init's row.
    """
    indptr = adjacency.csc_indptr
    shape = (adjacency.num_dst,) + messages.shape[1:]
    out = np.zeros(shape, messages.dtype) if init is None else np.array(init, messages.dtype).reshape(shape)
    combine = {"sum": np.add, "max": np.maximum, "min": np.minimum}.get(reduce)
    for v in range(adjacency.num_dst):
        rows = messages[indptr[v]:indptr[v + 1]]
        if len(rows):
            value = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[reduce](rows, axis=0)
            out[v] = value if init is None else combine(out[v], value)
    return out


def oracle_fused_gather(program, reduce, adjacency, x_src, x_dst=None, edge_data=None, init=None):
    return oracle_reduce(oracle_messages(program, adjacency, x_src, x_dst, edge_data), adjacency, reduce, init)


# ---- gradient-friendly inputs ----


def separated_inputs(program, reduce, adjacency, seed, gap=0.02, **kwargs):
    """program_inputs (float64) whose messages are >= gap apart within every
    destination and feature (for max/min), with every gate pre-activation at
    least gap away from 0 (the relu kink): finite differences then see no ties.
    """
    for attempt in range(200):
        rng = np.random.default_rng(seed * 1000 + attempt)
        inputs = program_inputs(program, adjacency, rng, np.float64, **kwargs)
        if _separated(program, reduce, adjacency, inputs, gap):
            return inputs
    raise AssertionError("no well-separated inputs found")


def _separated(program, reduce, adjacency, inputs, gap):
    x_src, x_dst, _ = inputs
    if program in _ACTIVATIONS and adjacency.num_edges:
        z = x_src[adjacency.csc_src][:, 0] + x_dst[dst_of(adjacency)]
        if np.min(np.abs(z)) < gap:
            return False
    if reduce not in ("max", "min"):
        return True
    messages = oracle_messages(program, adjacency, *inputs).reshape(adjacency.num_edges, -1)
    # Parallel edges that carry the very same message (same source; same type
    # for type_select) tie harmlessly: they share every input they depend on.
    key = {"src_mul_edge": np.arange(adjacency.num_edges),
           "type_select": adjacency.csc_src * NUM_TYPES + (inputs[2] if program == "type_select" else 0)
           }.get(program, adjacency.csc_src)
    keys = np.repeat(key[:, None], messages.shape[1], axis=1)
    if program == "gate_relu":  # an edge whose relu is off sends exactly 0, and no gradient
        z = x_src[adjacency.csc_src][:, 0] + x_dst[dst_of(adjacency)]
        keys = np.where(z.reshape(keys.shape) < 0, -1, keys)
    indptr = adjacency.csc_indptr
    for v, f in np.ndindex(adjacency.num_dst, messages.shape[1]):
        segment = slice(indptr[v], indptr[v + 1])
        _, first = np.unique(keys[segment, f], return_index=True)
        if len(first) > 1 and np.min(np.diff(np.sort(messages[segment, f][first]))) < gap:
            return False
    return True


def reference_fused_gather(program, reduce, adjacency, x_src, x_dst=None, edge_data=None, init=None):
    """ngra_tf.ops.reference.fused_gather on tensors, normalising shapes like the public API."""
    spec = PROGRAMS[program]
    lead = 1 if spec.src_slots == 0 else 2
    features = x_src.shape[lead:]
    width = int(np.prod(features))
    x = tf.reshape(x_src, [-1] + list(x_src.shape[1:lead]) + [width])
    t = None if x_dst is None else tf.reshape(x_dst, [-1, width])
    weight = types = None
    if spec.uses_weight:
        weight = tf.reshape(edge_data, [adjacency.num_edges, -1])
    elif spec.uses_type:
        types = edge_data
    init = None if init is None else tf.reshape(init, [adjacency.num_dst, width])
    out = ngra_tf.ops.reference.fused_gather(adjacency.csc_src, dst_of(adjacency), adjacency.num_dst, x, t,
                                             weight, types, program, reduce, init)
    return tf.reshape(out, [adjacency.num_dst] + list(features))


def float_args(program, x_src, x_dst, edge_data):
    """The differentiable inputs of a program, as a list, and a function
    rebuilding the fused_gather keyword arguments from them."""
    spec = PROGRAMS[program]
    names = ["x_src"] + (["x_dst"] if spec.uses_dst else []) + (["edge_data"] if spec.uses_weight else [])
    values = {"x_src": x_src, "x_dst": x_dst, "edge_data": edge_data}
    fixed = {"edge_data": edge_data} if spec.uses_type else {}

    def rebuild(*args):
        kwargs = dict(fixed)
        kwargs.update(zip(names, args))
        return kwargs

    return [values[n] for n in names], rebuild


# ---- gradient checks ----


def assert_gradients_match_numerical(f, args):
    theoretical, numerical = tf.test.compute_gradient(f, args)
    for t, n in zip(theoretical, numerical):
        assert np.any(t != 0), "a gradient that is zero everywhere tests nothing"
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


def tape_gradients(f, args, upstream):
    """Gradients of sum(f(*args) * upstream) w.r.t. every arg, as numpy arrays."""
    args = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(args)
        loss = tf.reduce_sum(f(*args) * upstream)
    return [g.numpy() for g in tape.gradient(loss, args)]
