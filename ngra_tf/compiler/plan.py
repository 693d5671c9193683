"""Running a compiled layer over a partitioned graph, chunk by chunk (NGra §3.1, Fig. 4).

    vertex stage      hoisted S/D/V sub-graphs on vertex rows (all of them, or one interval's)
    edge steps        per chunk C[i][j]: fused_gather, or scatter -> edge ops -> gather,
                      reducing in place into the accumulator A[j] of its column
    vertex steps      ApplyVertex(A[j]) for interval j

`LayerSteps` holds these pieces for one compiled layer; `run` composes them
over an in-memory partition into one graph (the vertex stage on all rows,
cut into intervals, merged back at the end), and the streaming runtime
(ngra_tf.runtime.stream) composes the same pieces one interval or chunk at
a time, loading and spilling between them.

A *schedule* orders the steps (NGra §6.2):

    ngra        for each column j: every C[i][j] into A[j], then ApplyVertex(A[j])
    stage       every chunk of every column first, then every ApplyVertex
    dest-order  row by row: for each i, C[i][j] into every A[j]; then every ApplyVertex

Each step waits for the previous one (control dependencies), so the order is
the one the graph executes. Every schedule reduces a column's chunks in the
same order (i = 0, 1, ...), so they give bitwise the same result; the
backward pass differentiates each chunk's kernel over its CSR, row by row.
P = 1 is the same code with one chunk.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import tensorflow as tf

from ngra_tf.compiler.program import LayerProgram
from ngra_tf.compiler.replay import Replay
from ngra_tf.ops import propagation
from ngra_tf.ops.softmax import edge_softmax

SCHEDULES = ("ngra", "stage", "dest-order")


def schedule_steps(schedule: str, num_parts: int):
    """The steps in order: ("edge", i, j) runs chunk C[i][j], ("vertex", j) ApplyVertex on A[j]."""
    parts = range(num_parts)
    if schedule == "ngra":
        return [step for j in parts for step in [("edge", i, j) for i in parts] + [("vertex", j)]]
    if schedule == "stage":
        return [("edge", i, j) for j in parts for i in parts] + [("vertex", j) for j in parts]
    if schedule == "dest-order":
        return [("edge", i, j) for i in parts for j in parts] + [("vertex", j) for j in parts]
    raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")


def column_sources(partition, j: int) -> list:
    """The source intervals i whose chunk C[i][j] has edges, in order."""
    return [i for i in range(partition.num_parts) if partition.edge_counts[i, j]]


def interval_rows(partition, part: int) -> int:
    return int(partition.bounds[part + 1] - partition.bounds[part])


class ColumnAccumulator:
    """A[j] for one reducer: column j's chunks reduce into it in place, in source order.

    Each chunk's kernel takes the column's value so far as its initial
    accumulator (`init`) and returns the new value, so a column makes no
    per-chunk partial tensors and no adds, and a kernel may reduce straight
    into A[j]'s buffer: A = op(C0); A = op(C1, init=A); ... A column whose
    in-edges all lie in one chunk is reduced by the kernel with the layer's own
    reducer. Otherwise sum and mean chain with sum, and mean divides by the
    whole in-degree at the end; max and min chain with their own reducer.
    The first chunk of a max/min chain starts from -inf (+inf for min) on the
    rows it has no in-edge to but a later chunk has (and 0 on rows with no
    in-edge at all), so that no value it did not see competes; when it has an
    in-edge to every row that any chunk has, it needs no start at all (its
    empty rows are the column's, and get the kernel's 0). The last chunk's
    result is then the column's. Every schedule runs a column's chunks in
    source order, so all give the same bits.

    `partition` answers edge_counts and in_degree(i, j) (a Partition, or a
    store's view of one, which reads only the chunks' CSC pointers).
    """

    def __init__(self, reduce, partition, j: int, feature_shape, dtype):
        self.reduce = reduce
        self.partition, self.j = partition, j
        self.sources = column_sources(partition, j)
        self.single = len(self.sources) <= 1
        self.feature_shape, self.dtype = list(feature_shape), tf.as_dtype(dtype)
        self.value = None
        self._reduced = 0

    @property
    def chunk_reduce(self):
        return self.reduce if self.single or self.reduce in ("max", "min") else "sum"

    @property
    def chained_by_value(self) -> bool:
        """Whether a chunk's gradient depends on the value it reduced into (max/min chains do; sums do not)."""
        return self.chunk_reduce in ("max", "min") and not self.single

    def next_init(self, i):
        """The init of chunk C[i][j], which must be the column's next in source order."""
        expected = self.sources[self._reduced] if self._reduced < len(self.sources) else None
        if i != expected:
            raise RuntimeError(f"chunk C[{i}][{self.j}] reduced out of order: the column's next chunk is "
                               f"{'none' if expected is None else f'C[{expected}][{self.j}]'}")
        return self.value if self.value is not None else self.start()

    def accept(self, value):
        """The column's value after its next chunk."""
        self.value = value
        self._reduced += 1

    def reduce_chunk(self, i, kernel):
        """kernel(reduce, init) reduces chunk C[i][j] into init; returns A[j]."""
        self.accept(kernel(self.chunk_reduce, self.next_init(i)))
        return self.value

    def start(self):
        """The first chunk's init: None, or the max/min start on the rows it does not see."""
        if not self.chained_by_value:
            return None
        reached = self.in_degree > 0
        if np.all((self.partition.in_degree(self.sources[0], self.j) > 0) == reached):
            return None
        fill = np.inf if self.reduce == "min" else -np.inf
        start = np.where(reached, fill, 0).astype(self.dtype.as_numpy_dtype)
        rows = tf.constant(start.reshape([-1] + [1] * len(self.feature_shape)))
        return tf.broadcast_to(rows, [len(start)] + self.feature_shape)

    @functools.cached_property
    def in_degree(self):
        """The column's in-degree per destination row, over all its chunks."""
        rows = interval_rows(self.partition, self.j)
        return sum((self.partition.in_degree(i, self.j) for i in self.sources), np.zeros(rows, np.int64))

    def finish(self, value):
        """A[j] from the last chunk's value (None: a column without edges)."""
        if value is None:
            return tf.zeros([interval_rows(self.partition, self.j)] + self.feature_shape, self.dtype)
        if self.single or self.reduce != "mean":
            return value
        return value / _column(np.maximum(self.in_degree, 1).astype(value.dtype.as_numpy_dtype), value)

    def result(self):
        return self.finish(self.value)


def _column(values: np.ndarray, like):
    """values [rows] shaped to broadcast against `like` [rows, ...]."""
    return tf.reshape(tf.constant(values), [-1] + [1] * (like.shape.rank - 1))


class LayerSteps:
    """The pieces of a compiled layer that plans compose: hoist, chunk, column softmax, vertex.

    Vertex-stage values travel as dicts {key: tensor} of per-vertex rows:
    `source_keys` are what a chunk reads from its source interval,
    `dest_keys` from its destination interval, `vertex_keys` what the vertex
    step reads.
    """

    def __init__(self, program: LayerProgram, variables):
        self.program = program
        self.edge_replay, self.vertex_replay = Replay(program.edge, variables), Replay(program.vertex, variables)
        self.feature_shape, self.dtype = program.accum_spec()
        edge, fused = program.edge, program.fused
        if fused is not None:
            self.source_keys = ["fused_src"]
            self.dest_keys = [] if fused.dst is None else ["d:" + fused.dst.name]
        else:
            self.source_keys = ["s:" + t.name for t in program.src_frontier]
            self.dest_keys = ["d:" + t.name for t in program.dst_frontier]
        self.vertex_keys = ["v:" + t.name for t in program.vertex_frontier]
        self.column_wide = bool(edge.markers)  # an edge.softmax normalises over a whole column

    def check_chunkable(self, num_parts: int):
        if num_parts > 1 and not self.program.chunkable:
            name, reason = self.program.edge.mixing_ops[0]
            raise ValueError(f"{self.program.name}: apply_edge mixes edges ({name}, {reason}), so its result "
                             "would change with the chunking; run it with chunks=1")

    def hoist(self, x, keys=None) -> dict:
        """The vertex stage on vertex rows x: {key: rows} for `keys` (default: all of them)."""
        program, edge = self.program, self.program.edge
        keys = set(self.source_keys + self.dest_keys + self.vertex_keys if keys is None else keys)
        values = {}
        with tf.name_scope("ApplyEdge/Hoisted"):
            src = [t for t in program.src_frontier if "s:" + t.name in keys or "fused_src" in keys]
            dst = [t for t in program.dst_frontier if "d:" + t.name in keys]
            for t, value in zip(src, self.edge_replay.evaluate(src, {edge.inputs["src"].name: x})):
                values["s:" + t.name] = value
            for t, value in zip(dst, self.edge_replay.evaluate(dst, {edge.inputs["dst"].name: x})):
                values["d:" + t.name] = value
            if "fused_src" in keys:
                operand = [values["s:" + t.name] for t in program.fused.src]
                if program.narrow is not None:
                    operand = self.vertex_replay.evaluate(
                        program.narrow.outputs, {program.vertex.inputs["accum"].name: operand[0]})[:1]
                values["fused_src"] = operand[0] if len(operand) == 1 else tf.stack(operand, axis=1)
        vertex = [t for t in program.vertex_frontier if "v:" + t.name in keys]
        with tf.name_scope("ApplyVertex/Hoisted"):
            for t, value in zip(vertex, self.vertex_replay.evaluate(
                    vertex, {program.vertex.inputs["vertex"].name: x})):
                values["v:" + t.name] = value
        return {key: value for key, value in values.items() if key in keys}

    def accumulators(self, partition, j: int) -> list:
        return [ColumnAccumulator(r, partition, j, self.feature_shape, self.dtype) for r in self.program.reduces]

    def _data_feed(self, chunk):
        edge = self.program.edge
        if "data" not in edge.inputs:
            return {}
        data = chunk.edge_data_tensor()
        spec = edge.inputs["data"]
        if data.dtype.is_floating and data.dtype != spec.dtype:
            data = tf.cast(data, spec.dtype)
        return {spec.name: data}

    def _chunk_memo(self, chunk, src: dict, dst: dict):
        """The edge-stage inputs of a chunk, scattered from its interval rows."""
        program = self.program
        feeds = self._data_feed(chunk)
        with tf.name_scope("Scatter"):
            for t in program.src_frontier:
                feeds[t.name] = propagation.scatter(chunk, src["s:" + t.name])
            for t in program.dst_frontier:
                feeds[t.name] = propagation.scatter_side(chunk, dst["d:" + t.name], "dst")
        return feeds  # the replay's memo: evaluation starts from these

    def column_memos(self, partition, j: int, chunks: dict, sources: dict, dst: dict) -> dict:
        """{i: memo} of column j's chunks with every edge.softmax normalised over the column.

        chunks and sources map each i of column_sources(partition, j) to its
        chunk and its source-interval rows.
        """
        edge = self.program.edge
        memos = {i: self._chunk_memo(chunks[i], sources[i], dst) for i in chunks}
        for name in edge.markers:  # graph order: a later softmax may read an earlier one
            marker = edge.graph.get_operation_by_name(name)
            with tf.name_scope("ApplyEdge"):
                scores = {i: self.edge_replay.evaluate(marker.inputs[:1], memo=m)[0] for i, m in memos.items()}
                for i, weights in _column_softmax(partition, j, chunks, scores).items():
                    memos[i][marker.outputs[0].name] = weights
        return memos

    def chunk_values(self, chunk, src: dict, dst: dict, inits: list, reduces: list, memo=None) -> list:
        """Chunk C[i][j] reduced into each init with each reducer (one value per reducer).

        `memo` (from column_memos) is required for column-wide layers.
        """
        fused = self.program.fused
        if fused is not None:
            operand = None
            if fused.edge_operand is not None:
                operand = self.edge_replay.evaluate([fused.edge_operand], self._data_feed(chunk))[0]
                if fused.program == "src_mul_edge":
                    operand = tf.reshape(operand, [-1, *fused.weight_shape])
            x_dst = None if fused.dst is None else dst["d:" + fused.dst.name]
            with tf.name_scope("FusedGather"):
                return [propagation.fused_gather(chunk, src["fused_src"], x_dst, operand, fused.program,
                                                 reduce=r, init=init) for init, r in zip(inits, reduces)]
        if memo is None:
            if self.column_wide:
                raise RuntimeError("a column-wide layer's chunk needs its column's memo (column_memos)")
            memo = self._chunk_memo(chunk, src, dst)
        with tf.name_scope("ApplyEdge"):
            messages = self.edge_replay.evaluate([self.program.edge.output], memo=memo)[0]
        with tf.name_scope("Gather"):
            return [propagation.gather(chunk, messages, reduce=r, init=init) for init, r in zip(inits, reduces)]

    def reduce_chunk(self, accumulators: list, i: int, chunk, src: dict, dst: dict, memo=None):
        """Chunk C[i][j] into its column's accumulators; returns the last one's value."""
        values = self.chunk_values(chunk, src, dst, [acc.next_init(i) for acc in accumulators],
                                   [acc.chunk_reduce for acc in accumulators], memo)
        for acc, value in zip(accumulators, values):
            acc.accept(value)
        return values[-1]

    def vertex(self, accumulated: list, vertex_rows: dict):
        """ApplyVertex on interval j from its finished accumulators (one per reducer)."""
        program = self.program
        accum = accumulated[0] if len(accumulated) == 1 else tf.concat(accumulated, axis=-1)
        feeds = {t.name: vertex_rows["v:" + t.name] for t in program.vertex_frontier}
        target = program.narrow.outputs[0] if program.narrow is not None else program.vertex.inputs["accum"]
        feeds[target.name] = accum
        with tf.name_scope("ApplyVertex"):
            return self.vertex_replay.evaluate([program.vertex.output], feeds)[0]


class Intervals:
    """Vertex tensors cut into the partition's intervals, each tensor cut once, when first needed.

    Rows are put in interval order with one gather by a permutation (whose
    gradient is the inverse gather, not a scatter-add), then split.
    """

    def __init__(self, partition):
        self.partition = partition
        self._blocks = {}

    def block(self, key, value, part):
        if key not in self._blocks:
            p = self.partition
            if p.num_parts == 1 and p.identity_order:
                self._blocks[key] = [value]
            else:
                ordered = value if p.identity_order else _permute(value, p.order_tensor(), p.position_tensor())
                self._blocks[key] = tf.split(ordered, np.diff(p.bounds).tolist(), axis=0)
        return self._blocks[key][part]

    def merge(self, blocks):
        p = self.partition
        joined = blocks[0] if len(blocks) == 1 else tf.concat(blocks, axis=0)
        return joined if p.identity_order else _permute(joined, p.position_tensor(), p.order_tensor())


def _permute(x, index, inverse):
    """x[index] for a permutation `index` whose inverse is `inverse`."""

    @tf.custom_gradient
    def permute(rows):
        return tf.gather(rows, index), lambda grad: tf.gather(grad, inverse)

    return permute(x)


class OneDevice:
    """Where `run` finds vertex rows and runs steps on one device: the vertex stage on all rows at once.

    A layout answers rows(keys, part, j) -- the rows of interval `part`
    where column j's steps run --, device(j), chunk(i, j) and merge(outputs);
    ngra_tf.parallel.ring.RingLayout answers the same over several devices.
    """

    def __init__(self, steps: LayerSteps, partition, x):
        self.partition = partition
        self.hoisted = steps.hoist(x)  # what every chunk reads, computed once per vertex
        self.intervals = Intervals(partition)

    def rows(self, keys, part, j=None) -> dict:
        return {key: self.intervals.block(key, self.hoisted[key], part) for key in keys}

    def device(self, j):
        return None

    def chunk(self, i, j):
        return self.partition.chunk(i, j)

    def merge(self, outputs):
        return self.intervals.merge(outputs)


def run(program: LayerProgram, partition, x, variables, schedule: str = "ngra", ring=None):
    """The layer's output for vertex rows x (in the user's order) over an in-memory `partition`.

    With `ring` (ngra_tf.parallel.DeviceRing), each column's steps run on the
    device that owns it, and vertex rows reach the devices along its routes.
    """
    P = partition.num_parts
    steps = LayerSteps(program, variables)
    steps.check_chunkable(P)
    order = schedule_steps(schedule, P)
    layout = OneDevice(steps, partition, x) if ring is None else ring.layout(steps, partition, x)
    accumulators = {j: steps.accumulators(partition, j) for j in range(P)}
    column_memos, outputs, last = {}, {}, {}

    def edge_step(i, j):
        if not partition.edge_counts[i, j]:
            return None
        memo = None
        if steps.column_wide:
            if j not in column_memos:
                sources = column_sources(partition, j)
                column_memos[j] = steps.column_memos(
                    partition, j, {s: layout.chunk(s, j) for s in sources},
                    {s: layout.rows(steps.source_keys, s, j) for s in sources}, layout.rows(steps.dest_keys, j, j))
            memo = column_memos[j][i]
        return steps.reduce_chunk(accumulators[j], i, layout.chunk(i, j), layout.rows(steps.source_keys, i, j),
                                  layout.rows(steps.dest_keys, j, j), memo)

    def vertex_step(j):
        outputs[j] = steps.vertex([acc.result() for acc in accumulators[j]], layout.rows(steps.vertex_keys, j, j))
        return outputs[j]

    for step in order:
        device = layout.device(step[-1])  # each device runs its own steps in order, beside the others
        with _on(device), tf.control_dependencies(last.get(device, [])), tf.name_scope(_step_name(step)):
            result = edge_step(*step[1:]) if step[0] == "edge" else vertex_step(step[1])
        if result is not None and not tf.executing_eagerly():
            last[device] = [result]
    return layout.merge([outputs[j] for j in range(P)])


def _on(device):
    return contextlib.nullcontext() if device is None else tf.device(device)


def _step_name(step):
    return f"C{step[1]}_{step[2]}" if step[0] == "edge" else f"V{step[1]}"


def _column_softmax(partition, j, chunks: dict, scores: dict):
    """Per-destination softmax over column j, from per-chunk scores {i: [E_ij, ...]}."""
    if len(chunks) == 1:
        (i, chunk), = chunks.items()
        return {i: edge_softmax(chunk, scores[i])}
    with tf.name_scope("EdgeSoftmax"):
        any_scores = next(iter(scores.values()))
        shape, dtype = any_scores.shape[1:], any_scores.dtype

        def column_reduce(reduce, values):
            acc = ColumnAccumulator(reduce, partition, j, shape, dtype)
            for i, chunk in chunks.items():
                acc.reduce_chunk(i, functools.partial(propagation.gather, chunk, values[i]))
            return acc.result()

        peak = tf.stop_gradient(column_reduce("max", scores))
        weights = {i: tf.exp(scores[i] - propagation.scatter_side(c, peak, "dst")) for i, c in chunks.items()}
        total = column_reduce("sum", weights)
        return {i: weights[i] / propagation.scatter_side(c, total, "dst") for i, c in chunks.items()}
