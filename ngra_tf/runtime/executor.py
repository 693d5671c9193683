"""The executor: runs a model's stages over a partition or a store, forward and backward, as one custom gradient.

A model is a list of *stages* (ngra_tf.runtime.stages): per-vertex layers
(its prologue: Dropout, Dense, Add, Concatenate, ...) over kept values (the
model's input, earlier stages' outputs) and the graph layer they lead to, or
per-vertex layers alone. Every stage's output is kept until its last reader
has run; in backward, the gradients of a value read by several stages are
summed before its own stage's backward runs. Per stage:

    H  the prologue and the graph layer's vertex stage (hoist) on the stage's input rows
    C  the chunk loops (ngra_tf.runtime.loops): every chunk C[i][j] into A[j]
    V  ApplyVertex on the accumulators

`Executor(x, training)` returns the last stage's output (in the user's
vertex order) and registers, with tf.custom_gradient, a backward that walks
the stages in reverse: V's and H's vector-Jacobian products and C's backward
loop. It runs as one tf.function: every loop is traced once, whatever P.

The source decides the granularity, not the code path:

- In memory (`MemorySource`, a Partition): H and V run on all rows at once
  and keep their GradientTapes from forward to backward; C walks chunks
  sliced from the packed partition, its accumulators on the device. Rows
  are in the user's order between stages and in interval order in C.
- From a store (`StoreSource`): everything is a loop over blocks, and the
  memory the budget bounds holds one step's data. H runs tile by tile
  (features read from the store, or the previous stage's output from the
  host tier), its hoisted rows going to the host tier; C reads chunks from
  the store and rows from the host tier, and with the ngra schedule runs
  ApplyVertex on each column as it completes (stage and dest-order run it
  after every chunk, keeping A[j] in the host tier meanwhile); backward
  recomputes per tile and per column under a tape, from what the spill
  policy kept ("spill": hoisted rows, A[j]) or from the stage's input again
  ("recompute"). Everything stays in interval order.

Random ops draw the same numbers when a step is recomputed: every tile's,
column's and chunk's seed states are recorded in forward and restored for
its recompute. The executor does not import the layers: a stage's graph
layer is anything with `compiled(rows, graph, rewrites, training)` and
`compute_output_shape` (ngra_tf.SAGALayer).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import tempfile
import weakref

import numpy as np
import tensorflow as tf

from ngra_tf import tf_compat
from ngra_tf.compiler.kernels import LayerKernels
from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.copy import copy_d2d, copy_h2d
from ngra_tf.runtime import faults, schedule as sched
from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.loops import PARALLEL_STEPS, Arrays, ChunkLoops, set_seeds
from ngra_tf.runtime.ring_loops import RingLoops
from ngra_tf.runtime.sources import CopiedChunks, on_lane
from ngra_tf.runtime.stages import INPUT, variable_of

SPILL_POLICIES = ("recompute", "spill")
HOST_TIERS = ("memory", "disk")
TILE_BYTES = 4 * 2**20  # rows of input a per-vertex step takes at a time


class Executor:
    """Runs `stages` over a source (MemorySource or StoreSource); see the module doc.

    From a store, `spill` says what backward reloads ("spill") or recomputes
    ("recompute"), `host` where the host tier lives ("memory", or "disk" in
    `spill_dir` or a temporary directory), `tile_bytes` how many input rows a
    per-vertex step takes, `overlap` whether a loop's next step may start (its reads) while the current one
    computes.
    """

    def __init__(self, stages, source, schedule: str = "ngra", rewrites=True, spill: str = "spill",
                 host: str = "memory", spill_dir=None, tile_bytes: int = TILE_BYTES, compute_dtype="float32",
                 ring=None, selective: float = 0.0, overlap: bool = True):
        if spill not in SPILL_POLICIES:
            raise ValueError(f"spill must be one of {', '.join(SPILL_POLICIES)}; got {spill!r}")
        if host not in HOST_TIERS:
            raise ValueError(f"the host tier must be one of {', '.join(HOST_TIERS)}; got {host!r}")
        self.stages = list(stages)
        self.source = source
        self.partition = source.partition
        self.schedule, self.rewrites = sched.check_schedule(schedule), rewrites
        self.spill, self.host = spill, host
        self.spill_dir, self._owned_dir = spill_dir, None
        # The host tier's files (path -> bytes) and the directories made for them: only these are removed (a
        # user's spill_dir keeps its other files), by close() and, should a process exit without it, at exit.
        self._files, self._made_dirs = {}, []
        weakref.finalize(self, _remove_host_tier, self._files, self._made_dirs)
        # The backwards traced into graphs, and their names in TensorFlow's gradient registry (released with this).
        self._backwards, self._registered = [], []
        weakref.finalize(self, tf_compat.forget_gradients, self._registered)
        self.tile_bytes = int(tile_bytes)
        self.parallel = PARALLEL_STEPS if overlap else 1
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.sizes = np.diff(np.asarray(self.partition.bounds, np.int64))
        self._compiled = {}  # (stage index, training, input spec) -> (LayerKernels, ChunkLoops)
        self._functions = {}  # training -> tf.function
        self._serial = 0  # disk arrays made so far (their files are numbered)
        self.ring = ring  # a DeviceRing: the lanes the chunk steps are spread over (None: one)
        self.selective = float(selective or 0.0)
        self._selected = None  # which chunks copy only the source rows they use (selective scheduling)
        self._rings = {}  # id(kernels) -> RingLoops
        self._lane_loop_cache = {}  # (id(kernels), columns) -> ChunkLoops of one lane's columns
        if ring is not None:
            ring.check(self.partition)
        self._check_layers()

    def _check_layers(self):
        """From a store or over several devices, per-vertex work runs on tiles or columns of rows, and is run again
        in backward: a layer that updates state as it runs (BatchNormalization's moving statistics) would see
        part of the rows, and update twice. Such a layer fails here, when the model is made."""
        if not (self.source.streamed or self.ring is not None):
            return
        mode = "from a store" if self.source.streamed else "over several devices"
        for stage in self.stages:
            for layer in stage.layers:
                state = [v for v in layer.non_trainable_variables if "seed_generator_state" not in v.path]
                if state:
                    raise ValueError(
                        f"{layer.name} ({type(layer).__name__}) updates state as it runs ({state[0].path}); "
                        f"{mode}, per-vertex work runs on parts of the rows at a time and again in backward, so "
                        "that state would be wrong. Use a layer without running state (LayerNormalization, say), "
                        "or train this model in memory on one device")

    # ---- what runs ----

    def compiled(self, index, spec, training):
        """The kernels and chunk loops of stage `index`'s graph layer for rows like `spec` (shape, dtype)."""
        key = (index, bool(training), tuple(spec.shape[1:]), tf.as_dtype(spec.dtype))
        if key not in self._compiled:
            layer = self.stages[index].graph_layer
            program = layer.compiled(spec, self.source.graph, self.rewrites, training)
            kernels = LayerKernels(program, layer.variables)
            kernels.check_chunkable(self.partition.num_parts)
            seeds = _seeds(kernels.edge_variables())
            self._compiled[key] = (kernels, ChunkLoops(kernels, self.partition, self.schedule, seeds,
                                                               parallel=self.parallel))
        return self._compiled[key]

    def describe(self) -> list:
        """Per compiled graph layer, its step lists: how many chunk steps each pass runs, in one loop."""
        lines = []
        for (index, training, _, _), (kernels, loops) in sorted(self._compiled.items(), key=lambda kv: kv[0][:2]):
            if training:
                lines.append(f"  {self.stages[index].name}: {loops.forward_steps.shape[0]} forward chunk steps and "
                             f"{loops.backward_steps.shape[0]} backward ({self.schedule} order), each pass one "
                             "compiled loop")
        return lines

    def __call__(self, x, training=False):
        """The last stage's output for input rows x (the user's order; from a store, x is ignored and the
        features are read from it); differentiable w.r.t. x and the weights.

        Called eagerly, it runs as a tf.function (traced once per input shape
        and training flag), so that the loops compile; inside a caller's
        tf.function it is traced into the caller's graph.
        """
        training = bool(training)
        x = tf.convert_to_tensor(x)
        self._build(x)
        if not tf.executing_eagerly():
            return self._run(x, training)
        function = self._functions.get(training)
        if function is None:
            function = self._functions[training] = tf.function(
                lambda x: self._run(x, training), reduce_retracing=True, autograph=False)
        return function(x)

    def _build(self, x):
        """Builds every layer (eagerly, on two rows of zeros) before the custom gradient runs them."""
        if all(layer.built for stage in self.stages for layer in stage.layers):
            return
        with tf.init_scope():
            if self.source.streamed:
                row_shape, dtype = self.source.input_spec(self.compute_dtype)
                values = {INPUT: tf.zeros((2,) + row_shape, dtype)}
            else:
                values = {INPUT: tf.zeros([2] + x.shape[1:].as_list(), x.dtype)}
            for index, stage in enumerate(self.stages):
                y = stage.prologue_of([values[key] for key in stage.inputs], False)
                if stage.graph_layer is not None:
                    shape = stage.graph_layer.compute_output_shape(tuple(y.shape))
                    y = tf.zeros([2] + list(shape[1:]), y.dtype)
                values[index] = y

    def _run(self, x, training):
        streamed = self.source.streamed
        blocked = streamed or self.ring is not None  # loops over blocks (else: whole phases in memory)
        last = len(self.stages) - 1
        forward, backward = (self._stream_forward, self._stream_backward) if blocked else (self._forward, self._backward)

        @tf.custom_gradient
        def run(x):
            records = []
            values = {INPUT: self._store_rows() if streamed else x}
            for index, stage in enumerate(self.stages):
                with tf.name_scope(stage.name):
                    values[index], record = forward(index, stage, [values[key] for key in stage.inputs], training)
                records.append(record)
            output = values[last]
            if blocked:
                with tf.device(self._host_device()):
                    output = self._to_users(output.blocks.concat(output.state) if streamed else self._whole(output))

            def grad(dy, variables=None):
                grads = {}
                d = {last: self._stream_gradient(dy, records[-1]) if blocked else dy}
                for index in reversed(range(len(self.stages))):
                    stage = self.stages[index]
                    with tf.name_scope(f"{stage.name}/Backward"):
                        d_inputs = backward(index, stage, records[index], d.pop(index), grads, training)
                        for key, d_input in zip(stage.inputs, d_inputs):
                            if d_input is not None:  # (None: the store's features, which only name an array)
                                d[key] = d_input if key not in d else self._sum(d[key], d_input, blocked)
                d_x = d.get(INPUT)
                if blocked:  # a store's input only names its features; in memory, d x returns in the user's order
                    d_x = None if streamed else self._to_users(self._whole(d_x))
                self._check_spill_space()
                if variables is None:
                    return d_x
                return d_x, [grads.get(id(variable_of(v))) for v in variables]

            self._check_spill_space()
            return output, self._weakly(grad)

        output = run(tf.zeros([0], self.compute_dtype) if streamed else x)
        name = tf_compat.registered_gradient(output)
        if name is not None:
            self._registered.append(name)
        return output

    def _weakly(self, grad):
        """`grad` as TensorFlow's gradient registry keeps it: through a weak reference, so that the registry does
        not keep this executor alive (it releases the registration when it goes, see tf_compat)."""
        self._backwards.append(grad)
        weak = weakref.ref(self)
        index = len(self._backwards) - 1

        def backward(*dy, variables=None):
            executor = weak()
            if executor is None:
                raise RuntimeError("the model this gradient belongs to has been released")
            return executor._backwards[index](*dy, variables=variables)

        return backward

    def _sum(self, a, b, blocked):
        """Two gradients of one kept value (it is read by several stages): tensors, or host-tier rows."""
        if not blocked:
            return a + b
        total = self._blocks("d", a.blocks.home, a.row_shape, a.dtype, name=f"sum_{a.blocks.name}")

        def add(d, part, state):
            return total.put(state, part, a.get(part) + b.get(part))

        state = self._rounds(self._by_lane(self._loaders()), add, _fresh(total))
        return _BlockRows(total, state)

    # ---- in memory: whole phases ----

    def _forward(self, index, stage, xs, training):
        with tf.GradientTape(persistent=True) as vertex_tape:  # persistent: TF may build the backward twice
            vertex_tape.watch(xs)
            y = stage.prologue_of(xs, training)
            if stage.graph_layer is None:
                return y, {"tape": vertex_tape, "inputs": xs, "output": y}
            kernels, loops = self.compiled(index, y, training)
            hoisted = kernels.hoist(y)
        rows = self._device_arrays({key: self._to_intervals(hoisted[key]) for key in
                                    kernels.source_keys + kernels.dest_keys})
        columns = self._column_arrays(loops, "device", filled=True)
        column_states, seeds = loops.forward(rows, self.source.chunks, columns)
        columns = columns.with_states(column_states)
        accumulated = [self._to_users(self._finish(columns.blocks[f"acc{r}"].concat(columns.states[f"acc{r}"]),
                                                   reduce, loops.degree))
                       for r, reduce in enumerate(kernels.reduces)]
        vertex_rows = {key: hoisted[key] for key in kernels.vertex_keys}
        with tf.GradientTape(persistent=True) as apply_tape:
            apply_tape.watch(accumulated + list(vertex_rows.values()))
            out = kernels.vertex(accumulated, vertex_rows)
        return out, {"tape": vertex_tape, "inputs": xs, "hoisted": hoisted, "kernels": kernels, "loops": loops,
                     "rows": rows, "columns": columns, "seeds": seeds, "accumulated": accumulated,
                     "vertex_rows": vertex_rows, "apply_tape": apply_tape, "output": out}

    def _backward(self, index, stage, record, d_out, grads, training):
        """d of the stage's inputs (a list) from d of its output; adds d weights into grads."""
        weights = stage.weights()
        if stage.graph_layer is None:
            return _tape_backward(record["tape"], record["output"], record["inputs"], weights, d_out, grads)
        kernels, loops = record["kernels"], record["loops"]
        vertex_rows = record["vertex_rows"]
        sources = record["accumulated"] + list(vertex_rows.values()) + kernels.weights
        result = _gradients(record["apply_tape"], record["output"], sources, d_out)
        n = len(record["accumulated"])
        d_accumulated, d_vertex = result[:n], result[n:n + len(vertex_rows)]
        _add(grads, kernels.weights, result[n + len(vertex_rows):])
        d_columns = self._device_arrays({f"acc{r}": self._unfinish(self._to_intervals(d), reduce, loops.degree)
                                         for r, (d, reduce) in enumerate(zip(d_accumulated, kernels.reduces))})
        d_rows = self._zero_arrays(record["rows"], kernels.source_keys + kernels.dest_keys, "device")
        d_states, d_weights = loops.backward(record["rows"], self.source.chunks, record["columns"], d_columns,
                                             d_rows, record["seeds"])
        _add(grads, kernels.weights, d_weights)
        d_rows = d_rows.with_states(d_states)
        d_hoisted = {key: self._to_users(d_rows.blocks[key].concat(d_rows.states[key])) for key in d_rows.blocks}
        d_hoisted.update(zip(vertex_rows, d_vertex))
        hoisted = record["hoisted"]
        return _tape_backward(record["tape"], [hoisted[key] for key in hoisted], record["inputs"], weights,
                              [d_hoisted.get(key, tf.zeros_like(hoisted[key])) for key in hoisted], grads)

    # ---- from a store, or over several devices: loops over blocks ----
    #
    # Rows live in Blocks arrays (ngra_tf.runtime.blocks) whose states the loops carry. Work runs on *lanes*:
    # the ring's devices (a DeviceRing), or one lane (None: the default device). Per-vertex passes (H, V and
    # their backward) run lane by lane in rounds (`_rounds`), so that every lane's writes into a shared host
    # array thread through one loop; chunk steps run in ChunkLoops (one lane, column by column) or RingLoops
    # (several lanes, row by row).

    @property
    def lanes(self):
        return [None] if self.ring is None else list(self.ring.order)

    def _host_home(self):
        if not self.source.streamed:
            return "host"
        return "disk" if self.host == "disk" else "host"

    def _store_rows(self):
        """The first stage's input from a store: its features, read tile by tile."""
        reader, name = self.source.chunks, self.source.features
        row_shape, dtype = self.source.input_spec(self.compute_dtype)

        def rows(part, start, stop):
            value = copy_h2d(reader.rows(name, part, start, stop))
            return tf.cast(value, dtype) if value.dtype != dtype else value

        return _Rows(rows, row_shape, dtype, None, None)

    def _host_device(self):
        return "/CPU:0" if self.ring is None else self.ring.host

    def _rounds(self, items, body, states):
        """body(d, item, states) -> states for each lane d's items (items[d], a list), round by round: lane d's
        r-th item in round r, lanes in order within a round, each under its device."""
        lanes = self.lanes
        width = max([len(mine) for mine in items] + [0])
        if width == 0:
            return states
        table = tf.constant([[mine[r] if r < len(mine) else -1 for r in range(width)] for mine in items], tf.int32)

        def round_(r, states):
            for d, lane in enumerate(lanes):
                item = table[d][r]
                with on_lane(lane):
                    if len(items[d]) == width:
                        states = body(d, item, states)
                    else:
                        before = states
                        states = tf.cond(item >= 0, lambda d=d, item=item, before=before: body(d, item, before),
                                         lambda before=before: before)
            return r + 1, states

        _, states = tf.while_loop(lambda r, _: r < width, round_, (tf.constant(0), states),
                                  parallel_iterations=self.parallel)
        return states

    def _tiles(self, inps):
        """Each interval's tiles: rows of the inputs at most tile_bytes at a time (the whole interval in memory)."""
        row_bytes = max(1, sum(int(np.prod(inp.row_shape, dtype=np.int64)) * tf.as_dtype(inp.dtype).size
                               for inp in inps))
        per_tile = max(1, self.tile_bytes // row_bytes) if self.source.streamed else max(1, int(self.sizes.max()))
        rows, first, count = [], [], []
        for p, size in enumerate(self.sizes):
            first.append(len(rows))
            for start in range(0, max(int(size), 1), per_tile):
                rows.append((p, start, min(int(size), start + per_tile)))
            count.append(len(rows) - first[-1])
        return _Tiles(tf.constant(np.array(rows, np.int64).reshape(-1, 3)), tf.constant(first, tf.int32),
                      tf.constant(count, tf.int32), rows)

    def _loaders(self):
        """The lane that runs each interval's per-vertex work once: a loader of its routes, taken in turn."""
        if self.ring is None:
            return [0] * self.partition.num_parts
        index = {lane: d for d, lane in enumerate(self.lanes)}
        loaders = []
        for i in range(self.partition.num_parts):
            routes = self.ring.routes(i)
            loaders.append(index[routes[i % len(routes)][0]])
        return loaders

    def _by_lane(self, lane_of):
        items = [[] for _ in self.lanes]
        for part, d in enumerate(lane_of):
            items[d].append(part)
        return items

    def _map_tiles(self, index, stage, inps, training, fn, specs, items, outputs, replay=None, seeds=()):
        """fn(prologue(rows)) of every interval of the inputs `inps`, tile by tile: lane d runs the intervals items[d] and
        puts the results into the Blocks outputs[d][name] (a state dict keyed like `outputs` is returned), and
        tile k draws its random numbers with the seed states (of the prologue and `seeds`) + [0, k]: `replay` gives
        a forward's bases, to draw the same again."""
        tiles = self._tiles(inps)
        seeds = stage.seeds() + list(seeds)
        bases = tuple(v.read_value() for v in seeds) if replay is None else replay
        states = {key: _fresh(blocks) for lane_outputs in outputs for key, blocks in lane_outputs.items()}

        def interval(d, p, states):
            first, count = tiles.first[p], tiles.count[p]
            pieces = {name: tf.TensorArray(dtype, size=count, element_shape=tf.TensorShape([None] + list(shape)),
                                           infer_shape=False) for name, (shape, dtype) in specs.items()}

            def tile(t, pieces):
                start, stop = tiles.table[first + t][1], tiles.table[first + t][2]
                set_seeds(seeds, bases, first + t)  # tile k draws with base + [0, k] (again in backward)
                values = fn(stage.prologue_of([inp.rows(p, start, stop) for inp in inps], training))
                return t + 1, {name: pieces[name].write(t, values[name]) for name in pieces}

            _, pieces = tf.while_loop(lambda t, *_: t < count, tile, (tf.constant(0), pieces))
            states = dict(states)
            for key, blocks in outputs[d].items():
                states[key] = blocks.put(states[key], p, pieces[blocks.name].concat())
            return states

        states = self._rounds(items, interval, states)
        set_seeds(seeds, bases, len(tiles.rows))
        return states, bases

    def _hoisted_outputs(self, index, kernels):
        """Where a layer's hoisted rows go: one host-tier array per key, or (in memory over several devices)
        one array per key on each lane, holding what that lane loaded."""
        specs = kernels.key_specs()
        if self.source.streamed or self.ring is None:
            shared = {key: self._blocks(key, self._host_home(), shape, dtype, name=f"L{index}:{key}")
                      for key, (shape, dtype) in specs.items()}
            return [shared for _ in self.lanes]
        return [{f"{key}@{d}": Blocks(key, "device", self.sizes, shape, dtype, device=lane)
                 for key, (shape, dtype) in specs.items()} for d, lane in enumerate(self.lanes)]

    def _hoist_items(self, kernels):
        """Which lane hoists which intervals: each interval once (a store, one lane), or in memory over several
        devices on the loader of every route that carries it or leads to its owner."""
        if self.source.streamed or self.ring is None:
            return self._by_lane(self._loaders())
        plan, items = self._ring_plan(kernels).plan, [[] for _ in self.lanes]
        for i in range(self.partition.num_parts):
            for d in sorted(set(plan.loaders[i]) | {self._holder(plan, plan.owner[i], i)}):
                items[d].append(i)
        return items

    def _ring_plan(self, kernels):
        key = id(kernels)
        if key not in self._rings:
            loops = self._loops_of(kernels)
            self._rings[key] = RingLoops(loops, self.ring, self.partition)
        return self._rings[key]

    def _loops_of(self, kernels):
        return next(loops for k, loops in self._compiled.values() if k is kernels)

    def _holder(self, plan, d, i):
        """The lane whose memory holds interval i's hoisted rows for lane d (the loader of d's route)."""
        index = {lane: e for e, lane in enumerate(self.lanes)}
        route = next(r for r in self.ring.routes(i) if self.lanes[d] in r)
        return index[route[0]]

    def _fetch(self, hoisted, kernels, d, part, keys):
        """Interval `part`'s hoisted rows `keys` on lane d: from the host tier (copy_h2d), or in memory over several
        devices from the lane holding them (copy_d2d, none when it is d)."""
        blocks, states = hoisted
        lane = self.lanes[d]
        if self.source.streamed or self.ring is None:
            with on_lane(lane):
                return {key: blocks[key].get(states[key], part) for key in keys}
        plan = self._ring_plan(kernels).plan
        holders = [self._holder(plan, d, i) for i in range(self.partition.num_parts)]
        choices = sorted(set(holders))

        def from_holder(h):
            def read():
                values = {key: blocks[f"{key}@{h}"].get(states[f"{key}@{h}"], part) for key in keys}
                if h == d:
                    return values
                with tf.device(lane):
                    return {key: copy_d2d(value) for key, value in values.items()}
            return read

        if len(choices) == 1:
            return from_holder(choices[0])()
        which = tf.gather(tf.constant([choices.index(h) for h in holders], tf.int32), part)
        return tf.switch_case(which, [from_holder(h) for h in choices])

    def _stream_forward(self, index, stage, inps, training):
        """H, C and V of one stage over blocks; returns (its output rows in the host tier, its record).

        In memory (over several devices), the prologue runs on all rows at once, in the user's order, as on one
        device (so dropout draws the same numbers), under a tape kept for backward; blocks start after it.
        """
        if not self.source.streamed:
            xs = [inp if isinstance(inp, tf.Tensor) else self._to_users(self._whole(inp)) for inp in inps]
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(xs)
                y = stage.prologue_of(xs, training)
            rows = self._host_rows(y, f"p{index}")
            prologue = {"tape": tape, "inputs": xs, "output": y, "weights": stage.prologue_weights()}
            if stage.graph_layer is None:
                return rows, {"prologue": prologue, "output": rows}
            out, record = self._blocks_forward(index, stage.without_prologue(index), [rows], training)
            record["prologue"] = prologue
            return out, record
        return self._blocks_forward(index, stage, inps, training)

    def _whole(self, rows):
        """Blocks of rows in host memory as one host tensor (in memory, nothing moves to a device)."""
        with tf.device(self._host_device()):
            return rows.blocks.concat(rows.state, to_device=False)

    def _host_rows(self, x, name):
        """Rows x (the user's order) as host blocks in interval order."""
        blocks = Blocks(name, "host", self.sizes, x.shape[1:].as_list(), x.dtype, host=self._host_device())
        with tf.device(self._host_device()):
            return _BlockRows(blocks, blocks.empty().split(self._to_intervals(x), tf.constant(self.sizes)))

    def _blocks_forward(self, index, stage, inps, training):
        keep = training and self.spill == "spill"
        home = self._host_home()
        spec = tf.TensorSpec([None] + list(stage.row_shape(inps[0].row_shape)), inps[0].dtype)  # the prologue's rows
        if stage.graph_layer is None:
            out = self._blocks("out", home, spec.shape[1:].as_list(), spec.dtype, name=f"h{index + 1}")
            states, seeds = self._map_tiles(index, stage, inps, training, lambda y: {"out": y},
                                            {"out": (tuple(spec.shape[1:]), spec.dtype)},
                                            self._by_lane(self._loaders()), [{"out": out} for _ in self.lanes])
            output = _BlockRows(out, states["out"])
            return output, {"inputs": inps, "output": output, "tile_seeds": seeds}
        kernels, loops = self.compiled(index, spec, training)
        hoisted, tile_seeds = self._hoist(index, stage, inps, training, kernels)
        out, kept, seeds = self._columns(index, kernels, loops, hoisted, keep)
        record = {"inputs": inps, "kernels": kernels, "loops": loops, "tile_seeds": tile_seeds,
                  "hoisted": hoisted if keep or not self.source.streamed else None, "output": out,
                  "kept": kept, "chunk_seeds": seeds}
        return out, record

    def _hoist(self, index, stage, inps, training, kernels, replay=None):
        outputs = self._hoisted_outputs(index, kernels)
        states, seeds = self._map_tiles(index, stage, inps, training, kernels.hoist, kernels.key_specs(),
                                        self._hoist_items(kernels), outputs, replay, _seeds(kernels.hoist_variables()))
        blocks = {key: b for lane_outputs in outputs for key, b in lane_outputs.items()}
        return (blocks, states), seeds

    def _columns(self, index, kernels, loops, hoisted, keep, replay=None):
        """C and V of one stage: its output rows (host tier), what backward needs of the columns (when `keep`),
        and the chunks' seed states."""
        if self.ring is None:
            return self._one_lane_columns(index, kernels, loops, hoisted, keep, replay)
        return self._ring_columns(index, kernels, loops, hoisted, keep, replay)

    def _output_blocks(self, index, kernels):
        out_spec = kernels.program.vertex.output
        return self._blocks("out", self._host_home(), out_spec.shape[1:].as_list(), out_spec.dtype,
                            name=f"h{index + 1}")

    def _one_lane_columns(self, index, kernels, loops, hoisted, keep, replay):
        """One device, column by column. ngra keeps A[j] on the device for its column and runs ApplyVertex when
        the column's last chunk is done; stage keeps it there for the column, then in the host tier until
        every chunk is done; dest-order keeps it in the host tier between chunks (loaded and stored by every
        step)."""
        P = self.partition.num_parts
        home = self._host_home()
        if self.schedule == "dest-order" and self.source.streamed:
            live, kept = self._column_arrays(loops, home, filled=True, prefix=f"L{index}:"), None
        else:
            live = self._column_arrays(loops, "device", filled=not self.source.streamed, prefix=f"L{index}:")
            keeping = self.source.streamed and (keep or self.schedule == "stage")
            kept = self._column_arrays(loops, home, filled=True, prefix=f"L{index}:kept:") if keeping else None
        out = self._output_blocks(index, kernels)
        rows = _HostRows(self, hoisted, kernels, 0)
        in_loop = self.schedule == "ngra" or not self.source.streamed

        def finish(j, cols):
            """At column j's last chunk: keep its A[j] (and winners, statistics), ApplyVertex (ngra, or in
            memory), free its device blocks."""
            for name in live.blocks if kept is not None else ():
                cols.put(f"kept:{name}", j, cols.get(name, j))
            if in_loop:
                accumulated = [self._finish(cols.get(f"acc{r}", j), reduce, loops.degree, loops.bounds, j)
                               for r, reduce in enumerate(kernels.reduces)]
                cols.put("out", j, kernels.vertex(accumulated, rows.rows(kernels.vertex_keys, j)))
            if self.source.streamed:
                for name, blocks in live.blocks.items():
                    cols.put(name, j, tf.zeros([0] + list(blocks.row_shape), blocks.dtype))
            return cols

        blocks, states = dict(live.blocks, out=out), dict(live.states, out=_fresh(out))
        for name in kept.blocks if kept is not None else ():
            blocks[f"kept:{name}"], states[f"kept:{name}"] = kept.blocks[name], kept.states[name]
        columns = Arrays(blocks, states)
        column_states, seeds = loops.forward(rows, self._lane_chunks(0), columns,
                                             finish if in_loop or kept is not None else None,
                                             None if replay is None else replay[0],
                                             self._selector(hoisted, kernels) if replay is None else None)
        columns = columns.with_states(column_states)
        if kept is None:
            finals = live.with_states({name: columns.states[name] for name in live.blocks})
        else:
            finals = kept.with_states({name: columns.states[f"kept:{name}"] for name in kept.blocks})
        # ApplyVertex of the columns no chunk reached (ngra), or of every column (stage, dest-order).
        pending = [j for j in range(P) if not in_loop or not self.partition.edge_counts[:, j].any()]
        out_state, _, vertex_seeds = self._vertex_pass(kernels, loops, hoisted, [finals], out, columns.states["out"],
                                                       [pending], bases=None if replay is None else replay[1])
        return _BlockRows(out, out_state), ([finals] if keep else None), (seeds, vertex_seeds)

    def selected_chunks(self):
        """{chunk id: source rows it uses}, for the chunks whose edges leave from fewer than `selective` of their
        source interval's rows (NeuGraph's selective scheduling; read from the store's CSR pointers once)."""
        if self._selected is None:
            self._selected = {}
            store, P = self.source.store, self.partition.num_parts
            for i in range(P):
                for j in range(P):
                    if self.partition.edge_counts[i, j]:
                        indptr = store.chunk_arrays(i, j, names=("csr_indptr",))["csr_indptr"]
                        used = int(np.count_nonzero(np.diff(indptr)))
                        if used < self.selective * self.sizes[i]:
                            self._selected[i * P + j] = used
        return self._selected

    @property
    def selective_rows_saved(self) -> int:
        """Source rows a forward pass leaves on the host per layer by selective scheduling."""
        if not (self.selective and self.source.streamed and self.ring is None):
            return 0
        P = self.partition.num_parts
        return sum(int(self.sizes[c // P]) - used for c, used in self.selected_chunks().items())

    def _selector(self, hoisted, kernels):
        """select(c, i) for the chunk loop: a selected chunk copies only the source rows its edges leave from,
        gathered on the host, and is renumbered to them (CSC sources remapped, empty CSR rows dropped); the
        kernels then see a smaller interval and give the same result."""
        if not (self.selective and self.source.streamed and self.ring is None) or not self.selected_chunks():
            return None
        P = self.partition.num_parts
        chosen = tf.constant([c in self.selected_chunks() for c in range(P * P)])
        reader = self.source.chunks
        blocks, states = hoisted

        def select(c, i):
            host = reader.chunk(c)
            t = host.adjacency.tensors()
            rows = {key: blocks[key].get_host(states[key], i) for key in kernels.source_keys}

            def compact():
                degree = t.csr_indptr[1:] - t.csr_indptr[:-1]
                used = tf.cast(tf.where(degree > 0)[:, 0], t.csc_src.dtype)
                remap = tf.scatter_nd(used[:, None], tf.range(tf.size(used, out_type=used.dtype)), tf.shape(degree))
                arrays = t._replace(csc_src=tf.gather(remap, t.csc_src),
                                    csr_indptr=tf.concat([tf.gather(t.csr_indptr, used), t.csr_indptr[-1:]], 0))
                return tuple(arrays), {key: tf.gather(value, used) for key, value in rows.items()}

            arrays, src = tf.cond(tf.gather(chosen, c), compact, lambda: (tuple(t), rows))
            for value, before in zip(arrays, t):
                value.set_shape(before.shape)
            for key in src:
                src[key].set_shape(rows[key].shape)
            src = {key: copy_h2d(value) for key, value in src.items()}
            loaded = LoadedChunk(LoadedAdjacency(AdjacencyTensors(*(copy_h2d(a) for a in arrays))),
                                 None if host.edge_data is None else copy_h2d(host.edge_data))
            return loaded, src

        return select

    def _ring_columns(self, index, kernels, loops, hoisted, keep, replay):
        """Several devices: each lane's columns' accumulators stay on it; rows are shared along routes (RingLoops)
        or, for column-wide layers, each lane takes its columns one at a time (ChunkLoops per lane). ApplyVertex
        runs lane by lane after every chunk."""
        P = self.partition.num_parts
        lanes = self.lanes
        owners = [lanes.index(self.ring.owner(j)) for j in range(P)]
        owned = [[j for j in range(P) if owners[j] == d] for d in range(len(lanes))]
        live = []
        for d, lane in enumerate(lanes):
            arrays = self._lane_column_arrays(loops, kernels, lane, prefix=f"L{index}@{d}:")
            live.append(arrays)
        chunks = [self._lane_chunks(d) for d in range(len(lanes))]
        if kernels.column_wide:
            states, seeds = [], loops.seed_bases() if replay is None else replay[0]
            for d, lane in enumerate(lanes):
                lane_loops = self._lane_loops(kernels, loops, owned[d])
                with tf.device(lane):
                    lane_states, _ = lane_loops.forward(_HostRows(self, hoisted, kernels, d), chunks[d], live[d],
                                                        None, seeds)
                states.append(lane_states)
        else:
            ring = self._ring_plan(kernels)
            states, seeds = ring.forward(lambda d, i: self._fetch(hoisted, kernels, d, i, kernels.source_keys),
                                         kernels.key_specs(),
                                         lambda d, j: self._fetch(hoisted, kernels, d, j, kernels.dest_keys),
                                         live, chunks, lambda d, j, cols: cols, None if replay is None else replay[0])
        live = [arrays.with_states(lane_states) for arrays, lane_states in zip(live, states)]
        out = self._output_blocks(index, kernels)
        kept = None
        if keep and self.source.streamed:  # what backward reloads: A[j] (and winners, statistics) in the host tier
            kept = self._column_arrays(loops, self._host_home(), filled=True, prefix=f"L{index}:kept:")
        out_state, kept, vertex_seeds = self._vertex_pass(kernels, loops, hoisted, live, out, _fresh(out), owned, kept,
                                                          None if replay is None else replay[1])
        kept = live if not self.source.streamed else [kept] * len(lanes) if kept is not None else None
        return (_BlockRows(out, out_state), (kept if keep or not self.source.streamed else None),
                (seeds, vertex_seeds))

    def _lane_column_arrays(self, loops, kernels, lane, prefix):
        blocks = loops.column_arrays("device", device=lane)
        for key in kernels.dest_keys:  # a column's destination rows, held with its accumulators
            shape, dtype = kernels.key_specs()[key]
            blocks[f"dst:{key}"] = Blocks(f"dst:{key}", "device", self.sizes, shape, dtype, device=lane)
        with tf.device(lane):
            states = {name: (b.filled(-1 if name.startswith(("won", "edge")) else 0)) for name, b in blocks.items()}
        return Arrays(blocks, states)

    def _lane_loops(self, kernels, loops, columns):
        key = (id(kernels), tuple(columns))
        if key not in self._lane_loop_cache:
            self._lane_loop_cache[key] = ChunkLoops(kernels, self.partition, self.schedule, loops.seeds, columns,
                                                            parallel=self.parallel)
        return self._lane_loop_cache[key]

    def _lane_chunks(self, d):
        """Lane d's chunk source: the packed chunks of its columns on its device, or the store's (copied to it)."""
        if self.source.streamed:
            return CopiedChunks(self.source.chunks, self.lanes[d])
        return self.source.lane_chunks(self.ring, d)

    def _vertex_pass(self, kernels, loops, hoisted, finals, out, out_state, columns, kept=None, bases=None):
        """ApplyVertex on each lane's `columns` from A in finals[d] (zeros where no chunk reaches the column),
        into `out`; with `kept`, also copies each column's A (winners, statistics) there. Returns out's state
        (and kept's)."""
        P = self.partition.num_parts
        has_chunks = tf.constant([bool(self.partition.edge_counts[:, j].any()) for j in range(P)])
        states = (out_state, () if kept is None else kept.states)
        seeds = _seeds(kernels.vertex_variables())
        bases = tuple(v.read_value() for v in seeds) if bases is None else bases

        def column(d, j, carried):
            out_state, kept_states = carried
            set_seeds(seeds, bases, j)  # column j draws with base + [0, j] (again in backward)
            source = finals[d]
            accumulated = []
            for r, reduce in enumerate(kernels.reduces):
                rows = tf.cast(tf.gather(loops.sizes, j), tf.int32)
                zeros = tf.zeros(tf.concat([[rows], tf.constant(kernels.feature_shape, tf.int32)], 0), kernels.dtype)
                value = tf.cond(has_chunks[j], lambda r=r: source.get(f"acc{r}", j), lambda zeros=zeros: zeros)
                accumulated.append(self._finish(value, reduce, loops.degree, loops.bounds, j))
            vertex_rows = _HostRows(self, hoisted, kernels, d).rows(kernels.vertex_keys, j)
            out_state = out.put(out_state, j, kernels.vertex(accumulated, vertex_rows))
            if kept is not None:
                into = kept.with_states(kept_states)
                for name in kept.blocks:
                    into.put(name, j, tf.cond(has_chunks[j], lambda name=name: source.get(name, j),
                                              lambda name=name: _filler(kept.blocks[name], rows)))
                kept_states = into.states
            return out_state, kept_states

        out_state, kept_states = self._rounds(columns, column, states)
        set_seeds(seeds, bases, P)
        return out_state, (None if kept is None else kept.with_states(kept_states)), bases

    # ---- from a store, or over several devices: backward ----

    def _stream_gradient(self, dy, last):
        """d (the last stage's output) in the host tier, from d (the model's output, the user's order)."""
        out = last["output"].blocks
        d_out = self._blocks("d", out.home if out.home != "device" else "host", out.row_shape, out.dtype,
                             name=f"d_{out.name}")
        with tf.device(self._host_device()):
            return _BlockRows(d_out, d_out.from_rows(self._to_intervals(dy)))

    def _stream_backward(self, index, stage, record, d_out, grads, training):
        """d of the stage's inputs (a list of host-tier rows; None for the store's features) from d of its output;
        adds d weights into grads."""
        prologue = record.get("prologue")
        if prologue is not None:  # in memory: the blocks' backward, then the prologue's tape
            d_rows = d_out
            if stage.graph_layer is not None:
                d_rows = self._blocks_backward(index, stage.without_prologue(index), record, d_out, grads,
                                               training)[0]
            d_y = self._to_users(self._whole(d_rows))
            d_xs = _tape_backward(prologue["tape"], prologue["output"], prologue["inputs"], prologue["weights"], d_y,
                                  grads)
            return [self._host_rows(d_x, f"d_p{index}_{k}") for k, d_x in enumerate(d_xs)]
        return self._blocks_backward(index, stage, record, d_out, grads, training)

    def _blocks_backward(self, index, stage, record, d_out, grads, training):
        inps = record["inputs"]
        weights = stage.weights()
        if stage.graph_layer is None:
            return self._tiles_backward(index, stage, inps, training, lambda y: {"out": y}, {"out": d_out},
                                        record["tile_seeds"], weights, grads)
        kernels, loops = record["kernels"], record["loops"]
        hoisted, kept = record["hoisted"], record["kept"]
        if hoisted is None or kept is None:  # recompute: H and C again, from the stage's input
            hoisted, _ = self._hoist(index, stage, inps, training, kernels, replay=record["tile_seeds"])
            _, kept, _ = self._columns(index, kernels, loops, hoisted, keep=True, replay=record["chunk_seeds"])
        home = self._host_home()
        d_hoisted = {key: self._blocks(key, home, shape, dtype, name=f"L{index}:d:{key}")
                     for key, (shape, dtype) in kernels.key_specs().items()}
        d_states = {key: b.filled(0) for key, b in d_hoisted.items()}
        # V: ApplyVertex's backward, column by column (each on its owner).
        d_columns, d_states = self._vertex_backward(index, kernels, loops, hoisted, kept, d_out, d_hoisted, d_states,
                                                    grads, record["chunk_seeds"][1])
        # E: the chunks' backward.
        d_rows = Arrays({key: d_hoisted[key] for key in kernels.source_keys + kernels.dest_keys},
                        {key: d_states[key] for key in kernels.source_keys + kernels.dest_keys})
        new_states, d_weights = self._chunks_backward(kernels, loops, hoisted, kept, d_columns, d_rows,
                                                      record["chunk_seeds"][0])
        _add(grads, kernels.weights, d_weights)
        d_states.update(new_states)
        # H: the vertex stage's backward, tile by tile.
        d_keys = {key: _BlockRows(d_hoisted[key], d_states[key]) for key in d_hoisted}
        return self._tiles_backward(index, stage, inps, training, kernels.hoist, d_keys, record["tile_seeds"],
                                    weights, grads, _seeds(kernels.hoist_variables()))

    def _chunks_backward(self, kernels, loops, hoisted, kept, d_columns, d_rows, seeds):
        if self.ring is None:
            return loops.backward(_HostRows(self, hoisted, kernels, 0), self._lane_chunks(0), kept[0], d_columns[0],
                                  d_rows, seeds)
        chunks = [self._lane_chunks(d) for d in range(len(self.lanes))]
        if not kernels.column_wide:
            return self._ring_plan(kernels).backward(
                lambda d, i: self._fetch(hoisted, kernels, d, i, kernels.source_keys), kernels.key_specs(),
                lambda d, j: self._fetch(hoisted, kernels, d, j, kernels.dest_keys), kept, d_columns, chunks,
                d_rows, seeds)
        # Column-wide layers: each lane's chunks, column by column, d rows summed per lane, then on the host.
        P = self.partition.num_parts
        owned = [[j for j in range(P) if self.ring.owner(j) == lane] for lane in self.lanes]
        weights = None
        partials = []
        for d, lane in enumerate(self.lanes):
            lane_loops = self._lane_loops(kernels, loops, owned[d])
            lane_rows = self._zero_arrays(d_rows, list(d_rows.blocks), "device", device=lane)
            with tf.device(lane):
                states, lane_weights = lane_loops.backward(_HostRows(self, hoisted, kernels, d), chunks[d], kept[d],
                                                           d_columns[d], lane_rows, seeds)
            partials.append(lane_rows.with_states(states))
            weights = lane_weights if weights is None else [a + b for a, b in zip(weights, lane_weights)]

        def add(d, part, states):
            into = d_rows.with_states(states)
            for key in d_rows.blocks:
                into.add(key, part, partials[d].get(key, part))
            return into.states

        every = list(range(P))
        return self._rounds([every for _ in self.lanes], add, d_rows.states), weights

    def _vertex_backward(self, index, kernels, loops, hoisted, kept, d_out, d_hoisted, d_states, grads, bases):
        """For every column, on its owner: d A[j] (for mean, d of the column sums) into per-lane arrays, and d
        vertex rows into d_hoisted."""
        P = self.partition.num_parts
        weights = kernels.weights
        lanes = self.lanes
        owners = [0] * P if self.ring is None else [lanes.index(self.ring.owner(j)) for j in range(P)]
        owned = [[j for j in range(P) if owners[j] == d] for d in range(len(lanes))]
        d_columns = []
        for d, lane in enumerate(lanes):
            home = "device" if self.ring is not None else self._host_home()
            blocks = {f"acc{r}": self._blocks(f"acc{r}", home, kernels.feature_shape, kernels.dtype,
                                              name=f"L{index}@{d}:dA{r}", device=lane)
                      for r in range(len(kernels.reduces))}
            with on_lane(lane):
                d_columns.append(Arrays(blocks, {name: _fresh(b) for name, b in blocks.items()}))

        seeds = _seeds(kernels.vertex_variables())

        def column(d, j, carried):
            column_states, d_states, d_weights = carried
            set_seeds(seeds, bases, j)
            accumulated = [kept[d].get(f"acc{r}", j) for r in range(len(kernels.reduces))]
            vertex_rows = _HostRows(self, hoisted, kernels, d).rows(kernels.vertex_keys, j)
            watched = accumulated + list(vertex_rows.values())
            with tf.GradientTape() as tape:
                tape.watch(watched)
                finished = [self._finish(a, reduce, loops.degree, loops.bounds, j)
                            for a, reduce in zip(accumulated, kernels.reduces)]
                out = kernels.vertex(finished, vertex_rows)
            result = _gradients(tape, out, watched + weights, d_out.get(j))
            n = len(accumulated)
            column_states = list(column_states)
            cols = d_columns[d].with_states(column_states[d])
            for r in range(n):
                cols.put(f"acc{r}", j, result[r])
            column_states[d] = cols.states
            d_states = dict(d_states)
            for key, value in zip(vertex_rows, result[n:n + len(vertex_rows)]):
                d_states[key] = d_hoisted[key].put(d_states[key], j, value)
            return (tuple(column_states), d_states,
                    [a + b for a, b in zip(d_weights, result[n + len(vertex_rows):])])

        zero = [tf.zeros(tf.shape(w), w.dtype) for w in weights]
        column_states, d_states, d_weights = self._rounds(
            owned, column, (tuple(c.states for c in d_columns), d_states, zero))
        set_seeds(seeds, bases, P)
        _add(grads, weights, d_weights)
        return [c.with_states(s) for c, s in zip(d_columns, column_states)], d_states

    def _tiles_backward(self, index, stage, inps, training, fn, d_named, tile_seeds, weights, grads, seeds=()):
        """Recomputes fn(prologue(rows)) tile by tile under a tape (drawing the forward's random numbers) and
        returns d of each input's rows (in the host tier; None for the store's features) given d named outputs;
        adds d weights."""
        tiles = self._tiles(inps)
        seeds = stage.seeds() + list(seeds)
        d_ins = [None if inp.blocks is None else
                 self._blocks("d_in", self._host_home(), inp.row_shape, inp.dtype, name=f"L{index}:d_in{k}")
                 for k, inp in enumerate(inps)]
        wanted = [k for k, d_in in enumerate(d_ins) if d_in is not None]
        zero = [tf.zeros(tf.shape(w), w.dtype) for w in weights]
        names = list(d_named)

        def interval(d, p, carried):
            d_states, d_weights = carried
            first, count = tiles.first[p], tiles.count[p]
            pieces = [tf.TensorArray(inps[k].dtype, size=count, infer_shape=False,
                                     element_shape=tf.TensorShape([None] + list(inps[k].row_shape))) for k in wanted]
            d_blocks = {name: d_named[name].get(p) for name in names}

            def tile(t, pieces, d_weights):
                start, stop = tiles.table[first + t][1], tiles.table[first + t][2]
                set_seeds(seeds, tile_seeds, first + t)
                xs = [inp.rows(p, start, stop) for inp in inps]
                with tf.GradientTape() as tape:
                    tape.watch(xs)
                    values = fn(stage.prologue_of(xs, training))
                targets = [values[name] for name in names]
                result = _gradients(tape, targets, [xs[k] for k in wanted] + weights,
                                    [d_blocks[name][start:stop] for name in names])
                pieces = [piece.write(t, value) for piece, value in zip(pieces, result)]
                return t + 1, pieces, [a + b for a, b in zip(d_weights, result[len(wanted):])]

            _, pieces, d_weights = tf.while_loop(lambda t, *_: t < count, tile, (tf.constant(0), pieces, d_weights))
            d_states = tuple(d_ins[k].put(state, p, piece.concat()) for k, state, piece in zip(wanted, d_states, pieces))
            return d_states, d_weights

        d_states = tuple(_fresh(d_ins[k]) for k in wanted)
        d_states, d_weights = self._rounds(self._by_lane(self._loaders()), interval, (d_states, zero))
        set_seeds(seeds, tile_seeds, len(tiles.rows))
        _add(grads, weights, d_weights)
        found = dict(zip(wanted, d_states))
        return [None if d_in is None else _BlockRows(d_in, found[k]) for k, d_in in enumerate(d_ins)]

    # ---- blocks ----

    def _blocks(self, key, home, row_shape, dtype, name=None, device=None):
        """A Blocks array called `key` (a file named after `name` on disk)."""
        blocks = Blocks(key, home, self.sizes, row_shape, dtype, device=device, host=self._host_device(),
                        path=self._file(name or key) if home == "disk" else None)
        self._count_disk([blocks])
        return blocks

    def _file(self, name):
        """A file of its own for every disk array a traced step makes. Reads of a file are ordered only after
        the writes whose tokens they take, so a file is never rewritten in a step by another array (the
        backward's recompute of a layer, say) while an earlier reader may still be running."""
        self._serial += 1
        path = os.path.join(self._directory(), f"{self._serial:05d}_"
                            + "".join(c if c.isalnum() or c in "_-." else "_" for c in name) + ".bin")
        self._files[path] = 0  # (its bytes: _count_disk)
        return path

    def _count_disk(self, blocks):
        for b in blocks:
            if b.home == "disk":
                self._files[b.path] = b.nbytes

    def _check_spill_space(self):
        """When a pass is traced, before it runs: the spill files it names that are not on disk yet must fit
        (so a disk too small fails before the first step, naming the bytes needed and free)."""
        if self.source.streamed and self.host == "disk":
            needed = sum(nbytes for path, nbytes in self._files.items() if not os.path.exists(path))
            faults.check_spill_space(self.spill_directory(), needed)

    def spill_directory(self) -> str:
        """Where a disk host tier's files go (in a directory of this executor's own): spill_dir, or the
        system's temporary directory."""
        return os.path.abspath(self.spill_dir) if self.spill_dir is not None else tempfile.gettempdir()

    def _directory(self):
        """This executor's own directory for the host tier's files, made inside spill_dir (or the system's
        temporary directory), so that two trainers or two models given one spill_dir never write each other's
        files. Traced functions name files in it, so its path lives as long as the executor; it is made again
        after close() removes it."""
        parent = self.spill_directory()
        try:
            if self._owned_dir is None:
                if os.path.exists(parent) and not os.path.isdir(parent):
                    raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a directory")
                if not os.path.isdir(parent):
                    made = parent  # the outermost missing directory: close() removes it whole
                    while not os.path.exists(os.path.dirname(made)):
                        made = os.path.dirname(made)
                    self._made_dirs.append(made)
                    os.makedirs(parent, mode=0o700, exist_ok=True)
                self._owned_dir = tempfile.mkdtemp(prefix="ngra-spill-", dir=parent)
                self._made_dirs.append(self._owned_dir)
            os.makedirs(self._owned_dir, mode=0o700, exist_ok=True)
        except OSError as error:
            raise faults.SpillDirectoryError(
                f"spill directory {parent}: cannot make the host tier's directory in it "
                f"({error.strerror or error}): pass a directory you can write (spill_dir=, train.py --spill_dir)"
                + ("" if self.spill_dir is None else f", or none to use {tempfile.gettempdir()}")) from None
        return self._owned_dir

    def open(self):
        """Before a run: remakes the directory close() removed, which traced steps write into."""
        if self._files:
            self._directory()

    def close(self):
        """Removes the host tier's files and the directories made for them; open() before the next run."""
        _remove_host_tier(self._files, self._made_dirs)

    def fault(self, error):
        """A TrainingFault for `error` (a failed run's tf.errors.OpError) when it names one of this executor's
        files (a spill file that could not be written, a store file that changed), else None."""
        store = self.source.store if self.source.streamed else None
        return faults.translate(error, self._files, self.spill_directory(), store)

    def _device_arrays(self, values: dict) -> Arrays:
        blocks = {name: Blocks(name, "device", self.sizes, value.shape[1:].as_list(), value.dtype)
                  for name, value in values.items()}
        return Arrays(blocks, {name: blocks[name].from_rows(values[name]) for name in values})

    def _zero_arrays(self, like: Arrays, names, home, device=None):
        blocks = {name: Blocks(name, home, self.sizes, like.blocks[name].row_shape, like.blocks[name].dtype,
                               device=device) for name in names}
        with on_lane(device):
            return Arrays(blocks, {name: b.filled(0) for name, b in blocks.items()})

    def _column_arrays(self, loops, home, filled, prefix=""):
        blocks = loops.column_arrays(home, host=self._host_device(), file=lambda name: self._file(prefix + name))
        self._count_disk(blocks.values())
        states = {}
        for name, b in blocks.items():
            fill = -1 if name.startswith(("won", "edge")) else 0
            states[name] = b.filled(fill) if filled or home == "disk" else b.empty()
        return Arrays(blocks, states)

    # ---- orders and finishing ----

    def _to_intervals(self, rows):
        p = self.partition
        return rows if p.identity_order else tf.gather(rows, p.order_tensor())

    def _to_users(self, rows):
        p = self.partition
        return rows if p.identity_order else tf.gather(rows, p.position_tensor())

    @staticmethod
    def _finish(column_sums, reduce, degree, bounds=None, j=None):
        """A[j] from the chain's result: mean divides the column sums by the in-degree (of interval j's rows,
        or of all rows in interval order)."""
        if reduce != "mean":
            return column_sums
        return column_sums / _per_row(degree, column_sums, bounds, j)

    @staticmethod
    def _unfinish(d, reduce, degree):
        return d if reduce != "mean" else d / _per_row(degree, d)


@dataclasses.dataclass
class _Tiles:
    table: tf.Tensor  # [tiles, 3]: interval, first row, stop row
    first: tf.Tensor  # [P]: each interval's first tile
    count: tf.Tensor  # [P]: its number of tiles
    rows: list


class _Rows:
    """A stage's input as blocks of rows: rows(part, start, stop) on the device."""

    def __init__(self, read, row_shape, dtype, blocks, state):
        self._read, self.row_shape, self.dtype = read, tuple(row_shape), tf.as_dtype(dtype)
        self.blocks, self.state = blocks, state

    def rows(self, part, start, stop):
        return self._read(part, start, stop)


class _BlockRows(_Rows):
    """Rows held in a Blocks array (the host tier), with its state."""

    def __init__(self, blocks: Blocks, state):
        super().__init__(lambda part, start, stop: blocks.get_rows(state, part, start, stop), blocks.row_shape,
                         blocks.dtype, blocks, state)

    def get(self, part):
        return self.blocks.get(self.state, part)


class _HostRows:
    """Hoisted rows as a chunk loop on lane d reads them: rows(keys, part) (see Executor._fetch)."""

    def __init__(self, executor, hoisted, kernels, d):
        self.executor, self.hoisted, self.kernels, self.d = executor, hoisted, kernels, d

    def rows(self, keys, part) -> dict:
        if not keys:
            return {}
        return self.executor._fetch(self.hoisted, self.kernels, self.d, part, keys)


def _seeds(variables):
    """The seed-generator states among `variables` (the random ops' state: dropout)."""
    return [v for v in variables if "seed_generator_state" in v.name]


def _fresh(blocks):
    """A state with nothing written yet (every block is put before it is read)."""
    with on_lane(blocks.device if blocks.home == "device" else blocks.host):
        return blocks.empty()


def _filler(blocks, rows):
    """A block of `rows` rows for a column no chunk reaches: -1 for max / min winners, 0 otherwise."""
    fill = -1 if blocks.name.startswith(("won", "edge")) else 0
    return tf.fill(tf.concat([[rows], tf.constant(blocks.row_shape, tf.int32)], 0), tf.cast(fill, blocks.dtype))


def _arrays(named: dict) -> Arrays:
    """Arrays of _BlockRows values."""
    return Arrays({key: value.blocks for key, value in named.items()},
                  {key: value.state for key, value in named.items()})


def _per_row(degree, like, bounds=None, j=None):
    values = tf.constant(degree.clip(min=1), like.dtype)
    if j is not None:
        values = values[bounds[j]:bounds[j + 1]] if isinstance(j, int) else \
            values[tf.gather(tf.constant(bounds), j):tf.gather(tf.constant(bounds), j + 1)]
    return tf.reshape(values, [-1] + [1] * (like.shape.rank - 1))


def _gradients(tape, targets, sources, output_gradients):
    result = tape.gradient(targets, sources, output_gradients=output_gradients)
    return [tf.zeros(tf.shape(s), s.dtype) if g is None else tf.convert_to_tensor(g) for s, g in zip(sources, result)]


def _tape_backward(tape, targets, xs, weights, d_targets, grads):
    """d xs (a list) of targets recorded on tape; adds d weights into grads."""
    result = _gradients(tape, targets, list(xs) + weights, d_targets)
    _add(grads, weights, result[len(xs):])
    return result[:len(xs)]


def _remove_host_tier(files, made_dirs):
    """Deletes the host tier's files and the directories made for them (whole: nothing else was put there)."""
    for path in files:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
    for directory in made_dirs:
        shutil.rmtree(directory, ignore_errors=True)


def _add(grads: dict, variables, values):
    for variable, value in zip(variables, values):
        key = id(variable_of(variable))
        grads[key] = value if key not in grads else grads[key] + value


__all__ = ["Executor", "SPILL_POLICIES", "TILE_BYTES"]
