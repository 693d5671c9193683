"""Graph: an immutable directed graph with optional per-edge data.

Two edge orders exist:

- the *user's order*, in which the edges were given to `from_edges`. Every
  per-edge array of the public API uses it: `src`, `dst`, `edge_data`,
  `with_edge_data`, `gcn_norm`, and the edge tensors that
  `ngra_tf.ops.scatter` returns and `gather` consumes (as in DGL and PyG).
- the *stored order*, CSC (by destination, then source, then the user's
  order), which is internal: it is the order of `adjacency`, of
  `stored_edge_data`, of the kernels' walks, and of partitions and the
  compiler, so models never permute per-edge data.

`edge_order[k]` is the user's position of stored edge k. The user-order
arrays are made from it on first access and cached, so a graph whose edges
are only used by models holds one copy of them.
"""

from __future__ import annotations

import collections

import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from ngra_tf.graph.adjacency import Adjacency, cached_tensor

# Edge ids that make the kernels read and write per-edge tensors in the
# user's order: the user's position of every CSC and every CSR position.
UserEdgeIds = collections.namedtuple("UserEdgeIds", ["csc", "csr"])


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
    """A directed graph over vertices 0..num_vertices-1. Build with from_edges.

    Attributes:
      adjacency: the CSC and CSR index arrays; its edge ids are stored positions.
      stored_edge_data: edge_data in stored (CSC) order, the order of
        graph.adjacency and the kernels, or None.
      edge_order: edge_order[k] is the user's position of stored edge k.
    """

    def __init__(self, adjacency: Adjacency, stored_edge_data: np.ndarray | None, edge_order: np.ndarray):
        if adjacency.num_src != adjacency.num_dst:
            raise ValueError("a Graph's adjacency must be square")
        self.adjacency = adjacency
        self.stored_edge_data = stored_edge_data
        self.edge_order = edge_order
        for array in (stored_edge_data, edge_order):
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

        The order of the input edges (a matrix's: that of its COO form, row
        by row for CSR) is the graph's user order: src, dst and edge_data
        give them back as they came.
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
        """Source vertex of each edge, in the user's order."""
        return self._cached_user_order("_src", self.adjacency.src)

    @property
    def dst(self) -> np.ndarray:
        """Destination vertex of each edge, in the user's order."""
        return self._cached_user_order("_dst", self.adjacency.dst)

    @property
    def edge_data(self) -> np.ndarray | None:
        """Per-edge data in the user's order, or None."""
        return self._cached_user_order("_edge_data", self.stored_edge_data)

    def edge_data_tensor(self):
        """stored_edge_data (stored, CSC order) as a TF tensor, made once (eagerly), or None."""
        return cached_tensor(self, "_edge_data_tensor", self.stored_edge_data)

    def user_edge_ids(self) -> UserEdgeIds | None:
        """Edge ids that make the kernels use the user's order, or None if it is the stored order.

        csc[k] is the user's position of CSC position k (edge_order), csr[k]
        that of CSR position k. Tensors in the adjacency's index dtype, made
        once, eagerly and on the host, like Adjacency.tensors().
        """
        if self._stored_is_user_order():
            return None
        ids = self.__dict__.get("_user_edge_ids")
        if ids is None:
            dtype = self.adjacency.index_dtype
            csc = self.edge_order.astype(dtype)
            with tf.init_scope(), tf.device("/cpu:0"):
                ids = UserEdgeIds(tf.constant(csc), tf.constant(csc[self.adjacency.csr_edge]))
            self._user_edge_ids = ids
        return ids

    def _stored_is_user_order(self) -> bool:
        """Whether the edges were given in CSC order already (then no array needs permuting)."""
        same = self.__dict__.get("_identity_order")
        if same is None:
            same = self._identity_order = bool(np.array_equal(self.edge_order, np.arange(self.num_edges)))
        return same

    def _user_order(self, stored: np.ndarray | None) -> np.ndarray | None:
        """A per-edge array in stored order, rearranged into the user's order.

        Returns `stored` itself when the orders agree: callers must not write to it.
        """
        if stored is None or self._stored_is_user_order():
            return stored
        array = np.empty_like(stored)
        array[self.edge_order] = stored
        return array

    def _cached_user_order(self, attribute: str, stored: np.ndarray | None) -> np.ndarray | None:
        if attribute not in self.__dict__:
            array = self._user_order(stored)
            if array is not None:
                array.flags.writeable = False
            self.__dict__[attribute] = array
        return self.__dict__[attribute]

    def in_degree(self) -> np.ndarray:
        return self.adjacency.in_degree()

    def out_degree(self) -> np.ndarray:
        return self.adjacency.out_degree()

    def to_scipy(self) -> sp.csr_matrix:
        """The adjacency matrix, entry (u, v) for edge u -> v (edge_data if scalar, else 1)."""
        data = self.stored_edge_data
        if data is None or data.ndim != 1:
            data = np.ones(self.num_edges, np.float32)
        n = self.num_vertices
        return sp.csr_matrix((data, (self.adjacency.src, self.adjacency.dst)), shape=(n, n))

    # ---- transformations (each returns a new Graph) ----
    #
    # They work on uncached user-order copies, so that transforming a graph
    # does not leave its user-order arrays cached on it.

    def _user_edges(self):
        """(src, dst, edge_data) in the user's order, not cached."""
        return (self._user_order(self.adjacency.src), self._user_order(self.adjacency.dst),
                self._user_order(self.stored_edge_data))

    def _with_edges(self, src, dst, edge_data) -> "Graph":
        return Graph.from_edges(src, dst, self.num_vertices, edge_data)

    def _subset(self, keep: np.ndarray) -> "Graph":
        """The edges where keep (a mask in the user's order) is set, in their order."""
        src, dst, data = self._user_edges()
        return self._with_edges(src[keep], dst[keep], None if data is None else data[keep])

    def add_self_loops(self, fill_value=1.0) -> "Graph":
        """Adds the edge v -> v for every vertex (existing loops are kept).

        The loops come after the existing edges, for vertices 0, 1, ...; they
        get edge data `fill_value` (broadcast to the data's shape).
        """
        src, dst, data = self._user_edges()
        loops = np.arange(self.num_vertices)
        if data is not None:
            fill = np.full((self.num_vertices,) + data.shape[1:], fill_value, data.dtype)
            data = np.concatenate([data, fill])
        return self._with_edges(np.concatenate([src, loops]), np.concatenate([dst, loops]), data)

    def remove_self_loops(self) -> "Graph":
        """The edges u -> v with u != v, in their order."""
        return self._subset(self._user_order(self.adjacency.src != self.adjacency.dst))

    def remove_duplicates(self) -> "Graph":
        """Keeps one edge per (src, dst) pair: the first in the user's order.

        The edges kept stay in their order.
        """
        if self.num_edges == 0:
            return self
        src, dst = self.adjacency.src, self.adjacency.dst
        # Stored order groups equal pairs, each group in the user's order, so
        # the first of a group is the pair's first occurrence.
        first = np.ones(self.num_edges, bool)
        first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        return self._subset(self._user_order(first))

    def symmetrize(self) -> "Graph":
        """Adds the reverse of every edge, then removes duplicate pairs.

        Before removing duplicates the edges are the graph's, then their
        reverses, so a pair keeps the data of its first edge if there is one,
        else that of the first edge in the opposite direction.
        """
        src, dst, data = self._user_edges()
        data = None if data is None else np.concatenate([data, data])
        both = self._with_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), data)
        return both.remove_duplicates()

    def with_edge_data(self, edge_data) -> "Graph":
        """The same edges with new per-edge data, given in the user's order."""
        return Graph(self.adjacency, _edge_data(edge_data, self.num_edges, self.edge_order), self.edge_order)

    def gcn_norm(self, dtype=np.float32) -> np.ndarray:
        """Per-edge GCN weights 1/sqrt(d(src) * d(dst)), d = in-degree, in the user's order.

        This is D^-1/2 A D^-1/2 of Kipf & Welling when the graph is symmetric
        and has self loops (add them first); a vertex of degree 0 gets 0.
        """
        degree = self.in_degree().astype(np.float64)
        inv_sqrt = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
        return self._user_order((inv_sqrt[self.adjacency.src] * inv_sqrt[self.adjacency.dst]).astype(dtype))

    def partition(self, num_parts: int, reencode: bool = True):
        """Splits the graph into num_parts vertex intervals and P x P edge chunks."""
        from ngra_tf.graph.partition import Partition  # Partition builds on Graph.

        cache = self.__dict__.setdefault("_partitions", {})  # a graph is immutable: so are its partitions
        key = (num_parts, bool(reencode))
        if key not in cache:
            cache[key] = Partition(self, num_parts, reencode=reencode)
        return cache[key]

    def __repr__(self):
        stored = self.stored_edge_data
        data = "" if stored is None else f", edge_data={stored.dtype}{list(stored.shape)}"
        return f"Graph(num_vertices={self.num_vertices}, num_edges={self.num_edges}{data})"


def _edge_data(edge_data, num_edges: int, order: np.ndarray | None) -> np.ndarray | None:
    if edge_data is None:
        return None
    data = np.asarray(edge_data)
    if data.ndim == 0 or data.shape[0] != num_edges:
        raise ValueError(f"edge_data must have one row per edge ({num_edges}), got shape {data.shape}")
    # Always a copy: the graph freezes it, and must neither freeze nor alias the caller's array.
    return np.array(data, order="C") if order is None else np.ascontiguousarray(data[order])
