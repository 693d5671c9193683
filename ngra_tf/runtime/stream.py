"""Training and inference from a chunk store, one interval or chunk at a time (NGra §3, Fig. 4; §4.2 over devices).

A streamed plan runs the same compiled pieces as an in-memory one
(ngra_tf.compiler.plan.LayerSteps), but keeps only one step's data on the
device tier; everything else lives in the host tier (tiers.HostTier) or in
the store, and moves with copy_h2d / copy_d2h. Per SAGA layer:

  forward   H  hoist:   for each interval i: load H[i], hoist it, put the rows chunks read to the host
            C  columns: for each wave of columns: for each source interval i: its rows travel to the
                        owners of the wave's columns; each reduces every C[i][j] of its columns into
                        A[j] in place; then per column ApplyVertex(A[j]) -> put out[j]
  backward  V  vertex:  for each column j: A[j] (reloaded, or recomputed from its chunks),
                        tape over ApplyVertex -> dA[j], d vertex rows, d weights
            E  edges:   for each source interval i (last first): its rows travel as in the forward;
                        for each C[i][j]: tape over the chunk's kernel -> d source rows (summed
                        per device, then on the host), d destination rows (added on the host)
            H  hoist:   for each interval i: tape over hoist(H[i]) -> dH[i]

Over several devices (a DeviceRing, ngra_tf.parallel) the work is split by
destination interval: column j's accumulators, chunk steps and ApplyVertex
run on ring.owner(j), its chunks are uploaded there, and only vertex rows
are shared: interval i's source rows enter the devices once per route of
the placement (the route's loader uploads them from the host tier, each
next device copies them from the one before with copy_d2d, and a route
ends at the last device that needs them). A device holds the rows of one
interval at a time (and the next one arriving), and drops them once its
chunks used them and it passed them on. So that every interval enters
once per pass, a device holds the accumulators (and destination rows) of
all its columns at once: the C phase is one wave of all columns, row by
row. On one device that would hold all P accumulators, V rows wide, which
is what streaming exists to avoid; there each wave is one column (column
by column, each interval's rows loaded once per column). Both are the same
loop over waves (`columns_at_once`), and row-major or column-major, every
column reduces its chunks in source order, so results equal one device's.
Layers whose apply_edge calls edge.softmax normalise over a whole column,
so their steps are columns (all of a column's chunks and source rows),
taken one at a time per device, the rows loaded from the host tier by the
column's owner (not shared). Per-vertex work (H, the per-vertex layers)
runs on a loader of the interval's routes (they take intervals in turn);
V (and a recompute of A[j]) on the column's owner, loading what it needs
from the host tier.

Backward never holds the forward's tensors: each tape spans one step and is
fed what that step needs. What it needs from the forward is either *spilled*
(the hoisted rows and each column's A[j] stay in the host tier until
backward reloads them) or *recomputed* (hoisted rows from H[i], A[j] from
its chunks) -- `spill="spill"` or `"recompute"`. Max/min chains also keep
the value each chunk reduced into, since their gradients route by it.
Per-vertex layers (Dense, Dropout, ...) run interval by interval. The
logits are the one whole-graph tensor: the loss and metrics are Keras's own,
computed on all of them (V x classes).

Random ops (dropout) draw the same numbers when a step is recomputed:
every step's seed-generator state is recorded in the forward and restored
for its backward.

With `overlap`, a loader thread reads the next step's chunk and rows from
disk while the current step computes (double buffering).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from ngra_tf.compiler.plan import LayerSteps, column_sources
from ngra_tf.graph.adjacency import Adjacency, AdjacencyTensors
from ngra_tf.graph.partition import Chunk
from ngra_tf.layers.saga import SAGALayer
from ngra_tf.ops.copy import copy_d2d, copy_d2h
from ngra_tf.parallel.ring import DeviceRing
from ngra_tf.runtime.store import INDEX_ARRAYS
from ngra_tf.runtime.tiers import HostTier, device_tier, upload

SPILL_POLICIES = ("recompute", "spill")
TILE_BYTES = 4 * 2**20  # rows of input a per-vertex step takes at a time


class Streamer:
    """Runs a GraphModel's layers over a store, step by step, within the device tier.

    `host` is "memory" or "disk" (a spill directory: `spill_dir`, or a
    temporary one). `ring` (a DeviceRing) spreads the steps over its
    devices; None: all run on `device`. Statistics of the last run are in
    `stats`.
    """

    def __init__(self, model, store, spill: str = "spill", host: str = "memory", spill_dir=None,
                 overlap: bool = True, selective: float = 0.0, device: str | None = None,
                 tile_bytes: int = TILE_BYTES, ring: DeviceRing | None = None):
        if spill not in SPILL_POLICIES:
            raise ValueError(f"spill must be one of {', '.join(SPILL_POLICIES)}; got {spill!r}")
        self.model, self.store = model, store
        self.partition = store.partition()
        self.num_parts = store.num_parts
        self.spill, self.overlap, self.tile_bytes = spill, bool(overlap), int(tile_bytes)
        self.selective = float(selective or 0.0)
        self.device = device or device_tier()  # where what no step places runs (the logits, the loss)
        self.ring = ring or DeviceRing([self.device])
        self.host = HostTier(host, spill_dir)
        self.features = "features"
        self.graph_spec = GraphShapes(store)
        self._seeds = [v for v in model.variables if "seed_generator_state" in v.path]
        self._seed_marks = {}
        self._stage_cache = {}  # (training, input spec) -> model_stages
        self.stats = collections.Counter()

    # ---- loads ----

    def _read_chunk(self, i, j):
        arrays = self.store.chunk_arrays(i, j, names=INDEX_ARRAYS + (("edge_data",) if self.store.edge_data_spec
                                                                      else ()))
        return (i, j), arrays

    def _read_stop(self, l, stop, keys, selective=0.0):
        """A row stop's reads: its chunk (None where the device only passes the rows on) and, at the route's
        loader, the source rows (None elsewhere).

        Selective scheduling (NeuGraph), where the rows serve this chunk
        alone: when the chunk's edges leave from fewer than `selective` of
        interval i's vertices, only those rows are copied, and the chunk is
        renumbered to them (its CSR drops the empty rows; CSC source ids are
        remapped). The kernels see a smaller interval and give the same result.
        """
        chunk = None if stop.j is None else self._read_chunk(stop.i, stop.j)
        rows = None
        if stop.arrival == "h2d":
            rows = {name: self._read_block(f"L{l}:{name}", stop.i) for name in keys}
        if not (selective and stop.alone):
            return chunk, rows
        (i, j), arrays = chunk
        out_degree = np.diff(arrays["csr_indptr"])
        used = np.flatnonzero(out_degree)
        if len(out_degree) and len(used) < selective * len(out_degree):
            compact = np.zeros(len(out_degree), arrays["csc_src"].dtype)
            compact[used] = np.arange(len(used), dtype=compact.dtype)
            arrays = dict(arrays, csc_src=compact[arrays["csc_src"]],
                          csr_indptr=np.append(arrays["csr_indptr"][used], arrays["csr_indptr"][-1]))
            rows = {name: np.asarray(block)[used] for name, block in rows.items()}
            self.stats["selective_rows_saved"] += len(out_degree) - len(used)
            return ((i, j), arrays, len(used)), rows
        return chunk, rows

    def _upload_chunk(self, read) -> Chunk:
        (i, j), arrays, *num_src = read
        tensors = {name: upload(array, f"chunk_{i}_{j}_{name}") for name, array in arrays.items()}
        # The adjacency's arrays are views of the uploaded tensors (one copy on a CPU device tier).
        views = {name: t.numpy() if tf.DeviceSpec.from_string(t.device).device_type == "CPU" else arrays[name]
                 for name, t in tensors.items()}
        bounds = self.partition.bounds
        adjacency = Adjacency(num_src[0] if num_src else bounds[i + 1] - bounds[i], bounds[j + 1] - bounds[j],
                              *(views[name] for name in INDEX_ARRAYS))
        adjacency._tensors = AdjacencyTensors(*(tensors[name] for name in INDEX_ARRAYS))
        chunk = Chunk(i, j, adjacency, None, views.get("edge_data"))
        if "edge_data" in tensors:
            object.__setattr__(chunk, "_edge_data_tensor", tensors["edge_data"])
        return chunk

    def _read_block(self, key, part, rows=None):
        """Rows of interval `part` of `key` (rows=(start, stop): those only): a store array ("store:name")
        or a host-tier block."""
        if key.startswith("store:"):
            return self.store.vertex_rows(key[6:], part, *(rows or ()))
        return self.host.read(f"{key}@{part}", rows)

    def _tiles(self, key):
        """(part, start, stop): every interval's rows, a tile at a time (per-vertex work is bounded by a tile)."""
        if key.startswith("store:"):
            row_shape, dtype = self.store.vertex_spec(key[6:])
        else:
            row_shape, dtype = self.host.spec(f"{key}@0")
        tile = tile_rows(int(np.prod(row_shape, dtype=np.int64)) * np.dtype(dtype).itemsize, self.tile_bytes)
        for part in range(self.num_parts):
            count = int(self.partition.bounds[part + 1] - self.partition.bounds[part])
            for start in range(0, max(count, 1), tile):
                yield part, start, min(count, start + tile)

    def _map_vertices(self, stage, key, fn, prefix, mark):
        """host[prefix + name @ i] = fn(rows of key, interval i)[name] for every interval, tile by tile."""
        pieces = {}
        for (i, start, stop), box in self._ahead(self._tiles(key), lambda t: self._read_block(key, t[0], t[1:])):
            unit = (stage.index, "hoist", i, start)
            if mark:
                self._mark(unit)
            with tf.device(self._loader(i)):
                with self._replaying(unit):
                    for name, value in fn(self._load_block(key, i, box.pop())).items():
                        pieces.setdefault(name, []).append(value)
                if stop == self.partition.bounds[i + 1] - self.partition.bounds[i]:
                    for name, values in pieces.items():
                        self.host.put(f"{prefix}{name}@{i}", values[0] if len(values) == 1 else tf.concat(values, 0))
                    pieces = {}

    def _map_vertices_backward(self, stage, key, fn, d_prefix, d_in, weights, grads):
        """Backward of _map_vertices: d rows of key (to host[d_in @ i], unless d_in is None) and d weights."""
        d_outputs, d_rows = {}, []
        for (i, start, stop), box in self._ahead(self._tiles(key), lambda t: self._read_block(key, t[0], t[1:])):
            with tf.device(self._loader(i)):
                x = self._load_block(key, i, box.pop())
                with self._replaying((stage.index, "hoist", i, start)), tf.GradientTape() as tape:
                    tape.watch(x)
                    outputs = fn(x)
                if start == 0:
                    d_outputs = {name: self.host.load(f"{d_prefix}{name}@{i}")
                                 for name in outputs if f"{d_prefix}{name}@{i}" in self.host}
                names = list(outputs)
                targets = [outputs[n] for n in names]
                d_targets = [d_outputs[n][start:stop] if n in d_outputs else tf.zeros_like(outputs[n]) for n in names]
                sources = ([x] if d_in is not None else []) + weights
                result = gradients(tape, targets, sources, d_targets)
                _add(grads, weights, result[len(sources) - len(weights):])
                if d_in is not None:
                    d_rows.append(result[0])
                    if stop == self.partition.bounds[i + 1] - self.partition.bounds[i]:
                        self.host.put(f"{d_in}@{i}", d_rows[0] if len(d_rows) == 1 else tf.concat(d_rows, 0))
                        d_rows = []

    def _load_block(self, key, part, read=None):
        host = self._read_block(key, part) if read is None else read
        value = upload(host, f"{key.split(':')[-1]}_{part}")
        if key.startswith("store:") and value.dtype.is_floating and value.dtype != self.model.compute_dtype:
            value = tf.cast(value, self.model.compute_dtype)
        return value

    def _rows(self, l, names, part, reads=None) -> dict:
        """Layer l's hoisted rows `names` of interval `part` on the current device (reads: from _read_block)."""
        return {name: self._load_block(f"L{l}:{name}", part, None if reads is None else reads[name])
                for name in names}

    def _loader(self, part):
        """The device that runs interval `part`'s per-vertex work: a loader of its routes, taken in turn."""
        routes = self.ring.routes(part)
        return routes[part % len(routes)][0]

    def _waves(self, steps):
        """The columns whose accumulators are live together, in order (see columns_at_once)."""
        width = len(self.ring.devices) * columns_at_once(self.num_parts, len(self.ring.devices), steps)
        return [range(start, min(self.num_parts, start + width)) for start in range(0, self.num_parts, width)]

    def _row_stops(self, i, columns) -> list:
        """Where interval i's source rows go for the chunks C[i][j] of `columns`: stops in route order.

        Each route carries the rows up to its last device that owns such a
        chunk; a device before it with none of its own only passes them on.
        """
        owned = {}
        for j in columns:
            if self.partition.edge_counts[i, j]:
                owned.setdefault(self.ring.owner(j), []).append(j)
        stops = []
        for route in self.ring.routes(i):
            used = [k for k, device in enumerate(route) if device in owned]
            if not used:
                continue
            route = route[:used[-1] + 1]
            alone = len(route) == 1 and len(owned[route[0]]) == 1
            for k, device in enumerate(route):
                for n, j in enumerate(owned.get(device, [None])):
                    arrival = None if n else "d2d" if k else "h2d"
                    stops.append(_Stop(i, j, device, arrival, alone))
        return stops

    def _arrive(self, stop, rows, load):
        """Interval stop.i's source rows on stop.device: load() there (the route's loader), copied from the
        device before on the route (whose copy is then dropped), or the rows already there."""
        if stop.arrival is None:
            return rows
        with tf.device(stop.device):
            if stop.arrival == "h2d":
                return load()
            return {name: copy_d2d(value) for name, value in rows.items()}

    def _put_sum(self, key, partials):
        """host[key] = the sum of per-device partial sums, each copied off its device and added on the host."""
        if len(partials) == 1:
            self.host.put(key, partials[0])
            return
        copies = []
        for partial in partials:
            with tf.device(partial.device):
                copies.append(copy_d2h(partial))
        with tf.device(self.ring.host):
            self.host.put(key, tf.add_n(copies))

    def _ahead(self, items, read):
        """(item, [read(item)]) for each item, reading the next item while the caller computes this one.

        The read comes in a one-element list for the caller to pop, so that
        nothing here holds it once the caller has uploaded it.
        """
        items = list(items)

        def timed_read(item):
            started = time.perf_counter()
            data = read(item)
            self.stats["read_s"] += time.perf_counter() - started
            return data

        if not self.overlap or len(items) < 2:
            for item in items:
                box = [timed_read(item)]
                yield item, box
                del box
            return
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ngra-loader") as pool:
            future = pool.submit(timed_read, items[0])
            for k, item in enumerate(items):
                started = time.perf_counter()
                box = [future.result()]
                self.stats["read_wait_s"] += time.perf_counter() - started
                future = pool.submit(timed_read, items[k + 1]) if k + 1 < len(items) else None
                yield item, box
                del box

    # ---- random state: a recomputed step draws what its forward drew ----

    def _mark(self, unit):
        if self._seeds:
            self._seed_marks[unit] = [tf.identity(v.value) for v in self._seeds]

    @contextlib.contextmanager
    def _replaying(self, unit):
        if self._seeds and unit in self._seed_marks:
            for variable, value in zip(self._seeds, self._seed_marks[unit]):
                variable.assign(value)
        yield

    # ---- the model ----

    def forward(self, training: bool, for_backward: bool):
        """Runs every stage; returns the key of the last one's output blocks in the host tier.

        With for_backward, each stage's input blocks (and what the spill
        policy keeps) stay in the host tier for backward.
        """
        with tf.device(self.device):
            return self._forward(training, for_backward)

    def _forward(self, training, for_backward):
        self._seed_marks.clear()
        self._training = bool(training)
        key = (self._training, self._input_spec())
        if key not in self._stage_cache:  # made once: shapes and compiled programs do not change between steps
            self._stage_cache[key] = model_stages(self.model, key[1], self.graph_spec, self._training,
                                                  self.num_parts)
        self._stages = self._stage_cache[key]
        key = "store:" + self.features
        for stage in self._stages:
            out = f"h{stage.index + 1}"
            if stage.saga is not None:
                self._saga_forward(stage, key, out, for_backward)
            else:
                self._map_vertices(stage, key, lambda x, stage=stage: {"": stage.prologue_of(x, training)}, out,
                                   mark=True)
            if not for_backward and not key.startswith("store:"):
                self.host.drop(key + "@")
            key = out
        self._mark("forward done")
        return key

    def _input_spec(self):
        row_shape, dtype = self.store.vertex_spec(self.features)
        dtype = tf.as_dtype(dtype)
        return tf.TensorSpec([None] + list(row_shape), self.model.compute_dtype if dtype.is_floating else dtype)

    def _hoist_all(self, stage, key, mark=False):
        """H: the vertex stage (prologue and hoisted sub-graphs) of every interval of `key`, to the host tier."""
        self._map_vertices(stage, key, lambda x: stage.hoist(x, self._training), f"L{stage.index}:", mark)

    def _saga_forward(self, stage, key, out, for_backward):
        partition, host, owner = self.partition, self.host, self.ring.owner
        l, steps = stage.index, stage.steps
        keep_hoisted = for_backward and self.spill == "spill"
        self._hoist_all(stage, key, mark=True)
        for wave in self._waves(steps):
            accumulators, dst = {}, {}
            for j in wave:
                with tf.device(owner(j)):
                    accumulators[j] = steps.accumulators(partition, j)
                    dst[j] = self._rows(l, steps.dest_keys, j)
            if steps.column_wide:
                for j in wave:
                    with tf.device(owner(j)):
                        sources = column_sources(partition, j)
                        chunks = {i: self._upload_chunk(self._read_chunk(i, j)) for i in sources}
                        src = {i: self._rows(l, steps.source_keys, i) for i in sources}
                        self._mark((l, "column", j))
                        memos = steps.column_memos(partition, j, chunks, src, dst[j])
                        for i in sources:
                            steps.reduce_chunk(accumulators[j], i, chunks[i], src[i], dst[j], memos[i])
                        del chunks, src, memos
            else:  # row by row: interval i's rows reach every owner of a column that reads them, once
                stops = [stop for i in range(self.num_parts) for stop in self._row_stops(i, wave)]
                src = None
                for stop, box in self._ahead(stops, lambda stop: self._read_stop(l, stop, steps.source_keys,
                                                                                self.selective)):
                    read_chunk, read_src = box.pop()
                    src = self._arrive(stop, src, lambda: self._rows(l, steps.source_keys, stop.i, read_src))
                    if stop.j is None:
                        continue
                    i, j = stop.i, stop.j
                    with tf.device(stop.device):
                        if for_backward:
                            for r, acc in enumerate(accumulators[j]):
                                if acc.chained_by_value and acc.value is not None:
                                    host.put(f"L{l}:chain{r}_{i}@{j}", acc.value)
                        self._mark((l, "chunk", i, j))
                        steps.reduce_chunk(accumulators[j], i, self._upload_chunk(read_chunk), src, dst[j])
                del src
            for j in wave:
                with tf.device(owner(j)):
                    if keep_hoisted:
                        for r, acc in enumerate(accumulators[j]):
                            if acc.value is not None:
                                host.put(f"L{l}:final{r}@{j}", acc.value)
                    self._mark((l, "vertex", j))
                    host.put(f"{out}@{j}", steps.vertex([acc.result() for acc in accumulators[j]],
                                                        self._rows(l, steps.vertex_keys, j)))
                    del accumulators[j], dst[j]
        if not keep_hoisted:
            host.drop(f"L{l}:s:")
            host.drop(f"L{l}:fused_src@")
            host.drop(f"L{l}:d:")
            host.drop(f"L{l}:v:")

    # ---- backward ----

    def backward(self, output_key: str, grad_of_output, variables):
        """Gradients of the loss with respect to `variables`, given d loss / d (last layer's output)."""
        with tf.device(self.device):
            return self._backward(output_key, grad_of_output, variables)

    def _backward(self, output_key, grad_of_output, variables):
        grads = {}
        d_key = "d_out"
        for i, g in enumerate(grad_of_output):
            self.host.put(f"{d_key}@{i}", g)
        for stage in reversed(self._stages):
            l = stage.index
            in_key = "store:" + self.features if l == 0 else f"h{l}"
            d_in = None if l == 0 else f"d_h{l}"
            if stage.saga is not None:
                self._saga_backward(stage, in_key, d_key, d_in, grads)
            else:
                self._map_vertices_backward(stage, in_key, lambda x, stage=stage: {"": stage.prologue_of(x, True)},
                                            d_key, d_in, stage.prologue_weights, grads)
            self.host.drop(d_key + "@")
            self.host.drop(f"L{l}:")
            self.host.drop(f"h{l + 1}@")
            d_key = d_in
        with self._replaying("forward done"):  # the random state as the forward left it, not as a replay did
            pass
        self.host.drop("h")
        return [grads[id(v)] if id(v) in grads else tf.zeros(v.shape, tf.as_dtype(v.dtype)) for v in variables]

    def _saga_backward(self, stage, in_key, d_key, d_in, grads):
        P, partition, host = self.num_parts, self.partition, self.host
        l, steps = stage.index, stage.steps
        weights = stage.saga.trainable_variables
        if self.spill == "recompute":  # the hoisted rows again, once per interval, from the layer input
            self._hoist_all(stage, in_key)
        if steps.column_wide:
            self._column_backward(l, steps, d_key, weights, grads)
        else:
            # V: ApplyVertex's backward, per column, on its owner.
            for j in range(P):
                with tf.device(self.ring.owner(j)):
                    accumulators = steps.accumulators(partition, j)
                    finals = self._column_finals(l, steps, accumulators, j)
                    vertex_rows = self._rows(l, steps.vertex_keys, j)
                    sources = [f for f in finals if f is not None] + list(vertex_rows.values())
                    with self._replaying((l, "vertex", j)), tf.GradientTape() as tape:
                        tape.watch(sources)
                        out = steps.vertex([acc.finish(f) for acc, f in zip(accumulators, finals)], vertex_rows)
                    result = iter(gradients(tape, out, sources + weights, host.load(f"{d_key}@{j}")))
                    for r, f in enumerate(finals):
                        if f is not None:
                            host.put(f"L{l}:dA{r}@{j}", next(result))
                    for name in vertex_rows:
                        host.put(f"L{l}:d{name}@{j}", next(result))
                    _add(grads, weights, list(result))
            # E: the chunks' backward, source interval by source interval, last first (max/min chains run back).
            for i in reversed(range(P)):
                src, d_src = None, {}  # d_src: {device: d source rows summed over its chunks}
                stops = self._row_stops(i, range(P))
                for stop, box in self._ahead(stops, lambda stop: self._read_stop(l, stop, steps.source_keys)):
                    read_chunk, read_src = box.pop()
                    src = self._arrive(stop, src, lambda: self._rows(l, steps.source_keys, i, read_src))
                    if stop.j is None:
                        continue
                    j = stop.j
                    with tf.device(stop.device):
                        accumulators = steps.accumulators(partition, j)
                        dst = self._rows(l, steps.dest_keys, j)
                        inits = [self._chain_init(l, r, acc, i, j) for r, acc in enumerate(accumulators)]
                        watched = list(src.values()) + list(dst.values()) + [x for x in inits if x is not None]
                        chunk = self._upload_chunk(read_chunk)
                        with self._replaying((l, "chunk", i, j)), tf.GradientTape() as tape:
                            tape.watch(watched)
                            values = steps.chunk_values(chunk, src, dst, inits,
                                                        [a.chunk_reduce for a in accumulators])
                        d_values = [host.load(f"L{l}:dA{r}@{j}") for r in range(len(accumulators))]
                        result = iter(gradients(tape, values, watched + weights, d_values))
                        partial = d_src.setdefault(stop.device, {})
                        for name in src:
                            d = next(result)
                            partial[name] = d if name not in partial else partial[name] + d
                        for name in dst:
                            host.add(f"L{l}:d{name}@{j}", next(result))
                        for r, (acc, init) in enumerate(zip(accumulators, inits)):
                            if acc.chained_by_value:
                                d_init = next(result) if init is not None else None
                                if d_init is not None:  # the gradient of the value the chunk reduced into
                                    host.put(f"L{l}:dA{r}@{j}", d_init)
                        _add(grads, weights, list(result))
                if d_src:
                    for name in steps.source_keys:
                        self._put_sum(f"L{l}:d{name}@{i}", [partial[name] for partial in d_src.values()])
                del src, d_src
        # H: the vertex stage's backward, per interval.
        self._map_vertices_backward(stage, in_key, lambda x: stage.hoist(x, True), f"L{l}:d", d_in,
                                    stage.prologue_weights + weights, grads)

    def _column_finals(self, l, steps, accumulators, j):
        """Column j's last chain values (None for a column without edges): reloaded or recomputed."""
        sources = column_sources(self.partition, j)
        if not sources:
            return [None] * len(accumulators)
        if self.spill == "spill":
            return [self.host.load(f"L{l}:final{r}@{j}") for r in range(len(accumulators))]
        dst = self._rows(l, steps.dest_keys, j)
        if all(acc.chained_by_value for acc in accumulators):  # the last chunk from the value it reduced into
            i = sources[-1]
            inits = [self._chain_init(l, r, acc, i, j) for r, acc in enumerate(accumulators)]
            with self._replaying((l, "chunk", i, j)):
                return steps.chunk_values(self._upload_chunk(self._read_chunk(i, j)),
                                          self._rows(l, steps.source_keys, i), dst, inits,
                                          [a.chunk_reduce for a in accumulators])
        for i, box in self._ahead(sources, lambda i: self._read_chunk(i, j)):
            read = box.pop()
            with self._replaying((l, "chunk", i, j)):
                steps.reduce_chunk(accumulators, i, self._upload_chunk(read), self._rows(l, steps.source_keys, i),
                                   dst)
        return [acc.value for acc in accumulators]

    def _chain_init(self, l, r, acc, i, j):
        """What chunk C[i][j] reduced into, for reducer r: needed by max/min chains only."""
        if not acc.chained_by_value:
            return None
        if i == acc.sources[0]:
            return acc.start()
        return self.host.load(f"L{l}:chain{r}_{i}@{j}")

    def _column_backward(self, l, steps, d_key, weights, grads):
        """Backward of a column-wide layer (edge.softmax): one tape per column, over its chunks and ApplyVertex,
        on the column's owner."""
        partition, host = self.partition, self.host
        for j in range(self.num_parts):
            with tf.device(self.ring.owner(j)):
                sources = column_sources(partition, j)
                accumulators = steps.accumulators(partition, j)
                src = {i: self._rows(l, steps.source_keys, i) for i in sources}
                dst = self._rows(l, steps.dest_keys, j)
                vertex_rows = self._rows(l, steps.vertex_keys, j)
                chunks = {i: self._upload_chunk(self._read_chunk(i, j)) for i in sources}
                watched = ([v for i in sources for v in src[i].values()] + list(dst.values())
                           + list(vertex_rows.values()))
                with tf.GradientTape() as tape:
                    tape.watch(watched)
                    with self._replaying((l, "column", j)):
                        memos = steps.column_memos(partition, j, chunks, src, dst)
                        for i in sources:
                            steps.reduce_chunk(accumulators, i, chunks[i], src[i], dst, memos[i])
                    with self._replaying((l, "vertex", j)):
                        out = steps.vertex([acc.result() for acc in accumulators], vertex_rows)
                result = iter(gradients(tape, out, watched + weights, host.load(f"{d_key}@{j}")))
                for i in sources:
                    for name in src[i]:
                        host.add(f"L{l}:d{name}@{i}", next(result))
                for name in list(dst) + list(vertex_rows):
                    host.add(f"L{l}:d{name}@{j}", next(result))
                _add(grads, weights, list(result))

    # ---- whole-graph results ----

    def gather_output(self, key: str):
        """The last layer's output, all intervals in interval order (the logits: small)."""
        return tf.concat([self.host.load(f"{key}@{i}") for i in range(self.num_parts)], axis=0)

    def infer(self):
        """The logits of an inference forward (training=False), in interval order."""
        output = self.forward(training=False, for_backward=False)
        logits = self.gather_output(output)
        self.host.drop(output + "@")
        return logits

    def split(self, rows):
        """Rows in interval order -> per-interval blocks."""
        return tf.split(rows, np.diff(self.partition.bounds).tolist(), axis=0)

    def close(self):
        self.host.close()


class _Stop(NamedTuple):
    """A device's turn with interval i's source rows (Streamer._row_stops)."""

    i: int
    j: int | None  # the chunk C[i][j] it runs with them; None: it only passes them on
    device: str
    arrival: str | None  # how the rows get there: "h2d" from the host tier, "d2d" from the device before, None: here
    alone: bool  # the rows serve this chunk only (selective scheduling may copy just the rows it reads)


def columns_at_once(num_parts: int, num_devices: int, steps) -> int:
    """How many columns' accumulators and destination rows a device holds at once for a layer's C phase.

    One on one device (column by column) and for column-wide layers (their steps are whole columns); over
    several devices every column the device owns, so that each source interval enters once per route.
    """
    if num_devices == 1 or steps.column_wide:
        return 1
    return -(-num_parts // num_devices)


def tile_rows(row_bytes: int, tile_bytes: int = TILE_BYTES) -> int:
    """Rows of `row_bytes` each that a per-vertex step takes at a time."""
    return max(1, tile_bytes // max(1, row_bytes))


def model_stages(model, input_spec, graph_spec, training, num_parts):
    """The model as stages: per-vertex layers (a prologue) and the graph layer they lead to.

    A prologue runs inside its graph layer's vertex stage, interval by
    interval, so its output is never materialised; per-vertex layers after
    the last graph layer form a stage of their own.
    """
    stages, prologue, spec, stage_input = [], [], input_spec, input_spec
    for layer in model.graph_layers:
        if isinstance(layer, SAGALayer):
            program = layer.compiled(spec, graph_spec, model.rewrites, training)
            steps = LayerSteps(program, layer.variables)
            steps.check_chunkable(num_parts)
            stages.append(_Stage(len(stages), prologue, layer, steps, stage_input, spec))
            prologue = []
        else:
            prologue.append(layer)
        spec = _spec_after(layer, spec)
        if not prologue:
            stage_input = spec
    if prologue:
        stages.append(_Stage(len(stages), prologue, None, None, stage_input, spec))
    stages[-1].output_spec = spec
    for before, after in zip(stages, stages[1:]):
        before.output_spec = after.input_spec
    return stages


class _Stage:
    """Per-vertex layers (the prologue) and the graph layer they feed (or None after the last one)."""

    def __init__(self, index, prologue, saga, steps, input_spec, graph_input_spec):
        self.index, self.prologue, self.saga, self.steps = index, list(prologue), saga, steps
        self.input_spec = input_spec  # of the stage (the prologue's input)
        self.graph_input_spec = graph_input_spec  # of its graph layer (the prologue's output)
        self.output_spec = None
        self.prologue_weights = [w for layer in self.prologue for w in layer.trainable_variables]

    def prologue_of(self, x, training):
        for layer in self.prologue:
            x = layer(x, training=training)
        return x

    def hoist(self, x, training, names=None):
        return self.steps.hoist(self.prologue_of(x, training), names)


def _spec_after(layer, spec):
    shape = tuple(layer.compute_output_shape(tuple(spec.shape)))
    return tf.TensorSpec([None] + list(shape[1:]), spec.dtype)


def gradients(tape, targets, sources, output_gradients=None) -> list:
    """tape.gradient, with zeros (not None) for sources the targets do not depend on."""
    result = tape.gradient(targets, sources, output_gradients=output_gradients)
    return [tf.zeros(s.shape, tf.as_dtype(s.dtype)) if g is None else tf.convert_to_tensor(g)
            for s, g in zip(sources, result)]


def _add(grads: dict, variables, values):
    for variable, value in zip(variables, values):
        key = id(variable)
        grads[key] = value if key not in grads else grads[key] + value


class GraphShapes:
    """What SAGALayer.compiled reads of a graph, for a store."""

    def __init__(self, store):
        self.num_vertices = store.num_vertices
        spec = store.edge_data_spec
        self.stored_edge_data = None if spec is None else np.zeros((0,) + tuple(spec[0]), spec[1])


__all__ = ["SPILL_POLICIES", "Streamer", "columns_at_once", "model_stages", "tile_rows"]
