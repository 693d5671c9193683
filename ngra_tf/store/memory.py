"""Memory sizes, a chunk's bytes, and the search for the chunk count P that a memory budget allows.

What one training step holds is the trainer's to say: `GraphModel.memory_plan`
(ngra_tf.runtime.plan.budget) sums a model's largest step, what stays resident
and the runtime. A converter asks that same estimate about the partitions it
weighs (`smallest_num_parts`), so that the P it writes is the one the trainer
accepts under the same budget.
"""

from __future__ import annotations

import re

import numpy as np


# SI prefixes are powers of 1000, IEC prefixes (KiB, MiB, ...) powers of 1024;
# a bare letter (256M, 2G) is binary, as in most command-line tools.
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


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


def largest_chunk_nbytes(edge_counts: np.ndarray, bounds: np.ndarray, edge_row_nbytes: int = 0) -> int:
    """chunk_nbytes of the biggest chunk of a partition (edge counts [P, P], interval bounds [P + 1])."""
    sizes = np.diff(np.asarray(bounds))
    counts = np.asarray(edge_counts)
    return max(chunk_nbytes(int(counts[i, j]), int(sizes[i]), int(sizes[j]), edge_row_nbytes)
               for i in range(len(sizes)) for j in range(len(sizes)))


def smallest_num_parts(budget: int, working_set_at, lower_bound_at, most: int, batch: int = 4,
                       max_batches: int = 4) -> tuple[int, int, str]:
    """The smallest P whose training working set fits `budget`: (P, its working set, what that sums).

    working_set_at(candidates) gives [(bytes, what they sum)] of the partitions into each P of a list (a
    converter counts their chunks in one pass over the edges); lower_bound_at(P) the same for a partition no
    P-way one can beat (equal intervals, every chunk the mean). Exact working sets are asked only for P whose
    lower bound fits, `batch` at a time, up to `most` and for at most max_batches batches. Raises ValueError
    naming what the smallest working set seen sums when none fits, at once when even P = most cannot.
    """
    budget = parse_size(budget)
    floor, floor_text = lower_bound_at(most)
    if floor > budget:
        raise ValueError(f"memory budget {format_bytes(budget)} ({budget} bytes) is too small to train this graph "
                         f"at any P up to {most}: at best {floor_text}; give at least "
                         f"{format_bytes(floor)} ({floor} bytes)")
    p = 1
    while p < most and lower_bound_at(p)[0] > budget:
        p += 1
    smallest = None
    for _ in range(max_batches):
        if p > most:
            break
        candidates = list(range(p, min(most, p + batch - 1) + 1))
        for candidate, (need, text) in zip(candidates, working_set_at(candidates)):
            if need <= budget:
                return candidate, need, text
            if smallest is None or need < smallest[1]:
                smallest = (candidate, need, text)
        p = candidates[-1] + 1
    raise ValueError(f"memory budget {format_bytes(budget)} ({budget} bytes) is too small: the smallest working "
                     f"set for P <= {p - 1} is at P={smallest[0]}: {smallest[2]}")


def format_bytes(count: int) -> str:
    """A byte count for people: 12.3 MiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"
