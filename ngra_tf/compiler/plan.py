"""Running a compiled layer over a partitioned graph, chunk by chunk (NGra §3.1, Fig. 4).

    vertex stage      hoisted S/D/V sub-graphs on all vertex rows (the user's order)
    split             each tensor the chunks read, cut into the P vertex intervals
    edge steps        per chunk C[i][j]: fused_gather, or scatter -> edge ops -> gather,
                      reducing in place into the accumulator A[j] of its column
    vertex steps      ApplyVertex(A[j]) for interval j
    merge             intervals back to the user's vertex order

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
    """

    def __init__(self, reduce, chunks, feature_shape, dtype):
        self.reduce = reduce
        self.chunks = [c for c in chunks if c.num_edges]
        self.single = len(self.chunks) <= 1
        self.feature_shape, self.dtype = list(feature_shape), tf.as_dtype(dtype)
        self.value = None
        self._reduced = 0

    @property
    def chunk_reduce(self):
        return self.reduce if self.single or self.reduce in ("max", "min") else "sum"

    def reduce_chunk(self, chunk, kernel):
        """kernel(reduce, init) reduces `chunk` (the column's next in source order) into init; returns A[j]."""
        expected = self.chunks[self._reduced] if self._reduced < len(self.chunks) else None
        if chunk is not expected:
            raise RuntimeError(f"{chunk} reduced out of order: the column's next chunk is {expected}")
        init = self.value if self.value is not None else self._start()
        self.value = kernel(self.chunk_reduce, init)
        self._reduced += 1
        return self.value

    def _start(self):
        """The first chunk's init: None, or the max/min start on the rows it does not see."""
        if self.single or self.reduce not in ("max", "min"):
            return None
        reached = self.in_degree > 0
        if np.all((self.chunks[0].adjacency.in_degree() > 0) == reached):
            return None
        fill = np.inf if self.reduce == "min" else -np.inf
        start = np.where(reached, fill, 0).astype(self.dtype.as_numpy_dtype)
        rows = tf.constant(start.reshape([-1] + [1] * len(self.feature_shape)))
        return tf.broadcast_to(rows, [len(start)] + self.feature_shape)

    @functools.cached_property
    def in_degree(self):
        """The column's in-degree per destination row, over all its chunks."""
        return sum(c.adjacency.in_degree() for c in self.chunks)

    def result(self, num_rows):
        if self.value is None:
            return tf.zeros([num_rows] + self.feature_shape, self.dtype)
        if self.single or self.reduce != "mean":
            return self.value
        return self.value / _column(np.maximum(self.in_degree, 1).astype(self.value.dtype.as_numpy_dtype), self.value)


def _column(values: np.ndarray, like):
    """values [rows] shaped to broadcast against `like` [rows, ...]."""
    return tf.reshape(tf.constant(values), [-1] + [1] * (like.shape.rank - 1))


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


def run(program: LayerProgram, partition, x, variables, schedule: str = "ngra"):
    """The layer's output for vertex rows x (in the user's order) over `partition`."""
    P = partition.num_parts
    if P > 1 and not program.chunkable:
        name, reason = program.edge.mixing_ops[0]
        raise ValueError(f"{program.name}: apply_edge mixes edges ({name}, {reason}), so its result would "
                         "change with the chunking; run it with chunks=1")
    steps = schedule_steps(schedule, P)
    edge_replay, vertex_replay = Replay(program.edge, variables), Replay(program.vertex, variables)
    edge, fused = program.edge, program.fused

    # The vertex stage: what every chunk reads, computed once per vertex.
    with tf.name_scope("ApplyEdge/Hoisted"):
        src_values = dict(zip([t.name for t in program.src_frontier],
                              edge_replay.evaluate(program.src_frontier, {edge.inputs["src"].name: x})))
        dst_values = dict(zip([t.name for t in program.dst_frontier],
                              edge_replay.evaluate(program.dst_frontier, {edge.inputs["dst"].name: x})))
        if fused is not None:
            src_operand = [src_values[t.name] for t in fused.src]
            if program.narrow is not None:
                src_operand = vertex_replay.evaluate(program.narrow.outputs,
                                                     {program.vertex.inputs["accum"].name: src_operand[0]})[:1]
            src_operand = src_operand[0] if len(src_operand) == 1 else tf.stack(src_operand, axis=1)
    with tf.name_scope("ApplyVertex/Hoisted"):
        vertex_values = vertex_replay.evaluate(program.vertex_frontier, {program.vertex.inputs["vertex"].name: x})

    intervals = Intervals(partition)
    feature_shape, dtype = program.accum_spec()
    accumulators = {j: [ColumnAccumulator(r, [partition.chunk(i, j) for i in range(P)], feature_shape, dtype)
                        for r in program.reduces]
                    for j in range(P)}
    column_memos = {}
    outputs, last = {}, []

    def data_feed(chunk):
        if "data" not in edge.inputs:
            return {}
        data = chunk.edge_data_tensor()
        spec = edge.inputs["data"]
        if data.dtype.is_floating and data.dtype != spec.dtype:
            data = tf.cast(data, spec.dtype)
        return {spec.name: data}

    def chunk_memo(i, j):
        """The edge-stage inputs of chunk C[i][j], scattered from their intervals."""
        chunk = partition.chunk(i, j)
        feeds = data_feed(chunk)
        with tf.name_scope("Scatter"):
            for t in program.src_frontier:
                feeds[t.name] = propagation.scatter(chunk, intervals.block("s:" + t.name, src_values[t.name], i))
            for t in program.dst_frontier:
                block = intervals.block("d:" + t.name, dst_values[t.name], j)
                feeds[t.name] = propagation.scatter_side(chunk, block, "dst")
        return feeds  # the replay's memo: evaluation starts from these

    def column(j):
        """Memos of column j's chunks, with every edge.softmax normalised over the whole column."""
        if j not in column_memos:
            memos = {i: chunk_memo(i, j) for i in range(P) if partition.chunk(i, j).num_edges}
            for name in edge.markers:  # graph order: a later softmax may read an earlier one
                marker = edge.graph.get_operation_by_name(name)
                with tf.name_scope("ApplyEdge"):
                    scores = {i: edge_replay.evaluate(marker.inputs[:1], memo=m)[0] for i, m in memos.items()}
                    for i, weights in _column_softmax(partition, j, scores).items():
                        memos[i][marker.outputs[0].name] = weights
            column_memos[j] = memos
        return column_memos[j]

    def edge_step(i, j):
        chunk = partition.chunk(i, j)
        if not chunk.num_edges:
            return None
        results = []
        if fused is not None:
            operand = None
            if fused.edge_operand is not None:
                operand = edge_replay.evaluate([fused.edge_operand], data_feed(chunk))[0]
                if fused.program == "src_mul_edge":
                    operand = tf.reshape(operand, [-1, *fused.weight_shape])
            x_dst = None if fused.dst is None else intervals.block("d:" + fused.dst.name, dst_values[fused.dst.name], j)
            x_src = intervals.block("fused_src", src_operand, i)
            with tf.name_scope("FusedGather"):
                for acc in accumulators[j]:
                    results.append(acc.reduce_chunk(chunk, functools.partial(
                        propagation.fused_gather, chunk, x_src, x_dst, operand, fused.program)))
        else:
            memo = column(j)[i] if edge.markers else chunk_memo(i, j)
            with tf.name_scope("ApplyEdge"):
                messages = edge_replay.evaluate([edge.output], memo=memo)[0]
            with tf.name_scope("Gather"):
                results = [acc.reduce_chunk(chunk, functools.partial(propagation.gather, chunk, messages))
                           for acc in accumulators[j]]
        return results[-1]

    def vertex_step(j):
        rows = int(partition.bounds[j + 1] - partition.bounds[j])
        parts = [acc.result(rows) for acc in accumulators[j]]
        accum = parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
        feeds = {t.name: intervals.block("v:" + t.name, value, j)
                 for t, value in zip(program.vertex_frontier, vertex_values)}
        target = program.narrow.outputs[0] if program.narrow is not None else program.vertex.inputs["accum"]
        feeds[target.name] = accum
        with tf.name_scope("ApplyVertex"):
            outputs[j] = vertex_replay.evaluate([program.vertex.output], feeds)[0]
        return outputs[j]

    for step in steps:
        with tf.control_dependencies(last), tf.name_scope(_step_name(step)):
            result = edge_step(*step[1:]) if step[0] == "edge" else vertex_step(step[1])
        if result is not None and not tf.executing_eagerly():
            last = [result]
    return intervals.merge([outputs[j] for j in range(P)])


def _step_name(step):
    return f"C{step[1]}_{step[2]}" if step[0] == "edge" else f"V{step[1]}"


def _column_softmax(partition, j, scores: dict):
    """Per-destination softmax over column j, from per-chunk scores {i: [E_ij, ...]}."""
    chunks = {i: partition.chunk(i, j) for i in scores}
    if len(chunks) == 1:
        (i, chunk), = chunks.items()
        return {i: edge_softmax(chunk, scores[i])}
    with tf.name_scope("EdgeSoftmax"):
        rows = int(partition.bounds[j + 1] - partition.bounds[j])
        any_scores = next(iter(scores.values()))
        shape, dtype = any_scores.shape[1:], any_scores.dtype

        def column_reduce(reduce, values):
            acc = ColumnAccumulator(reduce, chunks.values(), shape, dtype)
            for i, chunk in chunks.items():
                acc.reduce_chunk(chunk, functools.partial(propagation.gather, chunk, values[i]))
            return acc.result(rows)

        peak = tf.stop_gradient(column_reduce("max", scores))
        weights = {i: tf.exp(scores[i] - propagation.scatter_side(c, peak, "dst")) for i, c in chunks.items()}
        total = column_reduce("sum", weights)
        return {i: weights[i] / propagation.scatter_side(c, total, "dst") for i, c in chunks.items()}
