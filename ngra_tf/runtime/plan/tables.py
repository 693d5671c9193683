"""The step tables: which chunk steps a layer runs, in which order, on which lane (NGra §3.1, §4.2 and §6.2,
NeuGraph §3). NumPy only.

A layer's chunk steps are rows of an integer table that a compiled loop
walks; each row names a pass, a chunk C[i][j] and flags (FRESH: the first
chunk of its column in this pass; START: start a max / min chain from -inf /
+inf; LAST: the column's last chunk in this pass):

  forward    for each column j: every C[i][j] into the accumulators A[j] (sources in order), and for
             column-wide layers (edge.softmax) first a pass per softmax statistic over the same chunks
  backward   every C[i][j]'s vector-Jacobian product, row by row (NeuGraph: a source interval's
             gradient is summed over its row while its rows are held); column-wide layers go column
             by column, the softmax passes last-first

A *schedule* orders the forward (NGra §6.2):

    ngra        for each column j: every C[i][j] into A[j], then ApplyVertex(A[j])
    stage       every chunk of every column first, then every ApplyVertex
    dest-order  row by row: for each i, C[i][j] into every A[j]; then every ApplyVertex

Every schedule reduces a column's chunks in the same order (i = 0, 1, ...),
so they give bitwise the same result. P = 1 is one chunk step.

Over several devices (`LaneTables`: NGra's ring, NeuGraph's chain) the same
rows are dealt to lanes: device owner(j) runs every step of column j, row
by row, and interval i's rows travel the placement's routes.
"""

from __future__ import annotations

import numpy as np

SCHEDULES = ("ngra", "stage", "dest-order")

# Columns of a step table.
PASS, I, J, K, FRESH, START, LAST = range(7)
NUM_FIELDS = 7
MESSAGES = 0  # the pass that reduces messages into A[j]; softmax m's peak is pass 1 + 2m, its total 2 + 2m


def check_schedule(schedule: str) -> str:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
    return schedule


def peak_pass(m: int) -> int:
    return 1 + 2 * m


def total_pass(m: int) -> int:
    return 2 + 2 * m


def column_sources(edge_counts: np.ndarray, j: int) -> list:
    """The source intervals i whose chunk C[i][j] has edges, in order."""
    return [int(i) for i in np.flatnonzero(edge_counts[:, j])]


def needs_start(partition, j: int) -> bool:
    """Whether a max/min chain over column j must start from -inf (+inf) on the rows its first chunk does not
    reach but a later one does; otherwise the first chunk's kernel starts from nothing (and gives 0 where the
    column has no in-edge)."""
    sources = column_sources(partition.edge_counts, j)
    if len(sources) <= 1:
        return False
    reached = sum(partition.in_degree(i, j) for i in sources) > 0
    return not np.array_equal(partition.in_degree(sources[0], j) > 0, reached)


def forward_table(partition, schedule: str, num_markers: int, chained_by_max: bool, columns=None) -> np.ndarray:
    """The forward chunk steps of a layer: [steps, NUM_FIELDS] (of `columns` only, if given: a device's).

    FRESH marks a pass's first chunk of a column (its accumulator starts
    from nothing, or from the start values where START is set too).
    `chained_by_max`: the layer reduces with max or min, whose chains may
    need start values.
    """
    check_schedule(schedule)
    counts = _only(partition.edge_counts, columns)
    P = counts.shape[0]
    sources = [column_sources(counts, j) for j in range(P)]
    starts = [needs_start(partition, j) if (chained_by_max or num_markers) else False for j in range(P)]
    rows = []

    def add(pass_, i, j, start_ok):
        fresh = i == sources[j][0]
        rows.append((pass_, i, j, i * P + j, int(fresh), int(fresh and start_ok and starts[j]),
                     int(i == sources[j][-1])))

    if num_markers:  # column-wide: column by column, the softmax statistics first
        for j in range(P):
            for m in range(num_markers):
                for i in sources[j]:
                    add(peak_pass(m), i, j, True)
                for i in sources[j]:
                    add(total_pass(m), i, j, False)
            for i in sources[j]:
                add(MESSAGES, i, j, chained_by_max)
    elif schedule == "dest-order":
        for i in range(P):
            for j in range(P):
                if counts[i, j]:
                    add(MESSAGES, i, j, chained_by_max)
    else:
        for j in range(P):
            for i in sources[j]:
                add(MESSAGES, i, j, chained_by_max)
    return np.array(rows, np.int64).reshape(-1, NUM_FIELDS)


def backward_table(partition, num_markers: int, columns=None) -> np.ndarray:
    """The backward chunk steps of a layer: row by row, or (column-wide layers) column by column with a pass
    per softmax after the messages' (pass 1 + m: softmax m's exponentials), last softmax first."""
    counts = _only(partition.edge_counts, columns)
    P = counts.shape[0]
    rows = []
    if num_markers:
        for j in range(P):
            sources = column_sources(counts, j)
            for pass_ in [MESSAGES] + [1 + m for m in reversed(range(num_markers))]:
                rows += [(pass_, i, j, i * P + j, 0, 0, int(i == sources[-1])) for i in sources]
    else:
        rows = [(MESSAGES, i, j, i * P + j, 0, 0, int(i == column_sources(counts, j)[-1]))
                for i in range(P) for j in range(P) if counts[i, j]]
    return np.array(rows, np.int64).reshape(-1, NUM_FIELDS)


def in_degree(partition) -> np.ndarray:
    """Every vertex's in-degree, in interval order (mean divides by it; max / min start where it is > 0)."""
    bounds = np.asarray(partition.bounds, np.int64)
    degree = np.zeros(int(bounds[-1]), np.int64)
    for i in range(partition.num_parts):
        for j in range(partition.num_parts):
            if partition.edge_counts[i, j]:
                degree[bounds[j]:bounds[j + 1]] += partition.in_degree(i, j)
    return degree


NONE, LOAD, FORWARD = 0, 1, 2  # how a lane gets a row's source rows (LaneTables.arrive)


class LaneTables:
    """The steps of a layer over several lanes, row by row (NGra §4.2): from a DeviceRing (its devices as lanes
    in ring order, `ring.owner`, `ring.routes`) and a partition's chunk counts.

    pattern[i]    the lane order that row i's routes follow
    arrive[i, d]  how lane d gets row i's source rows: NONE, LOAD (first on its route) or FORWARD
    loaders[i]    the lanes that load row i
    devices       the lanes' TF device names, in ring order
    pred[d]       the lane lane d copies from (fixed by the placement)
    steps[d]      lane d's chunk steps, by row then column, as step-table rows (MESSAGES pass)
    offsets[d]    where each row's steps start in steps[d] ([P + 1])
    """

    def __init__(self, ring, partition, starts: list):
        counts = partition.edge_counts
        P = counts.shape[0]
        lanes = self.devices = list(ring.order)
        index = {lane: d for d, lane in enumerate(lanes)}
        self.owner = [index[ring.owner(j)] for j in range(P)]
        self.pred = [None] * len(lanes)
        self.orders, self.pattern, self.loaders = [], [], []
        self.arrive = np.zeros((P, len(lanes)), np.int32)
        for i in range(P):
            needed = {self.owner[j] for j in range(P) if counts[i, j]}
            order, loaders = [], []
            for route in ring.routes(i):
                route = [index[lane] for lane in route]
                order += route
                used = [k for k, d in enumerate(route) if d in needed]
                for k, d in enumerate(route[:used[-1] + 1] if used else []):
                    self.arrive[i, d] = LOAD if k == 0 else FORWARD
                    if k == 0:
                        loaders.append(d)
                    else:
                        self.pred[d] = route[k - 1]
            if order not in self.orders:
                self.orders.append(order)
            self.pattern.append(self.orders.index(order))
            self.loaders.append(loaders)
        self.steps, self.offsets = [], []
        for d in range(len(lanes)):
            mine = [j for j in range(P) if self.owner[j] == d]
            sources = {j: column_sources(counts, j) for j in mine}
            rows, offsets = [], [0]
            for i in range(P):
                for j in mine:
                    if counts[i, j]:
                        first = i == sources[j][0]
                        rows.append((MESSAGES, i, j, i * P + j, int(first), int(first and starts[j]),
                                     int(i == sources[j][-1])))
                offsets.append(len(rows))
            self.steps.append(np.array(rows, np.int64).reshape(-1, NUM_FIELDS))
            self.offsets.append(np.array(offsets, np.int64))

    def columns(self, d):
        return [j for j, owner in enumerate(self.owner) if owner == d]


def _only(counts, columns):
    """Chunk counts with the columns not in `columns` emptied (None: all)."""
    if columns is None:
        return counts
    kept = np.zeros_like(counts)
    kept[:, list(columns)] = counts[:, list(columns)]
    return kept


__all__ = ["LaneTables", "SCHEDULES", "backward_table", "check_schedule", "column_sources", "forward_table",
           "in_degree", "needs_start"]
