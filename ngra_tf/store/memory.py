"""Memory sizes and the per-step working-set estimate that picks the chunk count P.

A step of a chunked layer (NGra §3, NeuGraph §3) holds one chunk's index
arrays and edge data, the source rows that chunk reads and the destination
rows it reduces into. With double buffering the next chunk's source rows are
read while the current ones are used, so the estimate counts

    largest chunk + 2 x largest interval (source rows) + 1 x largest interval (destination rows)

and `smallest_num_parts` is the smallest P for which that fits a budget. The
converter (tools/partition_graph.py) uses it to pick P; a runtime can reuse
the same functions for its own plan.
"""

from __future__ import annotations

import math
import re

import numpy as np


# SI prefixes are powers of 1000, IEC prefixes (KiB, MiB, ...) powers of 1024;
# a bare letter (256M, 2G) is binary, as in most command-line tools.
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")

# Source and destination interval blocks resident during one chunk step.
SOURCE_BUFFERS = 2
DESTINATION_BUFFERS = 1


def parse_size(text) -> int:
    """Bytes in a size such as 256MB (10^6), 1.5GiB (2^30), 512M (2^20), 4096 or an int."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"a memory size must be positive, got {text}")
        return int(text)
    match = _SIZE.match(str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a memory size: write a number with an optional unit, "
                         f"such as 256MB, 1.5GiB, 512M or 1000000")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"a memory size must be positive, got {text!r}")
    return size


def index_itemsize(num_edges: int, num_src: int, num_dst: int) -> int:
    """Bytes per index of a chunk's arrays: int32 unless a count exceeds it (as Adjacency.from_coo decides)."""
    return 8 if max(num_edges, num_src, num_dst) > np.iinfo(np.int32).max else 4


def chunk_nbytes(num_edges: int, num_src: int, num_dst: int, edge_row_nbytes: int = 0) -> int:
    """Bytes of one chunk as stored and loaded: its CSC and CSR arrays, edge ids and edge data.

    CSC: indptr [num_dst + 1] and src [E]; CSR: indptr [num_src + 1], dst
    and edge [E]; edge_ids int64 [E]; edge data edge_row_nbytes per edge.
    """
    index = index_itemsize(num_edges, num_src, num_dst)
    return index * (num_dst + 1 + num_src + 1 + 3 * num_edges) + 8 * num_edges + edge_row_nbytes * num_edges


def step_nbytes(largest_chunk_nbytes: int, largest_interval_rows: int, row_nbytes: int) -> int:
    """The per-step working set: a chunk plus its resident source and destination interval rows."""
    return largest_chunk_nbytes + (SOURCE_BUFFERS + DESTINATION_BUFFERS) * largest_interval_rows * row_nbytes


def largest_chunk_nbytes(edge_counts: np.ndarray, bounds: np.ndarray, edge_row_nbytes: int = 0) -> int:
    """chunk_nbytes of the biggest chunk of a partition (edge counts [P, P], interval bounds [P + 1])."""
    sizes = np.diff(np.asarray(bounds))
    counts = np.asarray(edge_counts)
    return max(chunk_nbytes(int(counts[i, j]), int(sizes[i]), int(sizes[j]), edge_row_nbytes)
               for i in range(len(sizes)) for j in range(len(sizes)))


def partition_step_nbytes(edge_counts: np.ndarray, bounds: np.ndarray, row_nbytes: int,
                          edge_row_nbytes: int = 0) -> int:
    """step_nbytes of an actual partition (its largest chunk and largest interval)."""
    sizes = np.diff(np.asarray(bounds))
    rows = int(sizes.max()) if sizes.size else 0
    return step_nbytes(largest_chunk_nbytes(edge_counts, bounds, edge_row_nbytes), rows, row_nbytes)


def lower_bound_step_nbytes(num_parts: int, num_vertices: int, num_edges: int, row_nbytes: int,
                            edge_row_nbytes: int = 0) -> int:
    """A working set no partition into num_parts can beat: an average chunk, the largest interval.

    Intervals differ by at most one vertex, so the largest holds
    ceil(V / P); the largest chunk holds at least the mean, E / P^2.
    """
    rows = math.ceil(num_vertices / num_parts)
    edges = math.ceil(num_edges / (num_parts * num_parts))
    return step_nbytes(chunk_nbytes(edges, rows, rows, edge_row_nbytes), rows, row_nbytes)


def smallest_num_parts(budget: int, num_vertices: int, num_edges: int, row_nbytes: int, step_nbytes_at,
                       edge_row_nbytes: int = 0, max_parts: int = 1024, batch: int = 4,
                       max_batches: int = 4) -> tuple[int, int]:
    """The smallest P whose working set step_nbytes_at(P) fits `budget`: (P, its working set).

    step_nbytes_at(candidates) returns the exact working sets of a list of
    P values (a converter counts their chunks in one pass over the edges);
    it is asked only about P whose lower bound fits, `batch` at a time, up
    to max_parts and for at most max_batches batches (the exact working set
    is rarely far above the bound). Raises ValueError naming the smallest working set seen
    when none fits.
    """
    budget = parse_size(budget)
    most = max(1, min(num_vertices, max_parts))
    p = 1
    while p < most and lower_bound_step_nbytes(p, num_vertices, num_edges, row_nbytes, edge_row_nbytes) > budget:
        p += 1
    smallest = None
    for _ in range(max_batches):
        if p > most:
            break
        candidates = list(range(p, min(most, p + batch - 1) + 1))
        for candidate, need in zip(candidates, step_nbytes_at(candidates)):
            if need <= budget:
                return candidate, need
            if smallest is None or need < smallest[1]:
                smallest = (candidate, need)
        p = candidates[-1] + 1
    raise ValueError(f"memory budget {format_bytes(budget)} ({budget} bytes) is too small: a step holds a chunk "
                     f"and {SOURCE_BUFFERS + DESTINATION_BUFFERS} intervals of vertex rows, and the smallest "
                     f"such working set for P <= {p - 1} is {format_bytes(smallest[1])} ({smallest[1]} bytes, "
                     f"at P={smallest[0]})")


def format_bytes(count: int) -> str:
    """A byte count for people: 12.3 MiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"
