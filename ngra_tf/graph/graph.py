"""Graph: an immutable directed graph with optional per-edge data.

Edges are stored in CSC order (by destination, then source), which is the
order every per-edge array of the graph uses: `src`, `dst`, `edge_data`, and
the edge tensors that `ngra_tf.ops.scatter` returns or `gather` consumes.
`edge_order[k]` is the position in the caller's input of stored edge k.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from ngra_tf.graph.adjacency import Adjacency


def _ids(name: str, values, num_vertices: int | None) -> np.ndarray:
    """Validated int64 ids; num_vertices=None checks everything but the upper bound."""
    ids = np.asarray(values)
    if ids.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of vertex ids, got shape {ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        if not np.issubdtype(ids.dtype, np.floating) or not np.all(np.equal(np.mod(ids, 1), 0)):
            raise ValueError(f"{name} must hold integer vertex ids, got dtype {ids.dtype}")
        ids = ids.astype(np.int64)
    ids = ids.astype(np.int64, copy=False)
    if ids.size:
        low, high = int(ids.min()), int(ids.max())
        if low < 0:
            raise ValueError(f"{name} holds a negative vertex id ({low} at position {int(np.argmin(ids))})")
        if num_vertices is not None and high >= num_vertices:
            raise ValueError(f"{name} holds vertex id {high} (at position {int(np.argmax(ids))}), "
                             f"out of range for num_vertices={num_vertices}")
    return ids


class Graph:
    """A directed graph over vertices 0..num_vertices-1. Build with from_edges."""

    def __init__(self, adjacency: Adjacency, edge_data: np.ndarray | None, edge_order: np.ndarray):
        if adjacency.num_src != adjacency.num_dst:
            raise ValueError("a Graph's adjacency must be square")
        self.adjacency = adjacency
        self.edge_data = edge_data
        self.edge_order = edge_order
        for array in (edge_data, edge_order):
            if array is not None:
                array.flags.writeable = False

    # ---- construction ----

    @classmethod
    def from_edges(cls, src, dst=None, num_vertices=None, edge_data=None) -> "Graph":
        """Builds a graph from edges src[i] -> dst[i].

        Args:
          src: source ids (numpy-convertible), or a scipy sparse matrix whose
            entry (u, v) is the edge u -> v (its values become edge_data
            unless edge_data is given; dst must then be None).
          dst: destination ids, as long as src.
          num_vertices: the vertex count; defaults to the matrix size, or
            1 + the largest id.
          edge_data: optional per-edge data, shaped [num_edges, ...], in the
            same order as the input edges.
        """
        if sp.issparse(src):
            if dst is not None:
                raise ValueError("dst must be None when src is a scipy sparse matrix")
            matrix = sp.coo_matrix(src)
            if matrix.shape[0] != matrix.shape[1]:
                raise ValueError(f"the adjacency matrix must be square, got shape {matrix.shape}")
            if num_vertices is not None and num_vertices != matrix.shape[0]:
                raise ValueError(f"num_vertices={num_vertices} disagrees with the matrix shape {matrix.shape}")
            num_vertices = matrix.shape[0]
            src, dst = matrix.row, matrix.col
            if edge_data is None:
                edge_data = matrix.data
        if dst is None:
            raise ValueError("dst is required unless src is a scipy sparse matrix")
        if num_vertices is None:
            # Validate first, so bad ids are reported as such, not as a bad num_vertices.
            src, dst = _ids("src", src, None), _ids("dst", dst, None)
            num_vertices = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
        if int(num_vertices) != num_vertices or num_vertices < 0:
            raise ValueError(f"num_vertices must be a non-negative integer, got {num_vertices!r}")
        num_vertices = int(num_vertices)
        src = _ids("src", src, num_vertices)
        dst = _ids("dst", dst, num_vertices)
        if src.shape != dst.shape:
            raise ValueError(f"src and dst must have the same length, got {src.shape[0]} and {dst.shape[0]}")
        adjacency, order = Adjacency.from_coo(src, dst, num_vertices, num_vertices)
        return cls(adjacency, _edge_data(edge_data, len(src), order), order)

    # ---- views ----

    @property
    def num_vertices(self) -> int:
        return self.adjacency.num_dst

    @property
    def num_edges(self) -> int:
        return self.adjacency.num_edges

    @property
    def src(self) -> np.ndarray:
        return self.adjacency.src

    @property
    def dst(self) -> np.ndarray:
        return self.adjacency.dst

    def edge_data_tensor(self):
        """edge_data as a TF tensor, made once (eagerly), or None."""
        return _cached_tensor(self, "_edge_data_tensor", self.edge_data)

    def in_degree(self) -> np.ndarray:
        return self.adjacency.in_degree()

    def out_degree(self) -> np.ndarray:
        return self.adjacency.out_degree()

    def to_scipy(self) -> sp.csr_matrix:
        """The adjacency matrix, entry (u, v) for edge u -> v (edge_data if scalar, else 1)."""
        data = self.edge_data if self.edge_data is not None and self.edge_data.ndim == 1 else None
        if data is None:
            data = np.ones(self.num_edges, np.float32)
        n = self.num_vertices
        return sp.csr_matrix((data, (self.src, self.dst)), shape=(n, n))

    # ---- transformations (each returns a new Graph) ----

    def _with_edges(self, src, dst, edge_data) -> "Graph":
        return Graph.from_edges(src, dst, self.num_vertices, edge_data)

    def add_self_loops(self, fill_value=1.0) -> "Graph":
        """Adds the edge v -> v for every vertex (existing loops are kept).

        New loops get edge data `fill_value` (broadcast to the data's shape).
        """
        loops = np.arange(self.num_vertices)
        data = None
        if self.edge_data is not None:
            fill = np.full((self.num_vertices,) + self.edge_data.shape[1:], fill_value, self.edge_data.dtype)
            data = np.concatenate([self.edge_data, fill])
        return self._with_edges(np.concatenate([self.src, loops]), np.concatenate([self.dst, loops]), data)

    def remove_self_loops(self) -> "Graph":
        keep = self.src != self.dst
        return self._with_edges(self.src[keep], self.dst[keep],
                                None if self.edge_data is None else self.edge_data[keep])

    def remove_duplicates(self) -> "Graph":
        """Keeps one edge per (src, dst) pair: the first one in stored order."""
        if self.num_edges == 0:
            return self
        pairs = self.src.astype(np.int64) * max(self.num_vertices, 1) + self.dst
        # Stored order is sorted by (dst, src), so duplicates are adjacent.
        keep = np.ones(self.num_edges, bool)
        keep[1:] = pairs[1:] != pairs[:-1]
        return self._with_edges(self.src[keep], self.dst[keep],
                                None if self.edge_data is None else self.edge_data[keep])

    def symmetrize(self) -> "Graph":
        """Adds the reverse of every edge, then removes duplicate pairs."""
        data = None if self.edge_data is None else np.concatenate([self.edge_data, self.edge_data])
        both = self._with_edges(np.concatenate([self.src, self.dst]), np.concatenate([self.dst, self.src]), data)
        return both.remove_duplicates()

    def with_edge_data(self, edge_data) -> "Graph":
        """The same edges with new per-edge data, given in stored (CSC) order."""
        return Graph(self.adjacency, _edge_data(edge_data, self.num_edges, None), self.edge_order)

    def gcn_norm(self, dtype=np.float32) -> np.ndarray:
        """Per-edge GCN weights 1/sqrt(d(src) * d(dst)), d = in-degree.

        This is D^-1/2 A D^-1/2 of Kipf & Welling when the graph is symmetric
        and has self loops (add them first); a vertex of degree 0 gets 0.
        """
        degree = self.in_degree().astype(np.float64)
        inv_sqrt = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
        return (inv_sqrt[self.src] * inv_sqrt[self.dst]).astype(dtype)

    def partition(self, num_parts: int, reencode: bool = True):
        """Splits the graph into num_parts vertex intervals and P x P edge chunks."""
        from ngra_tf.graph.partition import Partition  # Partition builds on Graph.

        cache = self.__dict__.setdefault("_partitions", {})  # a graph is immutable: so are its partitions
        key = (num_parts, bool(reencode))
        if key not in cache:
            cache[key] = Partition(self, num_parts, reencode=reencode)
        return cache[key]

    def __repr__(self):
        data = "" if self.edge_data is None else f", edge_data={self.edge_data.dtype}{list(self.edge_data.shape)}"
        return f"Graph(num_vertices={self.num_vertices}, num_edges={self.num_edges}{data})"


def _cached_tensor(owner, attribute: str, array):
    """array as a tensor made outside any tf.function, cached on owner."""
    if array is None:
        return None
    tensor = owner.__dict__.get(attribute)
    if tensor is None:
        with tf.init_scope(), tf.device("/cpu:0"):
            tensor = tf.constant(array)
        object.__setattr__(owner, attribute, tensor)
    return tensor


def _edge_data(edge_data, num_edges: int, order: np.ndarray | None) -> np.ndarray | None:
    if edge_data is None:
        return None
    data = np.asarray(edge_data)
    if data.ndim == 0 or data.shape[0] != num_edges:
        raise ValueError(f"edge_data must have one row per edge ({num_edges}), got shape {data.shape}")
    # Always a copy: the graph freezes it, and must neither freeze nor alias the caller's array.
    return np.array(data, order="C") if order is None else np.ascontiguousarray(data[order])
