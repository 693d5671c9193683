"""The recipes' graph preparation as a stream: symmetrise, drop duplicates and self loops, add self loops.

`recipes.prepare_graph("gcn", g)` is, in memory,

    g.symmetrize().remove_self_loops().add_self_loops()  then  edge data = gcn_norm()

and for commnet, mpgcn, ggcn and gat the same graph without edge data.
`SymmetrizedEdges` produces the same edges, user order and data from a
stream of g's edges, without holding them:

- symmetrize lists g's edges, then their reverses (sequence positions k and
  E + k), and keeps the first occurrence of every (src, dst) pair. All copies
  of a pair land in the same hash bucket, so one pass writes both directions
  of every non-loop edge into buckets on disk and each bucket is
  deduplicated alone, in memory. (Self loops are dropped at once: removing
  them after deduplication leaves the same edges in the same order.)
- The kept edges' user order is their sequence order: a bitmap over the 2E
  sequence positions with a count of the members before each 64-bit word
  gives each kept edge its rank. It is the one O(E) structure: E/2 bytes,
  1/32 of the edges as int64 pairs.
- add_self_loops appends v -> v for v = 0..V-1 after the K kept edges.
- gcn_norm needs only the in-degrees (O(V)), counted while deduplicating.
"""

from __future__ import annotations

import os

import numpy as np

from ngra_tf.store.sources import EdgeBlock, EdgeSource, Scan, Work

PREPARATIONS = ("gcn", "symmetric", "none")
_RECORD = np.dtype([("src", "<i8"), ("dst", "<i8"), ("seq", "<i8")])
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)
_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads consecutive keys


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per uint64 word."""
    return _POPCOUNT[np.ascontiguousarray(words).view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.int64)


class RankBitmap:
    """A set of positions in [0, size), then the rank of a member: how many members precede it."""

    _BLOCK_WORDS = 1 << 16

    def __init__(self, size: int):
        self.words = np.zeros((size + 63) // 64, np.uint64)
        self.before = None
        self.count = 0

    def add(self, positions: np.ndarray) -> None:
        positions = np.asarray(positions, np.int64)
        np.bitwise_or.at(self.words, positions >> 6, np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)))

    def freeze(self) -> None:
        """Counts the members before every word; add() is done."""
        before = np.empty(len(self.words), np.int64)
        total = 0
        for start in range(0, len(self.words), self._BLOCK_WORDS):
            counts = _popcount(self.words[start:start + self._BLOCK_WORDS])
            before[start:start + len(counts)] = np.cumsum(counts) - counts + total
            total += int(counts.sum())
        self.before, self.count = before, total

    def rank(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, np.int64)
        word = positions >> 6
        below = np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)) - np.uint64(1)
        return self.before[word] + _popcount(self.words[word] & below)


def _inverse_sqrt(degree: np.ndarray) -> np.ndarray:
    """1/sqrt(degree), 0 where degree is 0: Graph.gcn_norm's factors, computed the same way."""
    degree = degree.astype(np.float64)
    return np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)


class SymmetrizedEdges(EdgeSource):
    """recipes.prepare_graph's graph for gcn (with GCN weights) or the other symmetric models (without)."""

    def __init__(self, base: EdgeSource, preparation: str):
        if preparation not in ("gcn", "symmetric"):
            raise ValueError(f"preparation must be gcn or symmetric, got {preparation!r}")
        self.base, self.preparation = base, preparation
        self.num_vertices = base.num_vertices
        self.description = {"kind": f"prepared for {preparation}: symmetrised, deduplicated, self loops",
                            "input": base.description}
        self._buckets = None

    def scan(self, work: Work) -> Scan:
        base = self.base.scan(work)
        n, edges = base.num_vertices, base.num_edges
        self.num_vertices = n
        count = max(1, -(-2 * edges * _RECORD.itemsize * 4 // work.bucket_bytes))  # sort needs ~4x the records
        self._buckets = [os.path.join(work.scratch, f"symmetric-{b:05d}.bin") for b in range(count)]
        for path in self._buckets:
            open(path, "wb").close()
        done = 0
        for block in self.base.blocks(work.block_edges):
            keep = block.src != block.dst
            src, dst, seq = block.src[keep], block.dst[keep], block.ids[keep]
            records = np.empty(2 * len(src), _RECORD)
            records["src"] = np.concatenate([src, dst])
            records["dst"] = np.concatenate([dst, src])
            records["seq"] = np.concatenate([seq, seq + edges])
            key = records["src"].astype(np.uint64) * np.uint64(max(n, 1)) + records["dst"].astype(np.uint64)
            bucket = ((key * _HASH) >> np.uint64(32)) % np.uint64(count)
            order = np.argsort(bucket, kind="stable")
            records, bucket = records[order], bucket[order]
            starts = np.searchsorted(bucket, np.arange(count + 1, dtype=np.uint64))
            for b in np.flatnonzero(np.diff(starts)):
                with open(self._buckets[b], "ab") as stream:
                    stream.write(records[starts[b]:starts[b + 1]].data)
            done += len(block.src)
            work.report("symmetrise edges", done, edges)
        kept = RankBitmap(2 * edges)
        in_degree, out_degree = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for b, path in enumerate(self._buckets):
            records = np.fromfile(path, _RECORD)
            # Each (src, dst) pair keeps its first sequence position.
            pair = records["src"] * max(n, 1) + records["dst"]
            order = np.argsort(pair)
            pair = pair[order]
            starts = np.flatnonzero(np.concatenate([[True], pair[1:] != pair[:-1]])) if len(pair) else order
            first = np.minimum.reduceat(records["seq"][order], starts) if len(pair) else starts
            records = records[order[starts]]
            records["seq"] = first
            kept.add(records["seq"])
            in_degree += np.bincount(records["dst"], minlength=n)
            out_degree += np.bincount(records["src"], minlength=n)
            records.tofile(path)
            work.report("deduplicate edges", b + 1, len(self._buckets))
        kept.freeze()
        self._kept = kept
        # In- and out-degrees of the prepared graph: the kept edges plus one self loop per vertex.
        self._weights = _inverse_sqrt(in_degree + 1) if self.preparation == "gcn" else None
        spec = ((), np.dtype(np.float32)) if self.preparation == "gcn" else None
        return Scan(n, kept.count + n, in_degree + out_degree + 2, spec)

    def _data(self, src, dst):
        if self._weights is None:
            return None
        return (self._weights[src] * self._weights[dst]).astype(np.float32)

    def blocks(self, block_edges: int):
        assert self._buckets is not None, "scan first"
        for path in self._buckets:
            with open(path, "rb") as stream:
                while True:
                    records = np.frombuffer(stream.read(block_edges * _RECORD.itemsize), _RECORD)
                    if not len(records):
                        break
                    src, dst = records["src"].copy(), records["dst"].copy()
                    yield EdgeBlock(src, dst, self._kept.rank(records["seq"]), self._data(src, dst))
        for start in range(0, max(self.num_vertices, 1), block_edges):
            loops = np.arange(start, min(start + block_edges, self.num_vertices), dtype=np.int64)
            yield EdgeBlock(loops, loops, self._kept.count + loops, self._data(loops, loops))
