"""The memory budget of a store-backed model: what the executor's steps and host tier hold.

`Plan(executor, budget)` walks the executor's own stages -- the compiled
kernels and chunk loops it runs (their step tables, the arrays they keep per
column), the tiles of its per-vertex passes, the lanes of a ring -- and
sums what each kind of step holds on the device tier (the memory the budget
bounds: a GPU's, or here the process's RAM) and what the host tier keeps
between steps. The estimate is

    STEP_FACTOR x largest step + RESIDENT_FACTOR x resident + runtime

where the runtime is RUNTIME_BASE plus RUNTIME_PER_GRAPH_LAYER for each graph layer past two

and the host tier is host memory when what it keeps fits beside that, a
spill directory otherwise. A budget below the estimate fails before any work,
naming the smallest that works (`MemoryBudgetError`). Over several devices
the estimate and the budget are per device. GraphModel.explain() prints
`describe()`; the estimate is checked by measurement (ngra_tf.runtime.resident)
in tests and in the README's runs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.store import memory
from ngra_tf.runtime.loops import PARALLEL_STEPS
from ngra_tf.runtime.resident import format_bytes
from ngra_tf.runtime.stages import INPUT

# What the runtime adds once training starts: Keras's fit machinery, TensorFlow's kernel caches and thread pools,
# a margin for the spill files' write buffers, and a model's traced chunk loops (FuncGraphs, their gradient
# functions, instantiated kernels: about 60 functions a graph layer, whatever P). RUNTIME_BASE covers models of up
# to two graph layers (134-144 MiB measured on a tiny store); each further one adds RUNTIME_PER_GRAPH_LAYER,
# fitted to peaks measured at the smallest budget: a residual GCN of 4, 6, 8 and 16 graph layers on reddit-small
# x 0.1 (P=4, ~70 MiB a layer) and of 4 and 16 on reddit-middle (P=16, hidden 64: 1.87 GiB at 16 layers, ~90).
RUNTIME_BASE = 150 * 2**20
RUNTIME_PER_GRAPH_LAYER = 90 * 2**20
# What the counts below miss, fitted to measured peaks: tape temporaries and the allocator's pools for blocks of
# many sizes (STEP_FACTOR), and copies the executor makes of resident tensors (RESIDENT_FACTOR).
RESIDENT_FACTOR = 1.1
STEP_FACTOR = 1.5


class MemoryBudgetError(ValueError):
    """A memory budget too small for the plan's largest step."""


def _bytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtype).size


class Plan:
    """The per-step working sets of an executor over a store, and its host tier (see the module doc).

    steps       [(name, bytes)]: the largest of each kind of step, per stage
    resident    labels, masks, the logits and their gradients, weights with optimizer slots
    kept        what the host tier holds at its fullest (every stage's output, and with spill="spill" the
                hoisted rows and each column's A[j]; in backward, one stage's gradients beside them)
    shared_rows what a forward pass loads of the source rows chunks share: once per route on a ring
    """

    def __init__(self, executor, model, budget: int | None):
        self.executor, self.model, self.budget = executor, model, budget
        self.store = executor.residency.store
        self.num_devices = len(executor.lanes)
        self.steps, self.resident, self.kept, self.shared_rows, self.summary = self._estimate()
        self.largest = max(self.steps, key=lambda step: step[1])
        graph_layers = sum(stage.graph_layer is not None for stage in executor.stages)
        self.runtime = RUNTIME_BASE + RUNTIME_PER_GRAPH_LAYER * max(0, graph_layers - 2)
        self.working_set = int(STEP_FACTOR * self.largest[1] + RESIDENT_FACTOR * self.resident) + self.runtime
        self.host = "memory" if budget is None or self.working_set + self.kept <= budget else "disk"

    def check(self):
        if self.budget is not None and self.working_set > self.budget:
            per_device, more_devices = "", ""
            if self.num_devices > 1:  # chunks do not shrink what a device holds of its columns; devices do
                per_device = f" per device (of {self.num_devices})"
                more_devices = ", or spread it over more devices"
            raise MemoryBudgetError(
                f"memory budget {format_bytes(self.budget)} ({self.budget} bytes){per_device} is too small for "
                f"{self.store.path} at P={self.store.num_parts}: its largest step ({self.largest[0]}) needs "
                f"{format_bytes(self.largest[1])} ({STEP_FACTOR}x that with its temporaries), "
                f"{format_bytes(self.resident)} stays resident and the runtime adds {format_bytes(self.runtime)} "
                f"(its traced loops grow with the graph layers); "
                f"the smallest budget that works is {format_bytes(self.working_set)} ({self.working_set} bytes), "
                f"or convert the graph into more chunks (tools/partition_graph.py --memory_budget=...){more_devices}")

    def describe(self) -> list:
        executor = self.executor
        per_device = " per device" if self.num_devices > 1 else ""
        lines = [f"  streamed from {self.store.path} ({self.store.format}), spill policy {executor.spill}, "
                 f"schedule {executor.schedule}"]
        lines += [f"  {line}" for line in self.summary]
        lines.append(f"  working set (estimate){per_device}: {format_bytes(self.working_set)} = {STEP_FACTOR} x "
                     f"largest step ({self.largest[0]}) {format_bytes(self.largest[1])} + {RESIDENT_FACTOR} x "
                     f"resident {format_bytes(self.resident)} + runtime {format_bytes(self.runtime)}")
        budget = "none" if self.budget is None else format_bytes(self.budget)
        tier = "host memory" if self.host == "memory" else "a spill directory on disk"
        lines.append(f"  memory budget {budget}{per_device}: the host tier keeps up to {format_bytes(self.kept)}, "
                     f"in {tier}")
        if executor.lanes.ring is not None:
            lines.append(f"  shared source rows: {format_bytes(self.shared_rows)} per forward pass, loaded from the "
                         f"host {len(executor.lanes.ring.routes(0))}x (once per route), passed on device to device")
        if executor.residency.selective:
            lines.append(f"  selective scheduling ({executor.residency.selective:g}): "
                         f"{len(executor.residency.selected_chunks())} chunks "
                         f"copy only the source rows they use, {executor.selective_rows_saved} rows left on the host "
                         "per layer and pass")
        return lines

    def _estimate(self):
        executor, store, model = self.executor, self.store, self.model
        sizes = executor.sizes
        rows = int(sizes.max()) if sizes.size else 0
        V = store.num_vertices
        P = store.num_parts
        edge_row = 0 if store.edge_data_spec is None else _bytes(store.edge_data_spec[0], store.edge_data_spec[1])
        chunk = memory.largest_chunk_nbytes(store.edge_counts, store.bounds, edge_row)
        max_edges = int(store.edge_counts.max()) if store.edge_counts.size else 0
        owned = -(-P // self.num_devices)  # the columns a device holds at once over several devices
        in_flight = PARALLEL_STEPS  # a loop's steps in flight (the next one's reads while this one computes)
        steps, summary = [], []
        kept_forward = backward_extra = shared_rows = 0
        row_shape, dtype = executor.residency.input_spec(model.compute_dtype)
        specs = {INPUT: tf.TensorSpec([None] + list(row_shape), dtype)}  # every kept value's rows
        for index, stage in enumerate(executor.stages):
            name = f"stage {index}"
            first = specs[stage.inputs[0]]
            in_row = sum(_bytes(specs[key].shape[1:], specs[key].dtype) for key in stage.inputs)
            tile = min(rows, max(1, executor.tile_bytes // max(1, in_row)))
            graph_spec = tf.TensorSpec([None] + list(stage.row_shape(first.shape[1:])), first.dtype)
            graph_in = _bytes(graph_spec.shape[1:], graph_spec.dtype)
            if stage.graph_layer is None:
                out_row = graph_in
                steps.append((f"{name} per-vertex", in_flight * tile * (2 * in_row + 2 * out_row)
                              + 3 * rows * out_row))
                kept_forward += V * out_row
                backward_extra = max(backward_extra, V * (in_row + out_row))
                specs[index] = graph_spec
                continue
            kernels, loops = executor.compiled(index, graph_spec, True)
            keys = {key: _bytes(key_shape, key_dtype) for key, (key_shape, key_dtype) in kernels.key_specs().items()}
            src = sum(keys[k] for k in kernels.source_keys)
            dst = sum(keys[k] for k in kernels.dest_keys)
            vtx = sum(keys[k] for k in kernels.vertex_keys)
            column = sum(b.row_bytes for b in loops.column_arrays("device").values())  # A, winners, statistics
            acc = _bytes(kernels.feature_shape, kernels.dtype) * len(kernels.reduces)
            out_spec = kernels.program.vertex.output
            out_row = _bytes(out_spec.shape[1:], out_spec.dtype)
            per_edge = 0
            if kernels.program.fused is None:  # messages, their gradient, scattered frontiers
                message = _bytes(kernels.program.edge.output.shape[1:], kernels.dtype)
                per_edge = 3 * (message + src + dst)
            steps.append((f"{name} hoist", in_flight * tile * (2 * in_row + 2 * graph_in * max(1, len(stage.prologue_layers)))
                          + 3 * rows * sum(keys.values())))
            held = 1 if self.num_devices == 1 or kernels.column_wide else owned
            chunk_step = (in_flight * (2 * chunk + 2 * rows * src) + rows * (held + 1) * (dst + 2 * column)
                          + max_edges * per_edge)
            steps.append((f"{name} chunk", chunk_step))
            steps.append((f"{name} vertex", rows * (3 * acc + 2 * vtx + 3 * out_row)))
            forward = loops.forward_steps.shape[0]
            summary.append(f"{name} ({kernels.name}): {forward} forward chunk steps, "
                           f"{loops.backward_steps.shape[0]} backward; hoisted rows {format_bytes(V * src)} "
                           f"shared, {format_bytes(V * (dst + vtx))} per column")
            kept_forward += V * out_row
            if executor.spill == "spill":
                kept_forward += V * (sum(keys.values()) + column)
            backward_extra = max(backward_extra, V * (2 * out_row + acc + sum(keys.values()) + graph_in + column))
            shared_rows += V * src
            specs[index] = tf.TensorSpec([None] + list(out_spec.shape[1:]), out_spec.dtype)
        logits_row = _bytes(specs[len(executor.stages) - 1].shape[1:], specs[len(executor.stages) - 1].dtype)
        masks = 4 * sum(1 for n in store.vertex_names if n.endswith("mask"))
        weights = sum(int(np.prod(v.shape)) * tf.as_dtype(model.compute_dtype).size for v in model.trainable_weights)
        # Logits-sized tensors alive at once around the loss: the output in interval order and in the user's,
        # the loss's softmax and log-softmax and their gradients, d output in both orders (8; measured on
        # reddit-middle, where they dominate: 4 undercounted its peak by 32%).
        resident = V * (8 * logits_row + 8 + masks) + 4 * weights
        gradients = V * _live_gradients(executor.stages, specs)
        return steps, resident, kept_forward + backward_extra + gradients, shared_rows, summary


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


__all__ = ["MemoryBudgetError", "Plan", "RESIDENT_FACTOR", "RUNTIME_BASE", "RUNTIME_PER_GRAPH_LAYER", "STEP_FACTOR"]
