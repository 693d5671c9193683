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
  deduplicated alone, in memory (two at a time, one per core). (Self loops
  are dropped at once: removing them after deduplication leaves the same
  edges in the same order.) A record is one uint64: the pair's hash (a
  bijection of src and dst, whose top bits name the bucket and are not
  stored) above its sequence position, so sorting the numbers puts each
  pair's copies together, first occurrence first. (A graph too large for 64
  bits uses (hash, position) records, sorted as pairs.) The input is read
  once: a source whose sizes are known up front (a synthetic preset, a
  Graph) is validated in this same pass rather than scanned first.
- The kept edges' user order is their sequence order: a bitmap over the 2E
  sequence positions with a count of the members before each 64-bit word
  gives each kept edge its rank. It is the one O(E) structure: E/2 bytes,
  1/32 of the edges as int64 pairs.
- add_self_loops appends v -> v for v = 0..V-1 after the K kept edges.
- gcn_norm needs only the in-degrees (O(V)), counted while deduplicating
  (the kept edges are symmetric: in-degree = out-degree).
"""

from __future__ import annotations

import numpy as np

from ngra_tf.store.sources import Buckets, EdgeBlock, EdgeSource, Scan, Work, check_ids

PREPARATIONS = ("gcn", "symmetric", "none")
_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << 16)], np.uint8)
_HASH = 0x9E3779B97F4A7C15  # Fibonacci hashing: odd, so multiplying by it mod 2^k is a bijection
_PACKED_BITS = 64  # a record is one uint64 when the hash's stored bits and the position fit
_MAX_BUCKETS = 1 << 16


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per uint64 word."""
    halves = _POPCOUNT[np.ascontiguousarray(words).view(np.uint16)]
    return halves.reshape(-1, 4).sum(axis=1, dtype=np.int64)


class RankBitmap:
    """A set of positions in [0, size), then the rank of a member: how many members precede it."""

    _BLOCK_WORDS = 1 << 16

    def __init__(self, size: int):
        self.words = np.zeros((size + 63) // 64, np.uint64)
        self.before = None
        self.count = 0

    def add(self, positions: np.ndarray) -> None:
        """Adds positions not added before (each bit is set once, so adding it is or-ing it: add.at is fast)."""
        positions = np.asarray(positions, np.int64)
        np.add.at(self.words, positions >> 6, np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)))

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


def _bits(count: int) -> int:
    """Bits that hold the numbers 0 .. count-1."""
    return max(1, (max(count, 1) - 1).bit_length())


class _PairRecords:
    """Symmetrisation records: a (src, dst) pair's hash, split into a bucket and the stored rest, and the
    pair's sequence position; packed into one uint64 where it fits."""

    def __init__(self, num_vertices: int, num_sequence: int, min_buckets: int):
        self.vertex_bits = _bits(num_vertices)
        self.key_bits = 2 * self.vertex_bits
        self.seq_bits = _bits(num_sequence)
        needed = self.key_bits + self.seq_bits - _PACKED_BITS  # hash bits the bucket must carry
        self.bucket_bits = min(max(needed, _bits(min_buckets), 0), self.key_bits, _MAX_BUCKETS.bit_length() - 1)
        self.stored_bits = self.key_bits - self.bucket_bits
        self.packed = self.stored_bits + self.seq_bits <= _PACKED_BITS
        self.dtype = np.dtype(np.uint64) if self.packed else np.dtype([("key", "<u8"), ("seq", "<u8")])
        self.num_buckets = 1 << self.bucket_bits
        self._mask = np.uint64((1 << self.key_bits) - 1)
        self._inverse = np.uint64(pow(_HASH, -1, 1 << self.key_bits))

    def encode(self, src: np.ndarray, dst: np.ndarray, seq: np.ndarray):
        """(records, bucket of each)."""
        key = (src.astype(np.uint64) << np.uint64(self.vertex_bits)) | dst.astype(np.uint64)
        key *= np.uint64(_HASH)  # (wraps mod 2^64; the mask takes it mod 2^key_bits)
        key &= self._mask
        bucket = (key >> np.uint64(self.stored_bits)).astype(np.int64)
        key &= np.uint64((1 << self.stored_bits) - 1)
        if self.packed:
            key <<= np.uint64(self.seq_bits)
            key |= seq.astype(np.uint64)
            return key, bucket
        records = np.empty(len(key), self.dtype)
        records["key"], records["seq"] = key, seq
        return records, bucket

    def sort(self, records: np.ndarray) -> np.ndarray:
        """Sorted by (pair, sequence position), in place where packed."""
        if self.packed:
            records.sort()
            return records
        return records[np.lexsort((records["seq"], records["key"]))]

    def stored_key(self, records: np.ndarray) -> np.ndarray:
        return records >> np.uint64(self.seq_bits) if self.packed else records["key"]

    def seq(self, records: np.ndarray) -> np.ndarray:
        if self.packed:
            return (records & np.uint64((1 << self.seq_bits) - 1)).astype(np.int64)
        return records["seq"].astype(np.int64)

    def pairs(self, bucket: int, records: np.ndarray):
        """(src, dst) int64 of bucket `bucket`'s records."""
        key = self._keys(bucket, records)
        return (key >> np.uint64(self.vertex_bits)).astype(np.int64), self._dst(key)

    def destinations(self, bucket: int, records: np.ndarray) -> np.ndarray:
        return self._dst(self._keys(bucket, records))

    def _keys(self, bucket: int, records: np.ndarray) -> np.ndarray:
        key = self.stored_key(records) | np.uint64(bucket << self.stored_bits)
        key *= self._inverse
        key &= self._mask
        return key

    def _dst(self, key: np.ndarray) -> np.ndarray:
        return (key & np.uint64((1 << self.vertex_bits) - 1)).astype(np.int64)


def _inverse_sqrt(degree: np.ndarray) -> np.ndarray:
    """1/sqrt(degree), 0 where degree is 0: Graph.gcn_norm's factors, computed the same way."""
    degree = degree.astype(np.float64)
    return np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)


class _DegreeCounter:
    """Adds up bincounts of vertex ids arriving in small pieces, one bincount per V ids (each costs O(V))."""

    def __init__(self, num_vertices: int):
        self.counts = np.zeros(num_vertices, np.int64)
        self._pending, self._size = [], 0

    def add(self, ids: np.ndarray) -> None:
        self._pending.append(ids)
        self._size += len(ids)
        if self._size >= len(self.counts):
            self.flush()

    def flush(self) -> np.ndarray:
        if self._pending:
            self.counts += np.bincount(np.concatenate(self._pending), minlength=len(self.counts))
            self._pending, self._size = [], 0
        return self.counts


class SymmetrizedEdges(EdgeSource):
    """recipes.prepare_graph's graph for gcn (with GCN weights) or the other symmetric models (without)."""

    def __init__(self, base: EdgeSource, preparation: str):
        if preparation not in ("gcn", "symmetric"):
            raise ValueError(f"preparation must be gcn or symmetric, got {preparation!r}")
        self.base, self.preparation = base, preparation
        self.num_vertices = base.num_vertices
        self.description = {"kind": f"prepared for {preparation}: symmetrised, deduplicated, self loops",
                            "input": base.description}
        self._buckets = self._records = self._work = None
        self._written = 0  # records in the buckets
        self._kept = self._weights = None

    unique_pairs = True  # deduplicated: no two edges share a (src, dst) pair

    def scan_scratch_nbytes(self) -> int:
        known = self.base.known_sizes()
        if known is None:
            count, n = getattr(self.base, "num_edges", None), self.base.num_vertices
            if count is None or n is None:
                return self.base.scan_scratch_nbytes()
            known = n, count
        n, edges = known
        return self.base.scan_scratch_nbytes() + 2 * edges * _PairRecords(n, 2 * edges, 1).dtype.itemsize

    def scan(self, work: Work) -> Scan:
        self._work = work
        known = self.base.known_sizes()  # else a scan validates the ids (and spools a file) first
        scanned = self.base.scan(work) if known is None else None
        n, edges = known or (scanned.num_vertices, scanned.num_edges)
        self.num_vertices = n
        # A bucket being deduplicated takes about 6 x its records' bytes (the records, the copies kept, their
        # positions and vertex ids), and `workers` are at it at once.
        self._records = _PairRecords(n, 2 * edges, -(-2 * edges * 8 * 6 * work.workers // work.bucket_bytes))
        self._buckets = Buckets(work.scratch, "symmetric", self._records.num_buckets)
        self._write_both_directions(n, edges, check=scanned is None)
        in_degree = self._deduplicate(n, edges)
        # In- and out-degrees of the prepared graph: the kept edges (symmetric) plus one self loop per vertex.
        self._weights = _inverse_sqrt(in_degree + 1) if self.preparation == "gcn" else None
        spec = ((), np.dtype(np.float32)) if self.preparation == "gcn" else None
        return Scan(n, self._kept.count + n, 2 * in_degree + 2, spec)

    def _write_both_directions(self, n: int, edges: int, check: bool) -> None:
        work, records = self._work, self._records

        def encode(block):
            if check:
                check_ids(block, n)
            keep = block.src != block.dst
            src, dst, seq = block.src[keep], block.dst[keep], block.ids[keep]
            packed, bucket = records.encode(np.concatenate([src, dst]), np.concatenate([dst, src]),
                                            np.concatenate([seq, seq + edges]))
            return self._buckets.group(packed, bucket), len(block.src)

        done = 0
        self._written = 0
        try:
            for grouped, count in work.map(encode, self.base.blocks(work.block_edges)):
                self._buckets.write(grouped)
                done += count
                self._written += len(grouped[0])
                work.report("symmetrise edges", done, edges)
        finally:
            self._buckets.close()
        if done != edges:
            raise ValueError(f"{self.base.description}: gave {done} edges, expected {edges}")

    def _deduplicate(self, n: int, edges: int) -> np.ndarray:
        """Keeps each pair's first copy in its bucket's file; returns the in-degrees of the kept edges."""
        records = self._records

        def first_copies(b):
            kept = records.sort(self._buckets.read(b, records.dtype))
            key = records.stored_key(kept)
            first = np.ones(len(kept), bool)
            np.not_equal(key[1:], key[:-1], out=first[1:])
            kept = kept[first]
            kept.tofile(self._buckets.paths[b])
            return records.seq(kept), records.destinations(b, kept), len(first)

        self._kept = RankBitmap(2 * edges)
        in_degree = _DegreeCounter(n)
        done = 0
        for seq, dst, count in self._work.map(first_copies, range(records.num_buckets)):
            self._kept.add(seq)
            in_degree.add(dst)
            done += count
            self._work.report("deduplicate edges", done, self._written)
        self._kept.freeze()
        return in_degree.flush()

    def _data(self, src, dst):
        if self._weights is None:
            return None
        return (self._weights[src] * self._weights[dst]).astype(np.float32)

    def _stored_pieces(self, block_edges: int):
        """(bucket, records) of the deduplicated buckets, block_edges at a time, in bucket order."""
        assert self._buckets is not None, "scan first"
        records = self._records
        for b, path in enumerate(self._buckets.paths):
            with open(path, "rb") as stream:
                while True:
                    piece = np.frombuffer(stream.read(block_edges * records.dtype.itemsize), records.dtype)
                    if not len(piece):
                        break
                    yield b, piece

    def _loops(self, block_edges: int):
        for start in range(0, max(self.num_vertices, 1), block_edges):
            yield np.arange(start, min(start + block_edges, self.num_vertices), dtype=np.int64)

    def blocks(self, block_edges: int):
        def decode(item):
            b, piece = item
            src, dst = self._records.pairs(b, piece)
            return EdgeBlock(src, dst, self._kept.rank(self._records.seq(piece)), self._data(src, dst))

        yield from self._work.map(decode, self._stored_pieces(block_edges))
        for loops in self._loops(block_edges):
            yield EdgeBlock(loops, loops, self._kept.count + loops, self._data(loops, loops))

    def endpoints(self, block_edges: int):
        yield from self._work.map(lambda item: self._records.pairs(*item), self._stored_pieces(block_edges))
        for loops in self._loops(block_edges):
            yield loops, loops

    def release(self) -> None:
        """Removes the scratch buckets (and the input's spooled copy): after the last pass."""
        if self._buckets is not None:
            self._buckets.remove_all()
        self._kept = None  # (the rank bitmap: E/2 bytes)
        self.base.release()
