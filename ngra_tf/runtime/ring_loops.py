"""A layer's chunk steps over several devices, row by row, sharing every source interval along routes (NGra §4.2).

Work is split by destination interval: device owner(j) ("lane") holds
column j's accumulators, reduces every chunk C[i][j] into them and runs
ApplyVertex(A[j]). What lanes share is the source rows: one loop walks the
source intervals i; in its iteration interval i's rows enter each route of
the placement once -- the route's first lane loads them (from where the
hoisted rows live: its own memory, or the host tier with copy_h2d), each
next lane copies them from the one before (copy_d2d) -- and the route ends at
the last lane that needs them. Each lane then reduces its chunks C[i][j]
into its columns' accumulators, an inner loop over a per-lane table. So a
lane holds the accumulators of all its columns at once, and one interval of
source rows (and the one arriving).

The body is traced once per *pattern* (the lanes' order along the routes:
one per loader on a ring, one for a chain or no sharing), whatever P. The
backward walks the rows the same way: each lane sums its chunks' d source
rows, which are copied back and added on the host in lane order; d
destination rows and d A stay with the owner.
"""

from __future__ import annotations

import tensorflow as tf

from ngra_tf.ops.copy import copy_d2d
from ngra_tf.runtime.plan import tables as sched
from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.loops import Arrays, backward_aux

class RingLoops:
    """The forward and backward chunk loops of one layer (not column-wide) over a ring's lanes."""

    def __init__(self, loops):
        self.loops, self.kernels = loops, loops.kernels
        self.plan = loops.plan.lanes  # (plan.tables.LaneTables)
        self.num_parts = loops.num_parts

    def _arrivals(self, i, load, key_specs, sent=None):
        """Row i's source rows on every lane ({key: rows} per lane; empty where it does not arrive)."""
        plan = self.plan

        def branch(order):
            def run():
                rows = [None] * len(plan.devices)
                for position, d in enumerate(order):
                    lane = plan.devices[d]
                    # (in this order a lane forwards only from the lane before it on its route)
                    pred = plan.pred[d] if plan.pred[d] in order[:position] else None
                    empty = {key: tf.zeros([0] + list(shape), dtype) for key, (shape, dtype) in key_specs.items()}

                    def forwarded(pred=pred, lane=lane):
                        with tf.device(lane):
                            return {key: copy_d2d(value) for key, value in rows[pred].items()}

                    with tf.device(lane):
                        arrival = tf.gather(plan_arrive, i)[d]
                        choices = [lambda empty=empty: empty, lambda d=d: load(d, i)]
                        if pred is not None:
                            choices.append(forwarded)
                        rows[d] = tf.switch_case(arrival, choices)
                return tuple(rows)
            return run

        plan_arrive = tf.constant(plan.arrive)
        if len(plan.orders) == 1:
            return branch(plan.orders[0])()
        return tf.switch_case(tf.gather(tf.constant(plan.pattern, tf.int32), i), [branch(o) for o in plan.orders])

    def forward(self, load, key_specs, dst_rows, columns: list, chunks: list, finish, replay=None):
        """Runs every row: load(d, i) gives lane d interval i's source rows (by key) where it loads them;
        dst_rows(d, j) column j's destination rows on lane d; columns[d] is lane d's Arrays (column_arrays'
        names); chunks[d] lane d's chunk source; finish(d, j, columns) runs at column j's last chunk.
        Returns the lanes' column states."""
        k, loops, plan = self.kernels, self.loops, self.plan
        source_specs = {key: key_specs[key] for key in k.source_keys}
        tables = [tf.constant(c, tf.int32) for c in plan.steps]
        offsets = [tf.constant(o, tf.int32) for o in plan.offsets]
        reached = tf.constant(loops.degree > 0)
        bounds = tf.constant(loops.bounds)
        seeds = loops.seed_bases() if replay is None else replay

        def row(i, states, seeds):
            arrived = self._arrivals(i, load, source_specs)
            new = []
            for d, lane in enumerate(plan.devices):
                with tf.device(lane):
                    new_states, seeds = self._lane_forward(d, i, arrived[d], tables[d], offsets[d], columns[d],
                                                           states[d], chunks[d], dst_rows, finish, reached, bounds,
                                                           seeds, replay)
                new.append(new_states)
            return i + 1, tuple(new), seeds

        states = tuple(c.states for c in columns)
        _, states = tf.while_loop(lambda i, *_: i < self.num_parts, lambda i, states: row(i, states, seeds)[:2],
                                  (tf.constant(0), states), parallel_iterations=loops.parallel,
                                  name="ForwardChunkRows")
        loops.seed_end(seeds)
        return list(states), seeds

    def _lane_forward(self, d, i, src, table, offsets, columns, states, chunks, dst_rows, finish, reached, bounds,
                      seeds, replay):
        k, loops = self.kernels, self.loops

        def step(s, states, seeds):
            fields = table[s]
            j, c, fresh, start, last = (fields[f] for f in (sched.J, sched.K, sched.FRESH, sched.START, sched.LAST))
            loops.seed_chunk(seeds, c)
            cols = columns.with_states(states)
            dst = cols.rows([f"dst:{key}" for key in k.dest_keys], j) if k.dest_keys else {}
            dst = {key[4:]: value for key, value in dst.items()}
            inits = loops.chain_inits(cols, j, fresh, start, bounds_slice(reached, bounds, j))
            loops.accumulate(cols, k.chunk_forward(chunks.chunk(c), src, dst, inits), i, j, fresh)
            before = dict(cols.states)
            states = tf.cond(last > 0, lambda: finish(d, j, cols.with_states(before)).states, lambda: before)
            return s + 1, states, seeds

        if k.dest_keys:  # a column's destination rows arrive with its first chunk
            states = self._dst_on_first(d, i, table, offsets, columns, states, dst_rows)
        _, states = tf.while_loop(lambda s, *_: s < offsets[i + 1], lambda s, states: step(s, states, seeds)[:2],
                                  (offsets[i], states), name=f"Lane{d}ChunkSteps")
        return states, seeds

    def _dst_on_first(self, d, i, table, offsets, columns, states, dst_rows):
        k = self.kernels

        def step(s, states):
            fields = table[s]
            j, fresh = fields[sched.J], fields[sched.FRESH]
            cols = columns.with_states(states)
            before = dict(cols.states)

            def load():
                fresh_cols = cols.with_states(before)
                for key, value in dst_rows(d, j).items():
                    fresh_cols.put(f"dst:{key}", j, value)
                return fresh_cols.states

            return s + 1, tf.cond(fresh > 0, load, lambda: before)

        del k
        _, states = tf.while_loop(lambda s, _: s < offsets[i + 1], step, (offsets[i], states))
        return states

    def backward(self, load, key_specs, dst_rows, columns: list, grads: list, chunks: list, d_rows: Arrays, seeds):
        """Adds d source rows (summed per lane, then over lanes on the host) and d destination rows into d_rows
        (host Blocks by key; states updated); grads[d] holds lane d's d A ("acc{r}") and columns[d] its
        winners. Returns (d_rows states, d weights)."""
        k, loops, plan = self.kernels, self.loops, self.plan
        source_specs = {key: key_specs[key] for key in k.source_keys}
        tables = [tf.constant(c, tf.int32) for c in plan.steps]
        offsets = [tf.constant(o, tf.int32) for o in plan.offsets]
        weights = [tf.zeros(w.shape, w.dtype) for w in k.weights]
        dst_grads = [self._dst_grad_arrays(d, key_specs) for d in range(len(plan.devices))]

        def row(i, d_row_states, dst_states, weights):
            arrived = self._arrivals(i, load, source_specs)
            out = d_rows.with_states(d_row_states)
            partials, new_dst = [], []
            for d, lane in enumerate(plan.devices):
                with tf.device(lane):
                    partial, lane_dst, weights = self._lane_backward(d, i, arrived[d], tables[d], offsets[d],
                                                                     columns[d], grads[d], chunks[d], dst_rows,
                                                                     dst_grads[d], dst_states[d], weights, seeds)
                partials.append(partial)
                new_dst.append(lane_dst)
            for key in k.source_keys:  # each lane's sum of d source rows i, added on the host in lane order
                for d, partial in enumerate(partials):
                    value = partial[key]
                    out.states[key] = tf.cond(tf.shape(value)[0] > 0,
                                              lambda key=key, value=value, s=out.states[key]:
                                              d_rows.blocks[key].add(s, i, value), lambda s=out.states[key]: s)
            return i + 1, out.states, tuple(new_dst), weights

        dst_states = tuple(arrays.states for arrays in dst_grads)
        _, d_row_states, dst_states, weights = tf.while_loop(
            lambda i, *_: i < self.num_parts, row, (tf.constant(0), d_rows.states, dst_states, weights),
            parallel_iterations=self.loops.parallel, name="BackwardChunkRows")
        out = d_rows.with_states(d_row_states)
        for d in range(len(plan.devices)):  # d destination rows, each column's from its owner
            lane_dst = dst_grads[d].with_states(dst_states[d])
            for j in plan.columns(d):
                for key in k.dest_keys:
                    out.add(key, j, lane_dst.get(key, j))
        loops.seed_end(seeds)
        return out.states, weights

    def _dst_grad_arrays(self, d, key_specs):
        lane = self.plan.devices[d]
        blocks = {key: Blocks(f"d_dst:{key}", "device", self.loops.sizes, key_specs[key][0], key_specs[key][1],
                              device=lane) for key in self.kernels.dest_keys}
        with tf.device(lane):
            return Arrays(blocks, {key: b.filled(0) for key, b in blocks.items()})

    def _lane_backward(self, d, i, src, table, offsets, columns, grads, chunks, dst_rows, dst_grads, dst_state,
                       weights, seeds):
        k, loops = self.kernels, self.loops
        d_src = {key: tf.zeros_like(value) for key, value in src.items()}

        def step(s, d_src, dst_state, weights):
            fields = table[s]
            j, c = fields[sched.J], fields[sched.K]
            loops.seed_chunk(seeds, c)
            dst = dst_rows(d, j) if k.dest_keys else {}
            d_a = [grads.get(f"acc{r}", j) for r in range(len(k.reduces))]
            argedges = backward_aux(k, columns, i, j, chunks.index_dtype)
            ds, dd, dw, _ = k.chunk_backward(chunks.chunk(c), src, dst, d_a, argedges)
            d_src = {key: d_src[key] + ds[key] for key in d_src}
            lane_dst = dst_grads.with_states(dst_state)
            for key, value in dd.items():
                lane_dst.add(key, j, value)
            return s + 1, d_src, lane_dst.states, [a + b for a, b in zip(weights, dw)]

        _, d_src, dst_state, weights = tf.while_loop(lambda s, *_: s < offsets[i + 1], step,
                                                     (offsets[i], d_src, dst_state, weights),
                                                     name=f"Lane{d}BackwardChunkSteps")
        return d_src, dst_state, weights


def bounds_slice(values, bounds, part):
    return values[bounds[part]:bounds[part + 1]]


__all__ = ["RingLoops"]
