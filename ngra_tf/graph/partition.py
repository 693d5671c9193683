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

from typing import TYPE_CHECKING

from ngra_tf.graph.adjacency import Adjacency, LoadedAdjacency, cached_tensor

if TYPE_CHECKING:  # Graph.partition builds a Partition: the import goes one way
    from ngra_tf.graph.graph import Graph


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
        return cached_tensor(self, "_edge_data_tensor", self.edge_data)

    def edge_ids_tensor(self):
        """edge_ids (int64, the chunk's CSC order) as a TF tensor, made once (eagerly)."""
        return cached_tensor(self, "_edge_ids_tensor", self.edge_ids.astype(np.int64, copy=False))

    def __repr__(self):
        return f"Chunk({self.src_part}, {self.dst_part}, num_edges={self.num_edges})"


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedChunk:
    """A chunk as a compiled loop holds it in one iteration: its arrays as tensors (LoadedAdjacency), its edge
    data (a tensor, in its CSC order, or None) and how to read its edge ids (`ids()`: only layers that draw per
    edge read them, so a source reads them when asked, in the iteration that asks)."""

    adjacency: LoadedAdjacency
    edge_data: object = None
    ids: object = None  # () -> int64 tensor [num_edges]

    def edge_data_tensor(self):
        return self.edge_data

    def edge_ids_tensor(self):
        return self.ids()


def chunk_from_edges(src_part: int, dst_part: int, local_src: np.ndarray, local_dst: np.ndarray, num_src: int,
                     num_dst: int, edge_ids: np.ndarray, edge_data: np.ndarray | None) -> Chunk:
    """The chunk of edges local_src[k] -> local_dst[k] (ids within the two intervals).

    Edges with the same (src, dst) pair must come in the user's order, which
    their CSC order then keeps; edge_ids[k] is edge k's user position and
    edge_data[k] its data. A Partition and a store converter both build
    their chunks here.
    """
    # Adjacency.from_coo, with every gather done before the CSR order is sorted: memory peaks lower.
    order = Adjacency.csc_order(local_src, local_dst, num_src, num_dst)
    dtype = Adjacency.index_dtype_for(len(local_src), num_src, num_dst)
    csc_src, csc_dst = local_src[order].astype(dtype, copy=False), local_dst[order].astype(dtype, copy=False)
    edge_data = None if edge_data is None else edge_data[order]
    edge_ids = edge_ids[order].astype(np.int64, copy=False)  # (a converter's buckets hold narrower ids)
    del order
    adjacency = Adjacency.from_csc(csc_src, csc_dst, num_src, num_dst)
    for array in (edge_ids, edge_data):
        if array is not None:
            array.flags.writeable = False
    return Chunk(src_part, dst_part, adjacency, edge_ids, edge_data)


def _equal_bounds(num_vertices: int, num_parts: int) -> np.ndarray:
    return np.array([num_vertices * i // num_parts for i in range(num_parts + 1)], dtype=np.int64)


def count_chunk_edges(part_of: np.ndarray, src: np.ndarray, dst: np.ndarray, num_parts: int) -> np.ndarray:
    """[P, P] edge counts of the chunks that `part_of` (the interval of each vertex) gives edges src -> dst.

    Counts of disjoint edge sets add up, so a stream of edge blocks can be
    counted block by block.
    """
    cells = part_of[src].astype(np.int64) * num_parts + part_of[dst]
    return np.bincount(cells, minlength=num_parts * num_parts).reshape(num_parts, num_parts)


def _imbalance(counts: np.ndarray) -> float:
    """Max over mean edges per chunk (1.0 is perfect; an edgeless graph is balanced)."""
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else 1.0


def _degree_snake_parts(degree: np.ndarray, num_parts: int) -> np.ndarray:
    """Interval of each vertex: deal vertices by falling degree to 0..P-1, P-1..0, ...

    Each interval then gets the same share of high-, mid- and low-degree
    vertices (and the same size, up to one), so its total in- and out-degree
    are close to 1/P of the edges, and so are the chunk counts unless edges
    are strongly clustered.
    """
    num_vertices = len(degree)
    by_degree = np.argsort(-degree.astype(np.int64), kind="stable")
    lap, step = np.divmod(np.arange(num_vertices), num_parts)
    part = np.empty(num_vertices, np.int64)
    part[by_degree] = np.where(lap % 2 == 0, step, num_parts - 1 - step)
    return part


def candidate_intervals(degree: np.ndarray, num_parts: int, reencode: bool = True) -> list:
    """The interval assignments a partition chooses between (each: the interval of every vertex).

    degree[v] is the in- plus out-degree of vertex v. The first is the
    identity (P equal runs of ids); with reencode, the degree snake follows.
    """
    num_parts = _check_num_parts(num_parts)
    identity = np.repeat(np.arange(num_parts), np.diff(_equal_bounds(len(degree), num_parts)))
    return [identity, _degree_snake_parts(degree, num_parts)] if reencode else [identity]


@dataclasses.dataclass(frozen=True, eq=False)
class IntervalAssignment:
    """Which interval each vertex joins, and the new ids that follow from it."""

    part_of: np.ndarray  # [V]: the interval of each original id
    order: np.ndarray  # [V]: new id -> original id (intervals in turn, original order within each)
    position: np.ndarray  # [V]: original id -> new id
    bounds: np.ndarray  # [P + 1]: interval p holds new ids bounds[p] .. bounds[p+1]-1
    edge_counts: np.ndarray  # [P, P]: edges per chunk
    imbalance_before: float  # of the identity intervals
    imbalance_after: float  # of the chosen ones


def choose_intervals(candidates: list, counts: list) -> IntervalAssignment:
    """The identity (candidates[0]) unless a later candidate balances the chunks strictly better.

    counts[k] are candidate k's [P, P] chunk edge counts. Re-encoding is a
    best effort that is never worse than not re-encoding.
    """
    num_parts = counts[0].shape[0]
    before = _imbalance(counts[0])
    best = 0
    for k in range(1, len(candidates)):
        if _imbalance(counts[k]) < _imbalance(counts[best]):
            best = k
    part_of, edge_counts = candidates[best], counts[best]
    n = len(part_of)
    # New ids: interval by interval, original relative order within each.
    order = np.lexsort((np.arange(n), part_of))
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(part_of, minlength=num_parts))]).astype(np.int64)
    for array in (part_of, order, position, bounds, edge_counts):
        array.flags.writeable = False
    return IntervalAssignment(part_of, order, position, bounds, edge_counts, before, _imbalance(edge_counts))


def assign_intervals(degree: np.ndarray, num_parts: int, reencode: bool, count_chunks) -> IntervalAssignment:
    """The intervals of a graph with per-vertex degree (in + out) cut into num_parts.

    count_chunks(candidates) returns the [P, P] chunk edge counts of each
    candidate assignment: Partition counts its graph's edges in memory, a
    converter counts a stream of edges (all candidates in one pass).
    """
    candidates = candidate_intervals(degree, num_parts, reencode)
    return choose_intervals(candidates, count_chunks(candidates))


def _check_num_parts(num_parts) -> int:
    if int(num_parts) != num_parts or num_parts < 1:
        raise ValueError(f"num_parts must be a positive integer, got {num_parts!r}")
    return int(num_parts)


class Partition:
    """A graph cut into num_parts vertex intervals and num_parts^2 edge chunks."""

    def __init__(self, graph: Graph, num_parts: int, reencode: bool = True):
        num_parts = _check_num_parts(num_parts)
        self.graph = graph
        self.num_parts = num_parts
        src, dst = graph.adjacency.src, graph.adjacency.dst
        assignment = assign_intervals(graph.in_degree() + graph.out_degree(), num_parts, reencode,
                                      lambda candidates: [count_chunk_edges(part, src, dst, num_parts)
                                                          for part in candidates])
        part_of = assignment.part_of
        self.order = assignment.order  # new id -> original id
        self.position = assignment.position  # original id -> new id
        self.bounds = assignment.bounds
        self.edge_counts = assignment.edge_counts
        self.imbalance_before = assignment.imbalance_before
        self.imbalance_after = assignment.imbalance_after
        n = graph.num_vertices
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
                row.append(chunk_from_edges(i, j, local[src[edges]], local[dst[edges]], sizes[i], sizes[j],
                                            g.edge_order[edges], None if stored_data is None else stored_data[edges]))
            chunks.append(row)
        return chunks

    def chunk(self, src_part: int, dst_part: int) -> Chunk:
        return self._chunks[src_part][dst_part]

    def in_degree(self, src_part: int, dst_part: int) -> np.ndarray:
        """In-degree of interval dst_part's vertices within chunk (src_part, dst_part)."""
        return self.chunk(src_part, dst_part).adjacency.in_degree()

    @property
    def chunks(self):
        """The chunks as a P x P nested list, [src_part][dst_part]."""
        return self._chunks

    def vertices(self, part: int) -> np.ndarray:
        """The original ids of interval `part`, in local-id order."""
        return self.order[self.bounds[part]:self.bounds[part + 1]]

    def order_tensor(self):
        """order as a cached int tensor: gathers user-ordered rows into interval order."""
        return cached_tensor(self, "_order", self.order)

    def position_tensor(self):
        """position as a cached int tensor: gathers interval-ordered rows back into user order."""
        return cached_tensor(self, "_position", self.position)

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
