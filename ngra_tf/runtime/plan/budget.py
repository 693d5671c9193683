"""The memory budget of a store-backed model: what its steps and its host tier hold. NumPy only.

`Budget` walks a model's stages -- for each graph layer its compiled kernels
(the rows they read, the arrays they keep per column) and its plan (step
tables), the tiles of its per-vertex passes, the lanes of a ring -- and sums
what each kind of step holds on the device tier (the memory the budget
bounds: a GPU's, or here the process's RAM) and what the host tier keeps
between steps. The estimate is

    STEP_FACTOR x largest step + RESIDENT_FACTOR x resident + runtime

where the runtime is RUNTIME_BASE, plus RUNTIME_PER_SIGNATURE for each
stage signature past two (what is compiled grows with distinct layers, not
with depth: ngra_tf.runtime.shared), RUNTIME_PER_GRAPH_LAYER for each
graph layer (its own small part of the traced step) and RUNTIME_SPARSE_INPUT
when the features are CSR. A CSR feature row counts its entries, not its
width: row tiles, the hoist step and the host tier are sized by them. The host tier is host
memory when what it keeps fits beside that, a spill directory otherwise. A
budget below the estimate fails before any work, naming the smallest that
works (`MemoryBudgetError`). Over several devices the estimate and the
budget are per device. GraphModel.explain() prints `describe()`; the
estimate is checked by measurement (ngra_tf.runtime.resident) in tests and
in the runs of docs/results/streaming.md.

It is the one estimate of a step: over a store's `Shape` (one not written
yet) it is what the converter picks P by (GraphModel.memory_plan(shape),
ngra_tf.recipes.TrainingMemory), so a store converted for a budget trains
under it. Only the step tables a description or the chunk cache reads are
made (LayerPlan makes them when asked), so an estimate reads no chunk.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.runtime.plan.cache import CachePlan, training_accesses
from ngra_tf.runtime.resident import format_bytes
from ngra_tf.runtime.stages import INPUT
from ngra_tf.store import memory

# What the runtime adds once training starts: Keras's fit machinery, TensorFlow's kernel caches and thread
# pools, a margin for the spill files' write buffers, and the traced functions of the model's stages.
# RUNTIME_BASE covers two stage signatures; each further one adds RUNTIME_PER_SIGNATURE and each graph layer
# RUNTIME_PER_GRAPH_LAYER (its calls, variables and optimizer slots), fitted to peaks measured at the smallest
# budget on reddit-small x 0.1, P = 4 (GCN 151 MiB of runtime, residual GCN of 6 / 16 graph layers 255 / 307,
# APPNP K = 10 219, GAT 172; docs/results/streaming.md).
RUNTIME_BASE = 150 * 2**20
RUNTIME_PER_SIGNATURE = 40 * 2**20
RUNTIME_PER_GRAPH_LAYER = 6 * 2**20
# A model reading CSR features traces sparse dropout and sparse-dense products beside the dense steps: fitted to
# the peaks of the recipe's GCN from a store of bag-of-words features (tools/bench_sparse.py, store-sparse: 207 MiB
# at scale 0.1 and 221 MiB at 1, P = 4, validation every epoch).
RUNTIME_SPARSE_INPUT = 32 * 2**20
# What the counts below miss, fitted to measured peaks: tape temporaries and the allocator's pools for blocks of
# many sizes (STEP_FACTOR), and copies the executor makes of resident tensors (RESIDENT_FACTOR).
RESIDENT_FACTOR = 1.1
STEP_FACTOR = 1.5
# Logits-sized tensors alive at once around the loss: the output in the user's order (Keras keeps it for the
# metrics), the loss's gradient, d output in interval order and in the host tier's blocks, and one in flight.
# Fitted to peaks at the smallest budget: GCN (hidden 16) on reddit-middle (233,000 x 41 logits, peak 380 MiB
# above the baseline against 398 MiB estimated) and on 2.2M vertices x 50 classes with 22M edges (2.3 GiB
# against 3.1 GiB: a step's temporaries count 1.5x there); 8 overcounted the latter by 2 GiB.
LOGITS_COPIES = 5
# What a byte of cached chunks and feature tiles costs once they are tensors held between steps: on reddit-middle
# (GCN, P = 16) 120 MiB more cache raised the peak by 174 MiB, and 110 MiB of it by about 200 MiB over the peak
# without a cache.
CACHE_FACTOR = 2
PARALLEL_STEPS = 2  # a loop's steps in flight (ngra_tf.runtime.loops): the next one's reads while this one computes


class MemoryBudgetError(ValueError):
    """A memory budget too small for the plan's largest step."""


def _bytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtype).size


class Budget:
    """The per-step working sets of a store-backed model, and its host tier (see the module doc).

    `layer(index, spec)` gives stage `index`'s graph layer compiled for training on rows like `spec`:
    (LayerKernels, LayerPlan). `signatures` is the number of distinct stage signatures; `devices` the lanes;
    `copies` whether moving a block to a lane is a copy (not when the lane is the host).

    steps       [(name, bytes)]: the largest of each kind of step, per stage
    resident    labels, masks, the logits and their gradients, weights with optimizer slots
    kept        what the host tier holds at its fullest (every stage's output, and with spill="spill" the
                hoisted rows and each column's A[j]; in backward, one stage's gradients beside them)
    shared_rows what a forward pass loads of the source rows chunks share: once per route on a ring
    """

    def __init__(self, stages, store, layer, input_spec, *, spill, schedule, tile_bytes, weights_bytes, ring=None,
                 copies=True, cache=True, budget=None, features="features"):
        self.stages, self.store, self.budget = stages, store, budget
        self.spill, self.schedule, self.tile_bytes = spill, schedule, int(tile_bytes)
        self.ring, self.num_devices, self.copies = ring, 1 if ring is None else len(ring.order), bool(copies)
        self.signatures = set()
        self.layers = {}  # graph stage index -> its LayerPlan (for training)
        self.tiles = {}  # stage index -> the row tiles it reads of the store's features (tiles_of)
        self.features = features
        self.steps, self.resident, self.kept, self.shared_rows, self.summary = self._estimate(layer, input_spec,
                                                                                             weights_bytes)
        self.largest = max(self.steps, key=lambda step: step[1])
        graph_layers = sum(stage.graph_layer is not None for stage in stages)
        self.runtime = (RUNTIME_BASE + RUNTIME_PER_SIGNATURE * max(0, len(self.signatures) - 2)
                        + RUNTIME_PER_GRAPH_LAYER * graph_layers
                        + (RUNTIME_SPARSE_INPUT if store.is_sparse(features) else 0))
        self.working_set = int(STEP_FACTOR * self.largest[1] + RESIDENT_FACTOR * self.resident) + self.runtime
        self.host = "memory" if budget is None or self.working_set + self.kept <= budget else "disk"
        # The chunk cache gets what the budget leaves (none without a budget, or over several devices).
        self.cache, self.cache_offsets = None, {}
        if cache and budget is not None and self.num_devices == 1 and self.layers:
            room = budget - self.working_set - (self.kept if self.host == "memory" else 0)
            P2 = store.num_parts ** 2
            items, self.cache_offsets = training_accesses(stages, self.layers, spill,
                                                          {index: len(t) for index, t in self.tiles.items()}, P2)
            sizes = dict(self.chunk_bytes)
            stored = store.row_nbytes(features)
            for tiles in self.tiles.values():
                sizes.update({P2 + t: (stop - start) * stored for t, (_, start, stop) in enumerate(tiles)})
            self.cache = CachePlan(items, sizes, max(0, int(room / CACHE_FACTOR)))

    def check(self):
        if self.budget is not None and self.working_set > self.budget:
            per_device, more_devices = "", ""
            # Chunks shrink only the step: what stays resident (the logits, the weights) and the runtime do not.
            more = ("or convert the graph into more chunks (tools/partition_graph.py --memory_budget=...: it picks P "
                    "by this estimate)" if int(RESIDENT_FACTOR * self.resident) + self.runtime < self.budget else
                    "and more chunks cannot lower it below what stays resident and the runtime")
            if self.num_devices > 1:  # chunks do not shrink what a device holds of its columns; devices do
                per_device = f" per device (of {self.num_devices})"
                more_devices = ", or spread it over more devices"
            raise MemoryBudgetError(
                f"memory budget {format_bytes(self.budget)} ({self.budget} bytes){per_device} is too small for "
                f"{self.store.path} at P={self.store.num_parts}: its largest step ({self.largest[0]}) needs "
                f"{format_bytes(self.largest[1])} ({STEP_FACTOR}x that with its temporaries), "
                f"{format_bytes(self.resident)} stays resident and the runtime adds {format_bytes(self.runtime)}; "
                f"the smallest budget that works is {format_bytes(self.working_set)} ({self.working_set} bytes), "
                f"{more}{more_devices}")

    def formula(self) -> str:
        """The working set and what it sums: 'X = 1.5 x largest step (...) Y + 1.1 x resident Z + runtime W'."""
        return (f"{format_bytes(self.working_set)} = {STEP_FACTOR} x largest step ({self.largest[0]}) "
                f"{format_bytes(self.largest[1])} + {RESIDENT_FACTOR} x resident {format_bytes(self.resident)} + "
                f"runtime {format_bytes(self.runtime)}")

    def describe(self) -> list:
        per_device = " per device" if self.num_devices > 1 else ""
        lines = [f"  streamed from {self.store.path} ({self.store.format}), spill policy {self.spill}, "
                 f"schedule {self.schedule}"]
        lines += [f"  {line() if callable(line) else line}" for line in self.summary]
        lines.append(f"  working set (estimate){per_device}: {self.formula()}")
        budget = "none" if self.budget is None else format_bytes(self.budget)
        tier = "host memory" if self.host == "memory" else "a spill directory on disk"
        lines.append(f"  memory budget {budget}{per_device}: the host tier keeps up to {format_bytes(self.kept)}, "
                     f"in {tier}")
        store = sum(self.chunk_bytes.values())
        if self.cache is not None:
            features = sum(self.cache.nbytes.values()) - store
            lines.append(f"  chunk cache {format_bytes(self.cache.capacity)}: keeps "
                         f"{format_bytes(self.cache.cached_bytes)} between steps, of the chunks' {format_bytes(store)} "
                         f"and the feature tiles' {format_bytes(features)}; a training step reads "
                         f"{format_bytes(self.cache.reads_steady)} of them (the first "
                         f"{format_bytes(self.cache.reads_first)}), the least its schedule needs at this budget")
        elif self.layers:
            why = "over several devices" if self.num_devices > 1 else "no budget" if self.budget is None else "off"
            lines.append(f"  chunk cache: none ({why}); a training step reads every chunk at every pass")
        lines.append("  copies: none (the device is the host: chunks and rows are read, and kept, where the kernels "
                     "read them)" if not self.copies else
                     "  copies: every block moved between the host and a device is a counted copy (copy_h2d / d2h)")
        if self.ring is not None:
            lines.append(f"  shared source rows: {format_bytes(self.shared_rows)} per forward pass, loaded from the "
                         f"host {len(self.ring.routes(0))}x (once per route), passed on device to device")
        return lines

    def _estimate(self, layer, input_spec, weights_bytes):
        store, stages = self.store, self.stages
        sizes = np.diff(np.asarray(store.bounds, np.int64))
        rows = int(sizes.max()) if sizes.size else 0
        V, P = store.num_vertices, store.num_parts
        edge_row = 0 if store.edge_data_spec is None else _bytes(store.edge_data_spec[0], store.edge_data_spec[1])
        chunk = memory.largest_chunk_nbytes(store.edge_counts, store.bounds, edge_row)
        # What reading a chunk loads (its index arrays and edge data; a store also keeps its edge ids).
        self.chunk_bytes = {i * P + j: memory.chunk_nbytes(int(store.edge_counts[i, j]), int(sizes[i]), int(sizes[j]),
                                                           edge_row) - 8 * int(store.edge_counts[i, j])
                            for i in range(P) for j in range(P)}
        max_edges = int(store.edge_counts.max()) if store.edge_counts.size else 0
        owned = -(-P // self.num_devices)  # the columns a device holds at once over several devices
        moved = 2 if self.copies else 1  # a block read on the host, and its copy on the device (when it is one)
        steps, summary = [], []
        kept_forward = backward_extra = shared_rows = 0
        row_shape, dtype = input_spec
        specs = {INPUT: tf.TensorSpec([None] + list(row_shape), dtype)}  # every kept value's rows
        sparse = store.is_sparse(self.features)
        row_nbytes = {INPUT: store.row_nbytes(self.features)}  # (CSR features: their entries', not a dense row's)
        if sparse:
            entries, width = int(store.nnz(self.features).sum()), int(np.prod(row_shape))
            summary.append(f"features {self.features!r}: CSR, {entries} entries ({entries / max(1, V * width):.2%} of "
                           f"{V} x {width}), read as tf.SparseTensor tiles of up to "
                           f"{min(rows, max(1, self.tile_bytes // row_nbytes[INPUT]))} rows, uncached")
        for index, stage in enumerate(stages):
            name = f"stage {index}"
            first = specs[stage.inputs[0]]
            in_row = sum(row_nbytes.get(key, _bytes(specs[key].shape[1:], specs[key].dtype)) for key in stage.inputs)
            tile = min(rows, max(1, self.tile_bytes // max(1, in_row)))
            if INPUT in stage.inputs and not sparse:  # (CSR tiles are read uncached: the cache plan has none)
                self.tiles[index] = tiles_of(sizes, in_row, self.tile_bytes)
            graph_spec = tf.TensorSpec([None] + list(stage.row_shape(first.shape[1:])), first.dtype)
            graph_in = _bytes(graph_spec.shape[1:], graph_spec.dtype)
            if sparse and stage.inputs == (INPUT,) and graph_spec.shape[1:] == first.shape[1:]:
                graph_in = in_row  # a prologue that keeps the features' width keeps them sparse (Dropout)
            if stage.graph_layer is None:
                out_row = graph_in
                steps.append((f"{name} per-vertex", PARALLEL_STEPS * tile * (moved * in_row + 2 * out_row)
                              + 3 * rows * out_row))
                kept_forward += V * out_row
                backward_extra = max(backward_extra, V * (in_row + out_row))
                specs[index] = graph_spec
                self.signatures.add(("vertex", len(stage.prologue_layers), len(stage.inputs), in_row, out_row))
                continue
            kernels, plan = layer(index, graph_spec)
            self.layers[index] = plan
            self.signatures.add((kernels.signature, len(stage.prologue_layers), len(stage.inputs)))
            keys = {key: _bytes(key_shape, key_dtype) for key, (key_shape, key_dtype) in kernels.key_specs().items()}
            src = sum(keys[k] for k in kernels.source_keys)
            dst = sum(keys[k] for k in kernels.dest_keys)
            vtx = sum(keys[k] for k in kernels.vertex_keys)
            column = sum(_bytes(shape, dtype) for shape, dtype in plan.column_specs.values())  # A, winners, stats
            acc = _bytes(kernels.feature_shape, kernels.dtype) * len(kernels.reduces)
            out_spec = kernels.program.vertex.output
            out_row = _bytes(out_spec.shape[1:], out_spec.dtype)
            per_edge = 0
            if kernels.program.fused is None:  # messages, their gradient, scattered frontiers
                message = _bytes(kernels.program.edge.output.shape[1:], kernels.dtype)
                per_edge = 3 * (message + src + dst)
            prologue = max(1, len(stage.prologue_layers))
            steps.append((f"{name} hoist", PARALLEL_STEPS * tile * (moved * in_row + 2 * graph_in * prologue)
                          + 3 * rows * sum(keys.values())))
            held = 1 if self.num_devices == 1 or kernels.column_wide else owned
            chunk_step = (PARALLEL_STEPS * (moved * chunk + moved * rows * src) + rows * (held + 1) * (dst + 2 * column)
                          + max_edges * per_edge)
            steps.append((f"{name} chunk", chunk_step))
            steps.append((f"{name} vertex", rows * (3 * acc + 2 * vtx + 3 * out_row)))
            summary.append(lambda name=name, kernels=kernels, plan=plan, shared=V * src, column=V * (dst + vtx): (
                f"{name} ({kernels.name}): {plan.forward_steps.shape[0]} forward chunk steps, "
                f"{plan.backward_steps.shape[0]} backward; hoisted rows {format_bytes(shared)} shared, "
                f"{format_bytes(column)} per column"))  # (the step tables are made when described)
            kept_forward += V * out_row
            if self.spill == "spill":
                kept_forward += V * (sum(keys.values()) + column)
            backward_extra = max(backward_extra, V * (2 * out_row + acc + sum(keys.values()) + graph_in + column))
            shared_rows += V * src
            specs[index] = tf.TensorSpec([None] + list(out_spec.shape[1:]), out_spec.dtype)
        logits_row = _bytes(specs[len(stages) - 1].shape[1:], specs[len(stages) - 1].dtype)
        masks = 4 * sum(1 for n in store.vertex_names if n.endswith("mask"))
        resident = V * (LOGITS_COPIES * logits_row + 8 + masks) + 4 * weights_bytes
        gradients = V * _live_gradients(stages, specs)
        return steps, resident, kept_forward + backward_extra + gradients, shared_rows, summary


def tiles_of(sizes, row_bytes: int, tile_bytes: int) -> list:
    """The row tiles a per-vertex pass takes its input in: (interval, first row, stop row), at most tile_bytes
    of input rows each, every interval at least one (the executor's BlockedStage walks the same tiles)."""
    per_tile = max(1, int(tile_bytes) // max(1, int(row_bytes)))
    return [(p, start, min(int(size), start + per_tile))
            for p, size in enumerate(sizes) for start in range(0, max(int(size), 1), per_tile)]


def _live_gradients(stages, specs) -> int:
    """The most row bytes of kept values' gradients alive at once in backward: a value read by several stages
    holds its gradient from its last reader's backward to its own stage's (the store's features have none)."""
    live, most = {}, 0
    for index in reversed(range(len(stages))):
        live.pop(index, None)
        for key in stages[index].inputs:
            if key != INPUT:
                live[key] = _bytes(specs[key].shape[1:], specs[key].dtype)
        most = max(most, sum(live.values()))
    return most


__all__ = ["Budget", "CACHE_FACTOR", "MemoryBudgetError", "RESIDENT_FACTOR", "RUNTIME_BASE",
           "RUNTIME_PER_GRAPH_LAYER", "RUNTIME_PER_SIGNATURE", "STEP_FACTOR", "tiles_of"]
