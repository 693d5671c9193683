"""2-D partitioning (NGra §3.1): P vertex intervals, P x P edge chunks.

Vertices are re-encoded (renumbered) so that the P x P chunks hold similar
edge counts, then cut into P equal intervals of consecutive new ids. Chunk
C[i][j] holds the edges from interval i to interval j, with local ids, as an
Adjacency of its own; its per-edge data is in its own CSC order, and
`edge_ids` relates its edges to the user's edge order. Vertex data moves
between the user's ids and interval order with `split` and `merge`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ngra_tf.graph.adjacency import Adjacency
from ngra_tf.graph.graph import Graph, _cached_tensor


@dataclasses.dataclass(frozen=True, eq=False)
class Chunk:
    """The edges from vertex interval `src_part` to interval `dst_part`."""

    src_part: int
    dst_part: int
    adjacency: Adjacency  # local ids: 0..len(interval)-1 on each side
    edge_ids: np.ndarray  # [num_edges]: each chunk edge's position in the user's order (graph.src, ...)
    edge_data: np.ndarray | None  # the graph's edge data for these edges, in the chunk's (CSC) order

    @property
    def num_edges(self) -> int:
        return self.adjacency.num_edges

    def edge_data_tensor(self):
        """edge_data (the chunk's CSC order) as a TF tensor, made once (eagerly), or None."""
        return _cached_tensor(self, "_edge_data_tensor", self.edge_data)

    def __repr__(self):
        return f"Chunk({self.src_part}, {self.dst_part}, num_edges={self.num_edges})"


def _equal_bounds(num_vertices: int, num_parts: int) -> np.ndarray:
    return np.array([num_vertices * i // num_parts for i in range(num_parts + 1)], dtype=np.int64)


def _chunk_counts(part_of: np.ndarray, graph: Graph, num_parts: int) -> np.ndarray:
    cells = part_of[graph.adjacency.src].astype(np.int64) * num_parts + part_of[graph.adjacency.dst]
    return np.bincount(cells, minlength=num_parts * num_parts).reshape(num_parts, num_parts)


def _imbalance(counts: np.ndarray) -> float:
    """Max over mean edges per chunk (1.0 is perfect; an edgeless graph is balanced)."""
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else 1.0


def _degree_snake_parts(graph: Graph, num_parts: int) -> np.ndarray:
    """Interval of each vertex: deal vertices by falling degree to 0..P-1, P-1..0, ...

    Each interval then gets the same share of high-, mid- and low-degree
    vertices (and the same size, up to one), so its total in- and out-degree
    are close to 1/P of the edges, and so are the chunk counts unless edges
    are strongly clustered.
    """
    degree = (graph.in_degree() + graph.out_degree()).astype(np.int64)
    by_degree = np.argsort(-degree, kind="stable")
    lap, step = np.divmod(np.arange(graph.num_vertices), num_parts)
    part = np.empty(graph.num_vertices, np.int64)
    part[by_degree] = np.where(lap % 2 == 0, step, num_parts - 1 - step)
    return part


class Partition:
    """A graph cut into num_parts vertex intervals and num_parts^2 edge chunks."""

    def __init__(self, graph: Graph, num_parts: int, reencode: bool = True):
        if int(num_parts) != num_parts or num_parts < 1:
            raise ValueError(f"num_parts must be a positive integer, got {num_parts!r}")
        num_parts = int(num_parts)
        self.graph = graph
        self.num_parts = num_parts
        n = graph.num_vertices
        identity_part = np.repeat(np.arange(num_parts), np.diff(_equal_bounds(n, num_parts)))
        identity_counts = _chunk_counts(identity_part, graph, num_parts)
        self.imbalance_before = _imbalance(identity_counts)
        part_of, counts = identity_part, identity_counts
        if reencode:
            dealt = _degree_snake_parts(graph, num_parts)
            dealt_counts = _chunk_counts(dealt, graph, num_parts)
            if _imbalance(dealt_counts) < self.imbalance_before:  # best effort: never worse
                part_of, counts = dealt, dealt_counts
        # New ids: interval by interval, original relative order within each.
        self.order = np.lexsort((np.arange(n), part_of))  # new id -> original id
        self.position = np.empty(n, np.int64)  # original id -> new id
        self.position[self.order] = np.arange(n)
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(part_of, minlength=num_parts))])
        self.edge_counts = counts
        self.imbalance_after = _imbalance(counts)
        for array in (self.order, self.position, self.bounds, self.edge_counts):
            array.flags.writeable = False
        self.identity_order = bool(np.array_equal(self.order, np.arange(n)))
        self._chunks = self._build_chunks(part_of)

    def _build_chunks(self, part_of: np.ndarray):
        g = self.graph
        src, dst, stored_data = g.adjacency.src, g.adjacency.dst, g.stored_edge_data
        P = self.num_parts
        if P == 1 and self.identity_order:  # the graph itself: share its arrays
            return [[Chunk(0, 0, g.adjacency, g.edge_order, stored_data)]]
        local = self.position - self.bounds[part_of]  # original id -> id within its interval
        cell = part_of[src] * P + part_of[dst]
        by_cell = np.argsort(cell, kind="stable")
        starts = np.searchsorted(cell[by_cell], np.arange(P * P + 1))
        sizes = np.diff(self.bounds)
        chunks = []
        for i in range(P):
            row = []
            for j in range(P):
                edges = by_cell[starts[i * P + j]:starts[i * P + j + 1]]  # stored positions
                adjacency, order = Adjacency.from_coo(local[src[edges]], local[dst[edges]], sizes[i], sizes[j])
                stored = edges[order]
                edge_ids = g.edge_order[stored]
                data = None if stored_data is None else stored_data[stored]
                for array in (edge_ids, data):
                    if array is not None:
                        array.flags.writeable = False
                row.append(Chunk(i, j, adjacency, edge_ids, data))
            chunks.append(row)
        return chunks

    def chunk(self, src_part: int, dst_part: int) -> Chunk:
        return self._chunks[src_part][dst_part]

    @property
    def chunks(self):
        """The chunks as a P x P nested list, [src_part][dst_part]."""
        return self._chunks

    def vertices(self, part: int) -> np.ndarray:
        """The original ids of interval `part`, in local-id order."""
        return self.order[self.bounds[part]:self.bounds[part + 1]]

    def order_tensor(self):
        """order as a cached int tensor: gathers user-ordered rows into interval order."""
        return _cached_tensor(self, "_order", self.order)

    def position_tensor(self):
        """position as a cached int tensor: gathers interval-ordered rows back into user order."""
        return _cached_tensor(self, "_position", self.position)

    def split(self, x):
        """Vertex rows in original order -> a list of per-interval row blocks."""
        return [x[self.vertices(i)] for i in range(self.num_parts)]

    def merge(self, blocks) -> np.ndarray:
        """Per-interval row blocks -> vertex rows in original order."""
        stacked = np.concatenate([np.asarray(b) for b in blocks]) if blocks else np.zeros((0,))
        return stacked[self.position]

    def balance(self) -> dict:
        """Max over mean edges per chunk, before and after re-encoding."""
        return {"before": self.imbalance_before, "after": self.imbalance_after}

    def __repr__(self):
        return (f"Partition(num_parts={self.num_parts}, num_vertices={self.graph.num_vertices}, "
                f"imbalance {self.imbalance_before:.2f} -> {self.imbalance_after:.2f})")
