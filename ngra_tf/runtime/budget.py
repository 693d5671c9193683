"""The memory budget of a streamed plan: the working-set estimate and where blocks live.

`Plan` estimates what one step of a store-backed model holds on the device
tier (NeuGraph §3, ROC's planner), checks it against `memory_budget` and
decides whether the host tier is host memory or a spill directory. Over
several devices the estimate and the budget are per device.
GraphModel.explain() prints it. The estimate is checked by measurement
(ngra_tf.runtime.resident) in tests and in the README's reddit-middle runs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.runtime import memory
from ngra_tf.runtime.resident import format_bytes
from ngra_tf.runtime.stream import GraphShapes, columns_at_once, model_stages, tile_rows

# What the runtime itself adds once training starts, whatever the graph: Keras's fit machinery, TensorFlow's
# eager kernel caches and the loader thread's allocator arena (measured here: 60-72 MiB over a tiny store).
RUNTIME_OVERHEAD = 80 * 2**20
# What the counts below miss, fitted to measured peaks (reddit-middle, GCN, P = 16, hidden 16 and 128: the
# residual tensors are within 5% of their count; a step's tape temporaries and the allocator's pools for
# blocks of many sizes take ~3.2x the step's counted blocks).
RESIDENT_FACTOR = 1.1
STEP_FACTOR = 3.5


class MemoryBudgetError(ValueError):
    """A memory budget too small for the plan's largest step."""


class Plan:
    """The per-step working set of a store-backed model, and where its blocks live (NeuGraph §3, ROC).

    The estimate is the largest of its steps' working sets plus what stays
    resident for the whole step (labels, masks, the logits and their
    gradient, the weights with two optimizer slots and a gradient each):

      hoist    2 input blocks (double-buffered) + its gradient, the hoisted rows and their gradients
      chunk    2 chunks (double-buffered) + 4 source blocks (the row's rows, its gradient sum, a
               chunk's gradient, the next row arriving) + the destination rows and accumulator
               blocks of the columns a device holds at once (stream.columns_at_once: one on one
               device), and one more of each (their gradients, a max/min chain's init)
               + per-edge tensors of an unfused edge stage (messages, gradients, scattered rows)
      column   (edge.softmax layers) every chunk and source block of the column, and per-edge tensors
      vertex   accumulators, the vertex rows, the output and its gradient

    A block is the largest interval's rows. Over several devices (`ring`)
    the estimate is what one device holds, and the budget is each device's.
    The host tier is host memory when the activations the plan keeps (every
    layer's output, and with spill="spill" the hoisted rows and A[j]) fit in
    the budget beside the step, and a spill directory on disk otherwise. A
    budget below the estimate fails at once, naming the smallest budget that
    would work. `shared_rows` is what a forward pass loads of the source rows
    that chunks share (row by row): once per route over several devices.
    """

    def __init__(self, model, store, budget: int | None, spill: str, ring=None):
        self.model, self.store, self.budget, self.spill = model, store, budget, spill
        self.ring = ring
        self.num_devices = 1 if ring is None else len(ring.devices)
        self.steps, self.resident, self.activations, self.shared_rows = self._estimate()
        self.largest = max(self.steps, key=lambda step: step[1])
        self.working_set = int(STEP_FACTOR * self.largest[1] + RESIDENT_FACTOR * self.resident) + RUNTIME_OVERHEAD
        if budget is None or self.working_set + self.activations <= budget:
            self.host = "memory"
        else:
            self.host = "disk"

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
                f"{format_bytes(self.resident)} stays resident and the runtime adds {format_bytes(RUNTIME_OVERHEAD)}; "
                f"the smallest budget that works is {format_bytes(self.working_set)} ({self.working_set} bytes), "
                f"or convert the graph into more chunks (tools/partition_graph.py --memory_budget=...){more_devices}")

    def describe(self) -> list:
        per_device = " per device" if self.num_devices > 1 else ""
        lines = [f"  streamed from {self.store.path} ({self.store.format}), spill policy {self.spill}",
                 f"  working set (estimate){per_device}: {format_bytes(self.working_set)} = {STEP_FACTOR} x largest "
                 f"step ({self.largest[0]}) {format_bytes(self.largest[1])} + {RESIDENT_FACTOR} x resident "
                 f"{format_bytes(self.resident)} + runtime {format_bytes(RUNTIME_OVERHEAD)}"]
        budget = "none" if self.budget is None else format_bytes(self.budget)
        tier = "host memory" if self.host == "memory" else "a spill directory on disk"
        lines.append(f"  memory budget {budget}{per_device}: kept activations {format_bytes(self.activations)} in "
                     f"the host tier, which is {tier}")
        if self.ring is not None:
            lines.append(f"  shared source rows: {format_bytes(self.shared_rows)} per forward pass, loaded from the "
                         f"host {len(self.ring.routes(0))}x (once per route), passed on device to device")
        return lines

    def _estimate(self):
        store, model = self.store, self.model
        sizes = np.diff(store.bounds)
        rows = int(sizes.max()) if sizes.size else 0
        V = store.num_vertices
        edge_row = 0 if store.edge_data_spec is None else int(
            np.prod(store.edge_data_spec[0], dtype=np.int64)) * store.edge_data_spec[1].itemsize
        chunk = memory.largest_chunk_nbytes(store.edge_counts, store.bounds, edge_row)
        max_edges = int(store.edge_counts.max()) if store.edge_counts.size else 0
        column_edges = int(store.edge_counts.sum(axis=0).max()) if store.edge_counts.size else 0
        column_chunks = int((store.edge_counts > 0).sum(axis=0).max()) if store.edge_counts.size else 0
        itemsize = tf.as_dtype(model.compute_dtype).size

        def row_bytes(spec):
            return int(np.prod(spec.shape[1:], dtype=np.int64)) * itemsize

        row_shape, _ = store.vertex_spec("features")
        stages = model_stages(model, tf.TensorSpec([None] + list(row_shape), model.compute_dtype), GraphShapes(store),
                              True, store.num_parts)
        steps, activations, shared_rows = [], 0, 0
        for stage in stages:
            name = f"stage {stage.index}"
            in_row, out_row = row_bytes(stage.input_spec), row_bytes(stage.output_spec)
            if stage.saga is None:
                tile = min(rows, tile_rows(in_row))
                steps.append((f"{name} per-vertex", tile * 3 * (in_row + out_row) + 2 * rows * (in_row + out_row)))
                activations += V * out_row
                continue
            layer_steps, program = stage.steps, stage.steps.program
            graph_in = row_bytes(stage.graph_input_spec)
            probe = layer_steps.hoist(tf.zeros([1] + list(stage.graph_input_spec.shape[1:]), model.compute_dtype))
            key_row = {key: int(np.prod(value.shape[1:], dtype=np.int64)) * itemsize for key, value in probe.items()}
            src = sum(key_row[k] for k in layer_steps.source_keys)
            dst = sum(key_row[k] for k in layer_steps.dest_keys)
            vtx = sum(key_row[k] for k in layer_steps.vertex_keys)
            acc = int(np.prod(layer_steps.feature_shape, dtype=np.int64)) * itemsize * len(program.reduces)
            per_edge = 0
            if program.fused is None:
                per_edge = 3 * (int(np.prod(program.edge.output.shape[1:], dtype=np.int64)) * itemsize + src + dst)
            tile = min(rows, tile_rows(in_row))  # per-vertex work runs a tile at a time
            steps.append((f"{name} hoist", tile * (3 * in_row + 2 * graph_in * max(1, len(stage.prologue)))
                          + 3 * rows * sum(key_row.values())))
            if layer_steps.column_wide:
                steps.append((f"{name} column", column_chunks * (chunk + 2 * rows * src) + column_edges * per_edge
                              + rows * (2 * dst + 4 * acc)))
            else:
                held = columns_at_once(store.num_parts, self.num_devices, layer_steps)
                steps.append((f"{name} chunk", 2 * chunk + rows * (4 * src + (held + 1) * (dst + acc))
                              + max_edges * per_edge))
                shared_rows += V * src
            steps.append((f"{name} vertex", rows * (3 * acc + 2 * vtx + 3 * out_row)))
            activations += V * (out_row + src + dst + vtx + (acc if self.spill == "spill" else 0))
        logits_row = row_bytes(stages[-1].output_spec)
        masks = 4 * sum(1 for name in store.vertex_names if name.endswith("mask"))
        weights = sum(int(np.prod(v.shape)) * itemsize for v in model.trainable_weights)
        resident = V * (4 * logits_row + 8 + masks) + 4 * weights
        return steps, resident, activations, shared_rows
