"""Adjacency: the index arrays the propagation ops walk.

Edges go from `num_src` source vertices to `num_dst` destination vertices (a
whole graph is the square case, a chunk of a partition the rectangular one).
Edge ids are CSC positions: edges are stored sorted by destination, then by
source, so forward kernels stream them in order. The CSR view groups the same
edges by source for the backward pass and maps each of its positions back to
an edge id (`csr_edge`). A Graph relates these ids to the order in which the
user gave the edges (Graph.edge_order).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os

import numpy as np
import tensorflow as tf

_INT32_MAX = np.iinfo(np.int32).max
_PARALLEL_EDGES = 1 << 22  # edges per slab of a sort (below this, one thread: a pool costs more than it saves)
_MAX_SLABS = 255  # (a slab number is a uint8)

AdjacencyTensors = collections.namedtuple(
    "AdjacencyTensors", ["csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge"]
)


def _indptr(ids: np.ndarray, num_segments: int, dtype) -> np.ndarray:
    counts = np.bincount(ids, minlength=num_segments) if ids.size else np.zeros(num_segments, np.int64)
    indptr = np.zeros(num_segments + 1, dtype=dtype)
    np.cumsum(counts, out=indptr[1:])
    return indptr


def _unsigned(values: np.ndarray) -> np.ndarray:
    """Non-negative ints as the unsigned type of their size (uint64 arithmetic with them then stays uint64)."""
    return values.view(np.dtype(f"u{values.dtype.itemsize}")) if values.dtype.kind == "i" else values


def _sorted_positions(major: np.ndarray, num_major: int, minor: np.ndarray | None = None,
                      num_minor: int = 1) -> np.ndarray:
    """np.lexsort((minor, major)) (or a stable argsort of major): positions by (major, minor), ties in order.

    Sorts uint64 numbers packing (major, minor, position) instead of arg-sorting:
    numpy sorts numbers several times faster, and the position that breaks
    ties keeps the order stable. The major values are split into slabs small
    enough to pack, and into several once there are many edges: each slab is
    one segment of the result, sorted in place on one of two threads, so
    the working memory beyond the result is a slab's.
    """
    count, num_major, num_minor = len(major), int(num_major), int(num_minor)  # (Python ints: no overflow)
    position_bits = max(1, (count - 1).bit_length())
    per_slab = (1 << (64 - position_bits)) // max(num_minor, 1)  # major values a slab's numbers can hold
    needed = -(-num_major // per_slab) if per_slab else _MAX_SLABS + 1
    if needed > _MAX_SLABS:  # (ranges far beyond 2^64 between them: not seen in practice)
        return np.lexsort((minor, major)) if minor is not None else np.argsort(major, kind="stable")
    slabs = min(max(needed, -(-count // _PARALLEL_EDGES), 1), _MAX_SLABS)
    width = max(1, -(-num_major // slabs))
    slab_of = (major // width).astype(np.uint8) if count else np.zeros(0, np.uint8)
    starts = np.zeros(slabs + 1, np.int64)
    np.cumsum(np.bincount(slab_of, minlength=slabs), out=starts[1:])
    order = np.empty(count, np.int64)

    def sort_slab(slab):
        positions = np.flatnonzero(slab_of == slab)
        numbers = order[starts[slab]:starts[slab + 1]].view(np.uint64)
        np.subtract(major[positions], slab * width, out=numbers, casting="unsafe")
        if minor is not None:
            numbers *= np.uint64(num_minor)
            numbers += _unsigned(minor[positions])
        numbers <<= np.uint64(position_bits)
        numbers |= positions.view(np.uint64)
        numbers.sort()
        numbers &= np.uint64((1 << position_bits) - 1)

    if slabs == 1:
        sort_slab(0)
    else:
        with concurrent.futures.ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:
            list(pool.map(sort_slab, range(slabs)))
    return order


def cached_tensor(owner, attribute: str, array):
    """array as a tensor made outside any tf.function, cached on owner."""
    if array is None:
        return None
    tensor = owner.__dict__.get(attribute)
    if tensor is None:
        with tf.init_scope(), tf.device("/cpu:0"):
            tensor = tf.constant(array)
        object.__setattr__(owner, attribute, tensor)
    return tensor

class Adjacency:
    """Immutable CSC + CSR index arrays of a set of edges."""

    __slots__ = ("num_src", "num_dst", "csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge",
                 "_tensors", "_dst", "_plan")

    def __init__(self, num_src, num_dst, csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge):
        self.num_src = int(num_src)
        self.num_dst = int(num_dst)
        self.csc_indptr = csc_indptr
        self.csc_src = csc_src
        self.csr_indptr = csr_indptr
        self.csr_dst = csr_dst
        self.csr_edge = csr_edge
        for array in (csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge):
            array.flags.writeable = False
        self._tensors = None
        self._dst = None
        self._plan = None

    @classmethod
    def from_coo(cls, src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int):
        """Builds the adjacency of validated edges src[i] -> dst[i].

        Returns (adjacency, order): stored edge k is input edge order[k].
        """
        order = cls.csc_order(src, dst, num_src, num_dst)
        dtype = cls.index_dtype_for(len(src), num_src, num_dst)
        return cls.from_csc(src[order].astype(dtype), dst[order].astype(dtype), num_src, num_dst), order

    @staticmethod
    def index_dtype_for(num_edges: int, num_src: int, num_dst: int):
        return np.int64 if max(num_edges, num_src, num_dst) > _INT32_MAX else np.int32

    @staticmethod
    def csc_order(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> np.ndarray:
        """The order of edges src[i] -> dst[i] in CSC: by destination, then source, ties in input order."""
        return _sorted_positions(dst, num_dst, src, num_src)

    @classmethod
    def from_csc(cls, csc_src: np.ndarray, csc_dst: np.ndarray, num_src: int, num_dst: int):
        """The adjacency of edges already in CSC order (csc_order), as index_dtype_for's arrays."""
        dtype = csc_src.dtype
        # Stable: within one source, edges stay in edge-id order.
        csr_edge = _sorted_positions(csc_src, num_src).astype(dtype, copy=False)
        adjacency = cls(
            num_src,
            num_dst,
            _indptr(csc_dst, num_dst, dtype),
            csc_src,
            _indptr(csc_src, num_src, dtype),
            np.ascontiguousarray(csc_dst[csr_edge]),
            csr_edge,
        )
        adjacency._dst = csc_dst
        adjacency._dst.flags.writeable = False
        return adjacency

    @property
    def num_edges(self) -> int:
        return int(self.csc_src.shape[0])

    @property
    def index_dtype(self):
        return self.csc_src.dtype

    @property
    def src(self) -> np.ndarray:
        """Source vertex of each edge, by edge id."""
        return self.csc_src

    @property
    def dst(self) -> np.ndarray:
        """Destination vertex of each edge, by edge id."""
        if self._dst is None:
            dst = np.repeat(np.arange(self.num_dst, dtype=self.index_dtype), np.diff(self.csc_indptr))
            dst.flags.writeable = False
            self._dst = dst
        return self._dst

    def in_degree(self) -> np.ndarray:
        return np.diff(self.csc_indptr)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.csr_indptr)

    def tensors(self) -> AdjacencyTensors:
        """The index arrays as TF tensors, made once (eagerly, on the host).

        Made outside any tf.function being traced, so traced graphs capture
        them by reference instead of embedding them as constants.
        """
        if self._tensors is None:
            with tf.init_scope(), tf.device("/cpu:0"):
                self._tensors = AdjacencyTensors(
                    *(tf.constant(a) for a in (self.csc_indptr, self.csc_src, self.csr_indptr,
                                               self.csr_dst, self.csr_edge))
                )
        return self._tensors

    def plan(self, prepare):
        """prepare(self.tensors()) (NgraPrepareGraph's plan, ngra_tf.ops.propagation.graph_plan), made once,
        eagerly, where the ops would place it: the fused ops then skip checking these arrays (and on a GPU
        reuse the walks' schedules) rather than doing it again on every call."""
        if self._plan is None:
            with tf.init_scope():
                self._plan = prepare(self.tensors())
        return self._plan

    def __repr__(self):
        return f"Adjacency(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


class LoadedAdjacency:
    """An adjacency whose index arrays are tensors, sized only when they run.

    What a compiled loop holds of a chunk it loaded (sliced from a packed
    partition or read from a store) in one iteration: the same five arrays
    as Adjacency.tensors(), with the vertex and edge counts unknown while
    the loop is traced. The propagation ops take it wherever they take an
    Adjacency.
    """

    __slots__ = ("_tensors", "_plan")
    num_src = num_dst = num_edges = None  # known only at run time

    def __init__(self, tensors: AdjacencyTensors, plan=None):
        self._tensors = AdjacencyTensors(*tensors)
        self._plan = plan

    def plan(self, prepare):
        """The plan its loader made with the arrays (see Adjacency.plan), or None: a loop does not prepare
        a chunk per op call, which is what the plan saves."""
        del prepare
        return self._plan

    @property
    def index_dtype(self):
        return self._tensors.csc_src.dtype

    def tensors(self) -> AdjacencyTensors:
        return self._tensors

    @property
    def src(self):
        """Source vertex of each edge, by edge id (a tensor)."""
        return self._tensors.csc_src

    @property
    def dst(self):
        """Destination vertex of each edge, by edge id (a tensor)."""
        indptr = self._tensors.csc_indptr
        return tf.repeat(tf.range(tf.size(indptr, out_type=indptr.dtype) - 1, dtype=indptr.dtype),
                         indptr[1:] - indptr[:-1])

    def num_dst_tensor(self):
        return tf.size(self._tensors.csc_indptr, out_type=self.index_dtype) - 1

    def __repr__(self):
        return f"LoadedAdjacency({', '.join(f'{k}={v.shape}' for k, v in self._tensors._asdict().items())})"
