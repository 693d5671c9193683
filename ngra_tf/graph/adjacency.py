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

import numpy as np
import tensorflow as tf

_INT32_MAX = np.iinfo(np.int32).max

AdjacencyTensors = collections.namedtuple(
    "AdjacencyTensors", ["csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge"]
)


def _indptr(ids: np.ndarray, num_segments: int, dtype) -> np.ndarray:
    counts = np.bincount(ids, minlength=num_segments) if ids.size else np.zeros(num_segments, np.int64)
    indptr = np.zeros(num_segments + 1, dtype=dtype)
    np.cumsum(counts, out=indptr[1:])
    return indptr



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
        big = max(len(src), num_src, num_dst) > _INT32_MAX
        dtype = np.int64 if big else np.int32
        order = np.lexsort((src, dst)) if len(src) else np.zeros(0, np.int64)
        csc_src = np.ascontiguousarray(src[order], dtype=dtype)
        csc_dst = np.asarray(dst[order], dtype=dtype)
        # Stable: within one source, edges stay in edge-id order.
        csr_edge = np.argsort(csc_src, kind="stable").astype(dtype)
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
        return adjacency, order

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
