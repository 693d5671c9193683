"""A layer's chunk steps as compiled loops: one tf.while_loop walks the scheduler's step table.

    forward    for each step (pass, i, j): chunk C[i][j] with source rows i and destination rows j,
               reduced into column j's accumulators A[j] (or, for column-wide layers, into a softmax
               statistic of column j); at a column's last step, optionally, ApplyVertex(A[j])
    backward   for each step: the chunk's vector-Jacobian product; d source rows i, d destination
               rows j and the softmax sums' gradients are added into arrays by interval, d weights
               into loop variables

The loop body is traced once, whatever P: the chunk, its rows and its
column's accumulators are read by the step's indices when the iteration
runs, so the graph does not grow with the number of chunks. Everything a
step reads or writes is a block of a `Blocks` array (ngra_tf.runtime.blocks)
whose home -- the device, host memory or a file -- the executor chose;
chunks come from a chunk source (ngra_tf.runtime.chunks). The loops know
nothing of where either lives.

Max / min chains keep, per accumulator element, the source interval of the
chunk that won it and the winning edge; a chunk's backward routes d A only
to the elements it won, so chunks are differentiated independently and in
any order. Random ops in the edge stage (dropout) draw, for chunk k, from
the layer's seed states + [0, k] (`set_seeds`), so every evaluation of a
chunk -- in forward passes, over any lane, in backward -- draws the same
numbers, whatever order chunks run in. edge.dropout's states stay at their
base for every chunk (it draws at the edges' ids, so the chunking does not
matter) and move on by one per pass, as keras's next() does.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import tensorflow as tf

from ngra_tf.runtime.plan import tables as sched
from ngra_tf.runtime.blocks import Blocks

# Loops run chunk steps this many at a time (TensorFlow's parallel_iterations): a step's reads may run while the
# previous step computes.
PARALLEL_STEPS = 2


@dataclasses.dataclass
class Arrays:
    """Blocks arrays and their states, by name: what a loop carries."""

    blocks: dict
    states: dict

    def get(self, name, part):
        return self.blocks[name].get(self.states[name], part)

    def put(self, name, part, value):
        self.states[name] = self.blocks[name].put(self.states[name], part, value)

    def add(self, name, part, value):
        self.states[name] = self.blocks[name].add(self.states[name], part, value)

    def rows(self, keys, part) -> dict:
        return {key: self.get(key, part) for key in keys}

    def with_states(self, states):
        return Arrays(self.blocks, dict(states))


class ChunkLoops:
    """The forward and backward chunk loops of one layer (LayerKernels) over its plan (plan.LayerPlan: the
    step tables, in-degrees and column arrays)."""

    def __init__(self, kernels, plan, seeds=(), parallel: int = PARALLEL_STEPS):
        self.kernels, self.plan = kernels, plan
        self.parallel = int(parallel)  # steps in flight: the next step's reads start while this one computes
        self.schedule = plan.schedule
        self.num_parts = plan.num_parts
        self.bounds, self.sizes = plan.bounds, plan.sizes
        self.forward_steps, self.backward_steps = plan.forward_steps, plan.backward_steps
        self.degree = plan.degree  # in interval order: mean divides by it, max / min start where it is > 0
        self.seeds = list(seeds)  # seed-generator state variables the edge stage reads

    def bind(self, kernels) -> "ChunkLoops":
        """These loops over `kernels` (the same program bound to other variables: LayerKernels.bind)."""
        bound = copy.copy(self)
        bound.kernels = kernels
        bound.seeds = kernels.seeds(kernels.edge_variables())
        return bound

    def for_columns(self, columns) -> "ChunkLoops":
        """These loops over `columns` only (a lane's)."""
        return ChunkLoops(self.kernels, self.plan.for_columns(self.kernels, columns), self.seeds, self.parallel)

    # ---- what the loops keep ----

    def score_shape(self, m):
        return list(self.plan.column_specs[f"peak{m}"][0])

    def column_arrays(self, home, device=None, host="/CPU:0") -> dict:
        """Blocks for what the forward leaves per column (plan.column_specs): A per reducer ("acc{r}"), max /
        min winners ("won{r}", "edge{r}"), softmax statistics ("peak{m}", "total{m}")."""
        return {name: Blocks(name, home, self.sizes, row_shape, dtype, device, host)
                for name, (row_shape, dtype) in self.plan.column_specs.items()}

    def _start(self, reduce, rows, shape, dtype):
        """A max / min chain's start on a column: -inf (+inf for min) where it has in-edges, else 0."""
        fill = -np.inf if reduce == "max" else np.inf
        values = tf.where(rows, tf.constant(fill, dtype), tf.constant(0, dtype))
        return tf.broadcast_to(tf.reshape(values, [-1] + [1] * len(shape)), tf.concat([tf.shape(rows), shape], 0))

    # ---- forward ----

    def forward(self, rows: Arrays, chunks, columns: Arrays, finish=None, replay=None, select=None):
        """Runs the forward steps over source / destination rows (`rows`, by key) into the column arrays
        (`columns`: column_arrays' names; their states are updated). At a column's last step,
        `finish(j, columns)` may run (the executor's ApplyVertex, or a spill). `select(c, i)`, if given,
        loads chunk c and its source rows itself (NeuGraph's selective scheduling: only the rows it uses).
        Returns the column states and the chunks' seed bases (`replay`: a forward's, to draw the same)."""
        k = self.kernels
        table = tf.constant(self.forward_steps, tf.int32)
        reached = tf.constant(self.degree > 0)
        bounds = tf.constant(self.bounds)
        num_markers = len(k.markers)
        seeds = self.seed_bases() if replay is None else replay

        def body(s, column_states, seeds):
            step = table[s]
            pass_, i, j, c, fresh, start = (step[f] for f in (sched.PASS, sched.I, sched.J, sched.K, sched.FRESH,
                                                               sched.START))
            last = step[sched.LAST] > 0
            if select is None:
                chunk, src = chunks.chunk(c, s), rows.rows(k.source_keys, i)
            else:
                chunk, src = select(c, i)
            dst = rows.rows(k.dest_keys, j)
            self.seed_chunk(seeds, c)  # every evaluation of chunk c draws the same numbers
            column_reached = _interval(reached, bounds, j)

            def stats_of(cols):
                return [(cols.get(f"peak{m}", j), cols.get(f"total{m}", j)) for m in range(num_markers)]

            def messages():
                cols = columns.with_states(column_states)
                stats = stats_of(cols)
                inits = self.chain_inits(cols, j, fresh, start, column_reached)
                self.accumulate(cols, k.chunk_forward(chunk, src, dst, inits, stats or None), i, j, fresh)
                if finish is not None:
                    before = dict(cols.states)
                    return tf.cond(last, lambda: finish(j, cols.with_states(before)).states, lambda: before)
                return cols.states

            def statistic(m, kind):
                def run():
                    cols = columns.with_states(column_states)
                    stats = stats_of(cols)
                    shape = self.score_shape(m)
                    nothing = tf.zeros([0] + shape, k.dtype)
                    if kind == "peak":
                        first = tf.cond(start > 0, lambda: self._start("max", column_reached, shape, k.dtype),
                                        lambda: nothing)
                    else:
                        first = nothing
                    name = f"{kind}{m}"
                    init = tf.cond(fresh > 0, lambda: first, lambda: cols.get(name, j))
                    cols.put(name, j, k.softmax_statistic(chunk, src, dst, stats, m, kind, init))
                    return cols.states
                return run

            if not num_markers:
                new = messages()
            else:
                branches = [messages]
                for m in range(num_markers):
                    branches += [statistic(m, "peak"), statistic(m, "total")]
                new = tf.switch_case(tf.cast(pass_, tf.int32), branches)
            return s + 1, new, seeds

        _, column_states = tf.while_loop(
            lambda s, *_: s < len(self.forward_steps), lambda s, states: body(s, states, seeds)[:2],
            (tf.constant(0), columns.states), parallel_iterations=self.parallel, name="ForwardChunkSteps")
        self.seed_end(seeds)
        return column_states, seeds

    def chain_inits(self, cols, j, fresh, start, column_reached):
        """What a chunk step of column j reduces into, per chained reducer: nothing at the column's first step
        (max / min: the start value where the column is reached, if `start`), else A[j] so far."""
        k = self.kernels
        empty = tf.zeros([0] + list(k.feature_shape), k.dtype)
        inits = []
        for r, reduce in enumerate(k.chain_reduces):
            first = empty
            if reduce in ("max", "min"):
                first = tf.cond(start > 0, lambda r=r: self._start(k.chain_reduces[r], column_reached,
                                                                   k.feature_shape, k.dtype), lambda: empty)
            inits.append(tf.cond(fresh > 0, lambda first=first: first, lambda r=r: cols.get(f"acc{r}", j)))
        return inits

    def accumulate(self, cols, results, i, j, fresh):
        """Puts a chunk step's results into column j's arrays: A[j], and for max / min which row interval i
        and edge won each element (kept where this chunk did not win)."""
        for r, (value, argedge) in enumerate(results):
            cols.put(f"acc{r}", j, value)
            if f"won{r}" in cols.blocks:
                won = argedge >= 0
                before_won = tf.cond(fresh > 0, lambda: -tf.ones_like(argedge, tf.int32),
                                     lambda r=r: cols.get(f"won{r}", j))
                before_edge = tf.cond(fresh > 0, lambda: -tf.ones_like(argedge, tf.int64),
                                      lambda r=r: cols.get(f"edge{r}", j))
                cols.put(f"won{r}", j, tf.where(won, tf.fill(tf.shape(argedge), i), before_won))
                cols.put(f"edge{r}", j, tf.where(won, tf.cast(argedge, tf.int64), before_edge))

    # ---- random state ----

    def seed_bases(self):
        """The seed states before the layer's chunk steps: chunk k draws with base + [0, k]."""
        return tuple(v.read_value() for v in self.seeds)

    def seed_chunk(self, bases, c):
        set_seeds(self.seeds, bases, [0 if once else c for once in self.kernels.per_pass(self.seeds)])

    def seed_end(self, bases):
        """The seed states as the forward leaves them: past every chunk id (per-pass states: past this pass)."""
        last = self.num_parts * self.num_parts
        set_seeds(self.seeds, bases, [1 if once else last for once in self.kernels.per_pass(self.seeds)])

    # ---- backward ----

    def backward(self, rows: Arrays, chunks, columns: Arrays, grads: Arrays, d_rows: Arrays, seeds):
        """Adds the chunks' d source and d destination rows into `d_rows` (by key; states updated) given
        d A per reducer in `grads` ("acc{r}": for mean, d of the column sums), from the forward's column
        arrays (winners, softmax statistics); returns (d_rows states, d weights)."""
        k = self.kernels
        table = tf.constant(self.backward_steps, tf.int32)
        num_markers = len(k.markers)
        # d (softmax m's column sums), added up over a column's chunks before its softmax passes run
        d_totals = [Blocks(f"d_total{m}", "device", self.sizes, self.score_shape(m), k.dtype,
                           device=columns.blocks[f"total{m}"].device) for m in range(num_markers)]
        total_states = tuple(b.filled(0) for b in d_totals)
        weights = [tf.zeros(w.shape, w.dtype) for w in k.weights]

        def body(s, d_row_states, weights, total_states):
            step = table[s]
            pass_, i, j, c = (step[f] for f in range(4))
            chunk = chunks.chunk(c, s)
            src, dst = rows.rows(k.source_keys, i), rows.rows(k.dest_keys, j)
            column_stats = [(columns.get(f"peak{m}", j), columns.get(f"total{m}", j)) for m in range(num_markers)]
            self.seed_chunk(seeds, c)

            def messages():
                d_a = [grads.get(f"acc{r}", j) for r in range(len(k.reduces))]
                argedges = backward_aux(k, columns, i, j, chunks.index_dtype)
                d_src, d_dst, d_weights, d_stats = k.chunk_backward(chunk, src, dst, d_a, argedges,
                                                                    column_stats or None)
                return d_src, d_dst, d_weights, list(d_stats)

            def softmax(m):
                def run():
                    d_total = d_totals[m].get(total_states[m], j)
                    d_src, d_dst, d_weights, d_stats = k.softmax_backward(chunk, src, dst, column_stats, m, d_total)
                    return d_src, d_dst, d_weights, list(d_stats) + [tf.zeros_like(t) for _, t in column_stats[m:]]
                return run

            if not num_markers:
                d_src, d_dst, d_weights, d_stats = messages()
            else:
                d_src, d_dst, d_weights, d_stats = tf.switch_case(
                    tf.cast(pass_, tf.int32), [messages] + [softmax(m) for m in range(num_markers)])
            out = d_rows.with_states(d_row_states)
            for key, value in d_src.items():
                out.add(key, i, value)
            for key, value in d_dst.items():
                out.add(key, j, value)
            weights = [a + b for a, b in zip(weights, d_weights)]
            total_states = tuple(b.add(t, j, d) for b, t, d in zip(d_totals, total_states, d_stats))
            return s + 1, out.states, weights, total_states

        _, d_row_states, weights, _ = tf.while_loop(
            lambda s, *_: s < len(self.backward_steps), body, (tf.constant(0), d_rows.states, weights, total_states),
            parallel_iterations=self.parallel, name="BackwardChunkSteps")
        self.seed_end(seeds)
        return d_row_states, weights


def backward_aux(kernels, columns, i, j, index_dtype) -> list:
    """What chunk C[i][j]'s backward needs of its column's forward, per reducer: for max / min the winning
    edges of this chunk (-1 where another won), for softmax the column's finished state, else None."""
    found = []
    for r, reduce in enumerate(kernels.chain_reduces):
        if f"won{r}" in columns.blocks:
            mine = tf.equal(columns.get(f"won{r}", j), i)
            winners = columns.get(f"edge{r}", j)
            found.append(tf.cast(tf.where(mine, winners, -tf.ones_like(winners)), index_dtype))
        elif reduce == "softmax":
            found.append(columns.get(f"acc{r}", j))
        else:
            found.append(None)
    return found


def set_seeds(variables, bases, k):
    """Sets each seed-generator state to its base + [0, k] (k: one for all, or one per variable): the k-th step's
    draws, whatever the order steps run in (and the same when a step runs again in backward)."""
    offsets = k if isinstance(k, (list, tuple)) else [k] * len(variables)
    for variable, base, offset in zip(variables, bases, offsets):
        variable.assign(base + tf.cast(tf.stack([0, offset]), base.dtype))


def _interval(values, bounds, part):
    """values[bounds[part]:bounds[part + 1]] (a 1-D tensor in interval order)."""
    return values[bounds[part]:bounds[part + 1]]


def column_result(column_sums, reduce, degree, bounds=None, j=None):
    """A[j] from the chain's result: mean divides the column sums by the in-degree (of interval j's rows, or
    of all rows in interval order)."""
    if reduce != "mean":
        return column_sums
    return column_sums / per_row(degree, column_sums, bounds, j)


def per_row(degree, like, bounds=None, j=None):
    values = tf.constant(degree.clip(min=1), like.dtype)
    if j is not None:
        values = values[bounds[j]:bounds[j + 1]] if isinstance(j, int) else \
            values[tf.gather(tf.constant(bounds), j):tf.gather(tf.constant(bounds), j + 1)]
    return tf.reshape(values, [-1] + [1] * (like.shape.rank - 1))


__all__ = ["Arrays", "ChunkLoops", "PARALLEL_STEPS", "backward_aux", "column_result", "per_row"]
