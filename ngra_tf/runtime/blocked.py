"""A stage over interval blocks: from a store, or over several devices. Traced once per signature.

Everything is a loop over blocks of rows (ngra_tf.runtime.blocks) whose
states the loops carry; the memory a budget bounds holds one step's data.
Per stage, forward:

    H  the prologue and the graph layer's hoisted vertex stage, tile by tile (ngra_tf.runtime.tiles: at most
       tile_bytes of input rows at a time), each interval on one lane (ngra_tf.runtime.lanes), into the host tier
    C  the chunk loops: ChunkLoops (one lane, column by column) or RingLoops (several, row by row)
    V  ApplyVertex per column on its owner: at the column's last chunk (ngra, one lane), or after the loop

and backward, last stage first, with no tape kept from the forward: V and H
are recomputed under tapes of their own (per column, per tile), C runs its
backward loop; with spill="recompute" H and C run again first, from the
stage's input. Random ops draw the same numbers every time a tile, column or
chunk runs again: their seed states are base + [0, k] (loops.set_seeds).

A `BlockedStage` is made from the first stage of its signature; `forward`
and `backward` take everything of a particular stage as arguments
(ngra_tf.runtime.shared): its variables, the states of its input and kept
blocks, the prefix its spill files are named by. In memory over several
devices the prologue has already run on all rows (the executor keeps its
tape) and the stage here is the graph layer alone.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.copy import copy_d2d, copy_h2d
from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.lanes import by_lane, rounds
from ngra_tf.runtime.loops import Arrays, column_result, set_seeds
from ngra_tf.runtime.residency import on_lane
from ngra_tf.runtime.ring_loops import RingLoops
from ngra_tf.runtime.spill import file_name
from ngra_tf.runtime.tiles import BlockRows, BoundPrologue, RowTiles, TilePasses, fresh, gradients, row_bytes


class BlockedStage:
    """The forward and backward of one signature of stage over blocks (see the module doc).

    `stage` is the first of its signature (its prologue run bound to a caller's variables, see
    BoundPrologue); `kernels`, `loops` its graph layer's (None: a per-vertex stage); `spec` the rows its
    prologue makes.
    """

    def __init__(self, executor, stage, kernels, loops, spec, training, input_specs, signature, name):
        self.executor, self.stage, self.kernels, self.loops = executor, stage, kernels, loops
        self.spec, self.training, self.signature, self.name = spec, bool(training), signature, name
        self.input_specs = input_specs  # per input: (row shape, dtype name, "store" or the home of its blocks)
        self.lanes, self.residency = executor.lanes, executor.residency
        self.streamed = self.residency.streamed
        self.sizes = executor.sizes
        self.layouts = {}  # call kind -> {file name: bytes}: the spill files a call writes under its prefix
        self.tile_passes = TilePasses(self.lanes, executor.parallel)

    # ---- binding a call's arguments ----

    def _bind(self, args, kind):
        self._kind, self._prefix = kind, args.get("prefix")
        self.layouts[kind] = {}
        self.prologue = BoundPrologue(self.stage.prologue, args["prologue"], self.training)
        if self.kernels is not None:
            self.k = self.kernels.bind(args["layer"])
            self.l = self.loops.bind(self.k)
            if self.lanes.ring is not None:
                self.ring = RingLoops(self.l)
        self.inputs = [self._input(k, state) for k, state in enumerate(args["inputs"])]
        self._offsets = args.get("cache", {})  # where this call's chunk loops start in a training step's accesses
        self._after = None  # the last pass's token: the cache's plan runs the passes' reads in order

    def _input(self, k, state):
        row_shape, dtype, home = self.input_specs[k]
        if home == "store":
            return self.executor.store_rows(after=state[0])
        return BlockRows(self._array(f"in{k}", home, row_shape, dtype, path=state[1]), state[0])

    def _pass_done(self, states):
        """The reads of the next pass wait for this one's results (`states`, a nest of block states): a loop's
        reads depend on nothing else, and would run ahead of the cache plan's order."""
        if not self.residency.streamed or not self.residency.cached:
            return
        token = tf.constant(0, tf.int64)
        for state in tf.nest.flatten(states):
            # (a list's length may be known when the graph is optimised, and folded away: an element is not)
            value = tf.size(state.read(0), tf.int64) if isinstance(state, tf.TensorArray) else tf.cast(state, tf.int64)
            token = token + tf.minimum(tf.reduce_sum(value), 0)
        self._after = token

    def _array(self, role, home, row_shape, dtype, device=None, name=None, path=None):
        """A Blocks array of this call called `name` (default: its role); on disk, the file prefix + role (or
        `path`, a path argument: an array another call made)."""
        if home == "disk" and path is None:
            file = file_name(role) + ".bin"
            path = tf.strings.join([self._prefix, file])
            self.layouts[self._kind][file] = int(np.sum(self.sizes)) * row_bytes(row_shape, dtype)
        return Blocks(name or role, home, self.sizes, row_shape, dtype, device=device, host=self.lanes.host,
                      path=path if home == "disk" else None, copies=self.executor.copies)

    def result_blocks(self, kind, prefix) -> dict:
        """The arrays a call of `kind` leaves for the executor: the forward's output ("out"), the backward's d of
        each input ("d_in{k}"); on disk, in files under the call's prefix."""
        def blocks(role, home, row_shape, dtype):
            path = prefix + file_name(role) + ".bin" if home == "disk" else None
            return Blocks(role, home, self.sizes, row_shape, dtype, host=self.lanes.host, path=path,
                          copies=self.executor.copies)

        if kind == "forward":
            out = self.spec if self.kernels is None else self.kernels.program.vertex.output
            return {"out": blocks("out", self._host_home(), out.shape[1:].as_list(), out.dtype)}
        return {f"d_in{k}": blocks(f"d_in{k}", self._host_home(), row_shape, dtype)
                for k, (row_shape, dtype, home) in enumerate(self.input_specs) if home != "store"}

    # ---- forward ----

    def forward(self, args):
        self._bind(args, "forward")
        inps = self.inputs
        if self.kernels is None:
            out = self._array("out", self.residency.host_home, self.spec.shape[1:].as_list(), self.spec.dtype)
            states, seeds = self._map_tiles(inps, lambda y: {"out": y}, {"out": (tuple(self.spec.shape[1:]),
                                                                                   self.spec.dtype)},
                                            by_lane(self.lanes, self.lanes.loaders()),
                                            [{"out": out} for _ in self.lanes.devices],
                                            offset=self._offsets.get("forward_tiles"))
            return {"out": states["out"], "seeds": seeds}
        keep = self.training and self.executor.spill == "spill"
        hoisted, tile_seeds = self._hoist(inps, "", offset=self._offsets.get("forward_tiles"))
        out, kept, seeds = self._columns(hoisted, keep, "", offset=self._offsets["forward"])
        record = {"out": out, "seeds": (tile_seeds, seeds)}
        if keep or not self.streamed:
            record["hoisted"] = hoisted[1]
        if kept is not None:
            record["kept"] = [arrays.states for arrays in kept]
        return record

    # ---- per-vertex passes: row tiles ----

    def _tiles(self, inps) -> RowTiles:
        """Each interval's tiles: rows of the inputs at most tile_bytes at a time (the whole interval in memory)."""
        width = max(1, sum(inp.row_nbytes for inp in inps))
        return RowTiles.of(self.sizes, width,
                           self.executor.tile_bytes if self.streamed else width * max(1, int(self.sizes.max())))

    def _map_tiles(self, inps, fn, specs, items, outputs, replay=None, seeds=(), offset=None):
        """TilePasses.forward of fn over the inputs (`replay`: a forward's seed bases, else drawn now): (the
        outputs' states, the seed bases)."""
        seeds = list(seeds)
        bases = (self.prologue.seed_bases(), tuple(v.read_value() for v in seeds)) if replay is None else replay
        states = self.tile_passes.forward(self._tiles(inps), inps, self.prologue, fn, specs, items, outputs, bases,
                                          seeds, offset, self._after)
        self._pass_done(states)
        return states, bases

    def _hoist(self, inps, prefix, replay=None, offset=None):
        """H: the hoisted rows of every interval, by key: ((blocks, states), seed bases)."""
        outputs = self._hoisted_outputs(prefix)
        states, seeds = self._map_tiles(inps, self.k.hoist, self.k.key_specs(), self._hoist_items(), outputs,
                                        replay, self.k.seeds(self.k.hoist_variables()), offset)
        blocks = {key: b for lane_outputs in outputs for key, b in lane_outputs.items()}
        return (blocks, states), seeds

    def _hoisted_outputs(self, prefix):
        """Where a layer's hoisted rows go: one host-tier array per key, or (in memory over several devices)
        one array per key on each lane, holding what that lane loaded."""
        specs = self.k.key_specs()
        if self.streamed or self.lanes.ring is None:
            shared = {key: self._array(f"{prefix}h:{_position(self.k, key)}", self._host_home(), shape, dtype,
                                       name=key) for key, (shape, dtype) in specs.items()}
            return [shared for _ in self.lanes.devices]
        return [{f"{key}@{d}": Blocks(key, "device", self.sizes, shape, dtype, device=lane)
                 for key, (shape, dtype) in specs.items()} for d, lane in enumerate(self.lanes.devices)]

    def _host_home(self):
        return self.residency.host_home if self.streamed else "host"

    def _hoist_items(self):
        """Which lane hoists which intervals: each interval once (a store, one lane), or in memory over several
        devices on the loader of every route that carries it or leads to its owner."""
        if self.streamed or self.lanes.ring is None:
            return by_lane(self.lanes, self.lanes.loaders())
        plan, items = self.ring.plan, [[] for _ in self.lanes.devices]
        for i in range(self.executor.partition.num_parts):
            for d in sorted(set(plan.loaders[i]) | {self.lanes.holder(plan.owner[i], i)}):
                items[d].append(i)
        return items

    def _fetch(self, hoisted, d, part, keys):
        """Interval `part`'s hoisted rows `keys` on lane d: from the host tier (copy_h2d), or in memory over
        several devices from the lane holding them (copy_d2d, none when it is d)."""
        blocks, states = hoisted
        lane = self.lanes.devices[d]
        if self.streamed or self.lanes.ring is None:
            with on_lane(lane):
                return {key: blocks[key].get(states[key], part) for key in keys}
        holders = [self.lanes.holder(d, i) for i in range(self.executor.partition.num_parts)]
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

    # ---- C and V ----

    def _columns(self, hoisted, keep, prefix, replay=None, offset=None):
        """C and V: the output rows (host tier), what backward needs of the columns (when `keep`), and the
        chunks' and columns' seed bases. `offset`: where the chunk loop starts in a training step's accesses
        (plan.cache)."""
        if self.lanes.ring is None:
            return self._one_lane_columns(hoisted, keep, prefix, replay, offset)
        return self._ring_columns(hoisted, keep, prefix, replay)

    def _output_blocks(self, prefix):
        out = self.k.program.vertex.output
        return self._array(f"{prefix}out", self.residency.host_home if self.streamed else "host",
                           out.shape[1:].as_list(), out.dtype)

    def _column_blocks(self, home, prefix, device=None) -> dict:
        """Blocks for what the forward leaves per column (loops.column_arrays' names), at `home`."""
        return {name: self._array(prefix + name, home, b.row_shape, b.dtype, device=device, name=name)
                for name, b in self.l.column_arrays("device").items()}

    def _column_arrays(self, home, filled, prefix, device=None) -> Arrays:
        blocks = self._column_blocks(home, prefix, device)
        states = {name: (b.filled(_fill(name)) if filled or home == "disk" else fresh(b))
                  for name, b in blocks.items()}
        return Arrays(blocks, states)

    def _one_lane_columns(self, hoisted, keep, prefix, replay, offset):
        """One device, column by column. ngra keeps A[j] on the device for its column and runs ApplyVertex when
        the column's last chunk is done; stage keeps it there for the column, then in the host tier until
        every chunk is done; dest-order keeps it in the host tier between chunks (loaded and stored by every
        step)."""
        P, schedule, k = self.executor.partition.num_parts, self.executor.schedule, self.k
        home = self._host_home()
        if schedule == "dest-order" and self.streamed:
            live, kept = self._column_arrays(home, True, f"{prefix}live:"), None
        else:
            live = self._column_arrays("device", not self.streamed, f"{prefix}live:")
            keeping = self.streamed and (keep or schedule == "stage")
            kept = self._column_arrays(home, True, f"{prefix}kept:") if keeping else None
        out = self._output_blocks(prefix)
        rows = _LaneRows(self, hoisted, 0)
        in_loop = schedule == "ngra" or not self.streamed

        def finish(j, cols):
            """At column j's last chunk: keep its A[j] (and winners, statistics), ApplyVertex (ngra, or in
            memory), free its device blocks."""
            for name in live.blocks if kept is not None else ():
                cols.put(f"kept:{name}", j, cols.get(name, j))
            if in_loop:
                accumulated = [column_result(cols.get(f"acc{r}", j), reduce, self.l.degree, self.l.bounds, j)
                               for r, reduce in enumerate(k.reduces)]
                cols.put("out", j, k.vertex(accumulated, rows.rows(k.vertex_keys, j)))
            if self.streamed:
                for name, blocks in live.blocks.items():
                    cols.put(name, j, tf.zeros([0] + list(blocks.row_shape), blocks.dtype))
            return cols

        blocks, states = dict(live.blocks, out=out), dict(live.states, out=fresh(out))
        for name in kept.blocks if kept is not None else ():
            blocks[f"kept:{name}"], states[f"kept:{name}"] = kept.blocks[name], kept.states[name]
        columns = Arrays(blocks, states)
        column_states, seeds = self.l.forward(rows, self.residency.chunks(self.lanes, 0, offset, self._after), columns,
                                              finish if in_loop or kept is not None else None,
                                              None if replay is None else replay[0],
                                              self._selector(hoisted) if replay is None else None)
        columns = columns.with_states(column_states)
        self._pass_done(column_states)
        if kept is None:
            finals = live.with_states({name: columns.states[name] for name in live.blocks})
        else:
            finals = kept.with_states({name: columns.states[f"kept:{name}"] for name in kept.blocks})
        # ApplyVertex of the columns no chunk reached (ngra), or of every column (stage, dest-order).
        pending = [j for j in range(P) if not in_loop or not self.executor.partition.edge_counts[:, j].any()]
        out_state, _, vertex_seeds = self._vertex_pass(hoisted, [finals], out, columns.states["out"], [pending],
                                                       bases=None if replay is None else replay[1])
        return out_state, ([finals] if keep else None), (seeds, vertex_seeds)

    def _selector(self, hoisted):
        """select(c, i) for the chunk loop: a selected chunk copies only the source rows its edges leave from,
        gathered on the host, and is renumbered to them (CSC sources remapped, empty CSR rows dropped); the
        kernels then see a smaller interval and give the same result."""
        residency = self.residency
        if not (self.streamed and residency.selective and self.lanes.ring is None) or not residency.selected_chunks():
            return None
        P = self.executor.partition.num_parts
        chosen = tf.constant([c in residency.selected_chunks() for c in range(P * P)])
        reader, k = residency.reader, self.k
        blocks, states = hoisted
        copies = self.executor.copies

        def select(c, i):
            host = reader.chunk(c)
            t = host.adjacency.tensors()
            rows = {key: blocks[key].get_host(states[key], i) for key in k.source_keys}

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
            move = copy_h2d if copies else (lambda value: value)
            src = {key: move(value) for key, value in src.items()}
            loaded = LoadedChunk(LoadedAdjacency(AdjacencyTensors(*(move(a) for a in arrays))),
                                 None if host.edge_data is None else move(host.edge_data),
                                 lambda: move(host.edge_ids_tensor()))
            return loaded, src

        return select

    def _ring_columns(self, hoisted, keep, prefix, replay):
        """Several devices: each lane's columns' accumulators stay on it; rows are shared along routes (RingLoops)
        or, for column-wide layers, each lane takes its columns one at a time (ChunkLoops per lane). ApplyVertex
        runs lane by lane after every chunk."""
        k, lanes = self.k, self.lanes
        owned = [lanes.columns(d) for d in range(len(lanes))]
        live = [self._lane_column_arrays(lane) for lane in lanes.devices]
        chunks = [self.residency.chunks(lanes, d) for d in range(len(lanes))]
        if k.column_wide:
            states, seeds = [], self.l.seed_bases() if replay is None else replay[0]
            for d, lane in enumerate(lanes.devices):
                with tf.device(lane):
                    lane_states, _ = self._lane_loops(owned[d]).forward(_LaneRows(self, hoisted, d), chunks[d],
                                                                        live[d], None, seeds)
                states.append(lane_states)
        else:
            states, seeds = self.ring.forward(lambda d, i: self._fetch(hoisted, d, i, k.source_keys), k.key_specs(),
                                              lambda d, j: self._fetch(hoisted, d, j, k.dest_keys), live, chunks,
                                              lambda d, j, cols: cols, None if replay is None else replay[0])
        live = [arrays.with_states(lane_states) for arrays, lane_states in zip(live, states)]
        out = self._output_blocks(prefix)
        kept = None
        if keep and self.streamed:  # what backward reloads: A[j] (and winners, statistics) in the host tier
            kept = self._column_arrays(self._host_home(), True, f"{prefix}kept:")
        out_state, kept, vertex_seeds = self._vertex_pass(hoisted, live, out, fresh(out), owned, kept,
                                                          None if replay is None else replay[1])
        kept = live if not self.streamed else [kept] * len(lanes) if kept is not None else None
        return out_state, (kept if keep or not self.streamed else None), (seeds, vertex_seeds)

    def _lane_column_blocks(self, lane) -> dict:
        blocks = self.l.column_arrays("device", device=lane)
        for key in self.k.dest_keys:  # a column's destination rows, held with its accumulators
            shape, dtype = self.k.key_specs()[key]
            blocks[f"dst:{key}"] = Blocks(f"dst:{key}", "device", self.sizes, shape, dtype, device=lane)
        return blocks

    def _lane_column_arrays(self, lane):
        blocks = self._lane_column_blocks(lane)
        with tf.device(lane):
            states = {name: b.filled(_fill(name)) for name, b in blocks.items()}
        return Arrays(blocks, states)

    def _lane_loops(self, columns):
        return self.l.for_columns(columns)

    def _vertex_pass(self, hoisted, finals, out, out_state, columns, kept=None, bases=None):
        """ApplyVertex on each lane's `columns` from A in finals[d] (zeros where no chunk reaches the column),
        into `out`; with `kept`, also copies each column's A (winners, statistics) there. Returns out's state
        (and kept's) and the seed bases."""
        k, P = self.k, self.executor.partition.num_parts
        has_chunks = tf.constant([bool(self.executor.partition.edge_counts[:, j].any()) for j in range(P)])
        states = (out_state, () if kept is None else kept.states)
        seeds = k.seeds(k.vertex_variables())
        bases = tuple(v.read_value() for v in seeds) if bases is None else bases

        def column(d, j, carried):
            out_state, kept_states = carried
            set_seeds(seeds, bases, j)  # column j draws with base + [0, j] (again in backward)
            source = finals[d]
            accumulated = []
            for r, reduce in enumerate(k.reduces):
                rows = tf.cast(tf.gather(self.l.sizes, j), tf.int32)
                zeros = tf.zeros(tf.concat([[rows], tf.constant(k.feature_shape, tf.int32)], 0), k.dtype)
                value = tf.cond(has_chunks[j], lambda r=r: source.get(f"acc{r}", j), lambda zeros=zeros: zeros)
                accumulated.append(column_result(value, reduce, self.l.degree, self.l.bounds, j))
            vertex_rows = _LaneRows(self, hoisted, d).rows(k.vertex_keys, j)
            out_state = out.put(out_state, j, k.vertex(accumulated, vertex_rows))
            if kept is not None:
                into = kept.with_states(kept_states)
                for name in kept.blocks:
                    into.put(name, j, tf.cond(has_chunks[j], lambda name=name: source.get(name, j),
                                              lambda name=name: _filler(kept.blocks[name], rows)))
                kept_states = into.states
            return out_state, kept_states

        out_state, kept_states = rounds(self.lanes, columns, column, states, self.executor.parallel)
        set_seeds(seeds, bases, P)
        return out_state, (None if kept is None else kept.with_states(kept_states)), bases

    # ---- backward ----

    def backward(self, args):
        """d of the stage's inputs (host-tier states; None for the store's features) and d of its weights
        (prologue's trainable, then the graph layer's), from d of its output."""
        self._bind(args, "backward")
        inps, record = self.inputs, args["record"]
        out_spec = self.spec if self.kernels is None else self.k.program.vertex.output
        d_out = BlockRows(self._array("d_out", self._host_home(), out_spec.shape[1:].as_list(), out_spec.dtype,
                                      path=args["d_out"][1]), args["d_out"][0])
        if self.kernels is None:
            d_ins, d_weights = self._tiles_backward(inps, lambda y: {"out": y}, {"out": d_out}, record["seeds"], [],
                                                    self._offsets.get("backward_tiles"))
            return {"d_inputs": d_ins, "d_weights": d_weights}
        k = self.k
        forward = args["forward_prefix"]
        hoisted = kept = None
        if "hoisted" in record:
            hoisted = self._hoisted_outputs_of(forward, record["hoisted"])
        if "kept" in record:
            kept = self._kept_of(forward, record["kept"])
        tile_seeds, chunk_seeds = record["seeds"]
        if hoisted is None or kept is None:  # recompute: H and C again, from the stage's input
            hoisted, _ = self._hoist(inps, "re:", replay=tile_seeds, offset=self._offsets.get("recompute_tiles"))
            _, kept, _ = self._columns(hoisted, True, "re:", replay=chunk_seeds, offset=self._offsets["recompute"])
        d_hoisted = {key: self._array(f"dh:{_position(k, key)}", self._host_home(), shape, dtype)
                     for key, (shape, dtype) in k.key_specs().items()}
        d_states = {key: b.filled(0) for key, b in d_hoisted.items()}
        # V: ApplyVertex's backward, column by column (each on its owner).
        d_columns, d_states, vertex_weights = self._vertex_backward(hoisted, kept, d_out, d_hoisted, d_states,
                                                                    chunk_seeds[1])
        # C: the chunks' backward.
        keys = k.source_keys + k.dest_keys
        d_rows = Arrays({key: d_hoisted[key] for key in keys}, {key: d_states[key] for key in keys})
        new_states, chunk_weights = self._chunks_backward(hoisted, kept, d_columns, d_rows, chunk_seeds[0])
        d_states.update(new_states)
        # H: the vertex stage's backward, tile by tile.
        d_keys = {key: BlockRows(d_hoisted[key], d_states[key]) for key in d_hoisted}
        d_ins, d_weights = self._tiles_backward(inps, k.hoist, d_keys, tile_seeds, k.seeds(k.hoist_variables()),
                                                self._offsets.get("backward_tiles"))
        n = len(self.prologue.weights)
        layer = [a + b + c for a, b, c in zip(d_weights[n:], vertex_weights, chunk_weights)]
        return {"d_inputs": d_ins, "d_weights": d_weights[:n] + layer}

    def _hoisted_outputs_of(self, prefix_arg, states):
        """The forward's hoisted arrays (its files, under the forward's prefix), with their states."""
        outputs = self._with_prefix(prefix_arg, lambda: self._hoisted_outputs(""))
        blocks = {key: b for lane_outputs in outputs for key, b in lane_outputs.items()}
        return blocks, dict(states)

    def _kept_of(self, prefix_arg, states):
        """The forward's kept column arrays, with their states: per lane."""
        if not self.streamed:  # in memory over several devices: each lane's own live arrays
            return [Arrays(self._lane_column_blocks(lane), dict(s)) for lane, s in zip(self.lanes.devices, states)]
        kind = "live:" if self.lanes.ring is None and self.executor.schedule == "dest-order" else "kept:"
        blocks = self._with_prefix(prefix_arg, lambda: self._column_blocks(self._host_home(), kind))
        return [Arrays(blocks, dict(s)) for s in states]

    def _with_prefix(self, prefix, make):
        """make() with arrays named under another call's prefix (not counted as this call's files)."""
        own, kind = self._prefix, self._kind
        self._prefix, self._kind = prefix, "_other"
        self.layouts["_other"] = {}
        try:
            return make()
        finally:
            self._prefix, self._kind = own, kind
            self.layouts.pop("_other", None)

    def _chunks_backward(self, hoisted, kept, d_columns, d_rows, seeds):
        k, lanes = self.k, self.lanes
        if lanes.ring is None:
            states, weights = self.l.backward(
                _LaneRows(self, hoisted, 0), self.residency.chunks(lanes, 0, self._offsets["backward"], self._after),
                kept[0], d_columns[0], d_rows, seeds)
            self._pass_done(states)
            return states, weights
        chunks = [self.residency.chunks(lanes, d) for d in range(len(lanes))]
        if not k.column_wide:
            return self.ring.backward(lambda d, i: self._fetch(hoisted, d, i, k.source_keys), k.key_specs(),
                                      lambda d, j: self._fetch(hoisted, d, j, k.dest_keys), kept, d_columns,
                                      chunks, d_rows, seeds)
        # Column-wide layers: each lane's chunks, column by column, d rows summed per lane, then on the host.
        P = self.executor.partition.num_parts
        weights, partials = None, []
        for d, lane in enumerate(lanes.devices):
            lane_rows = _zero_arrays(d_rows, list(d_rows.blocks), lane)
            with tf.device(lane):
                states, lane_weights = self._lane_loops(lanes.columns(d)).backward(
                    _LaneRows(self, hoisted, d), chunks[d], kept[d], d_columns[d], lane_rows, seeds)
            partials.append(lane_rows.with_states(states))
            weights = lane_weights if weights is None else [a + b for a, b in zip(weights, lane_weights)]

        def add(d, part, states):
            into = d_rows.with_states(states)
            for key in d_rows.blocks:
                into.add(key, part, partials[d].get(key, part))
            return into.states

        every = list(range(P))
        return rounds(lanes, [every for _ in lanes.devices], add, d_rows.states, self.executor.parallel), weights

    def _vertex_backward(self, hoisted, kept, d_out, d_hoisted, d_states, bases):
        """For every column, on its owner: d A[j] (for mean, d of the column sums) into per-lane arrays, d
        vertex rows into d_hoisted, and ApplyVertex's d weights."""
        k, lanes = self.k, self.lanes
        P = self.executor.partition.num_parts
        owned = [lanes.columns(d) for d in range(len(lanes))]
        d_columns = []
        for d, lane in enumerate(lanes.devices):
            home = "device" if lanes.ring is not None else self._host_home()
            blocks = {f"acc{r}": self._array(f"dA{r}@{d}", home, k.feature_shape, k.dtype, device=lane,
                                             name=f"acc{r}") for r in range(len(k.reduces))}
            with on_lane(lane):
                d_columns.append(Arrays(blocks, {name: fresh(b) for name, b in blocks.items()}))
        seeds = k.seeds(k.vertex_variables())
        weights = k.weights

        def column(d, j, carried):
            column_states, d_states, d_weights = carried
            set_seeds(seeds, bases, j)
            accumulated = [kept[d].get(f"acc{r}", j) for r in range(len(k.reduces))]
            vertex_rows = _LaneRows(self, hoisted, d).rows(k.vertex_keys, j)
            watched = accumulated + list(vertex_rows.values())
            with tf.GradientTape() as tape:
                tape.watch(watched)
                finished = [column_result(a, reduce, self.l.degree, self.l.bounds, j)
                            for a, reduce in zip(accumulated, k.reduces)]
                out = k.vertex(finished, vertex_rows)
            result = gradients(tape, out, watched + weights, d_out.get(j))
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
        column_states, d_states, d_weights = rounds(lanes, owned, column,
                                                    (tuple(c.states for c in d_columns), d_states, zero),
                                                    self.executor.parallel)
        set_seeds(seeds, bases, P)
        return [c.with_states(s) for c, s in zip(d_columns, column_states)], d_states, d_weights

    def _tiles_backward(self, inps, fn, d_named, tile_seeds, seeds, offset=None):
        """TilePasses.backward: (d of each input's rows: host-tier states, None for the store's features; d
        weights of the prologue's and fn's variables: the prologue's trainable ones, then the graph layer's)."""
        weights = list(self.prologue.weights) + (list(self.k.weights) if self.kernels is not None else [])
        d_ins = [None if inp.blocks is None else
                 self._array(f"d_in{k}", self._host_home(), inp.row_shape, inp.dtype) for k, inp in enumerate(inps)]
        return self.tile_passes.backward(self._tiles(inps), inps, self.prologue, fn, d_named, d_ins, weights,
                                         tile_seeds, seeds, offset, self._after)


class _LaneRows:
    """Hoisted rows as a chunk loop on lane d reads them: rows(keys, part)."""

    def __init__(self, stage, hoisted, d):
        self.stage, self.hoisted, self.d = stage, hoisted, d

    def rows(self, keys, part) -> dict:
        if not keys:
            return {}
        return self.stage._fetch(self.hoisted, self.d, part, keys)


def _position(kernels, key) -> int:
    """A row key's position among the kernels' keys (file names must not depend on traced tensors' names)."""
    return kernels.keys.index(key)


def _fill(name) -> int:
    """What an array starts as: -1 for max / min winners, 0 otherwise."""
    return -1 if name.startswith(("won", "edge")) else 0


def _filler(blocks, rows):
    """A block of `rows` rows for a column no chunk reaches: -1 for max / min winners, 0 otherwise."""
    return tf.fill(tf.concat([[rows], tf.constant(blocks.row_shape, tf.int32)], 0),
                   tf.cast(_fill(blocks.name), blocks.dtype))


def _zero_arrays(like: Arrays, names, device):
    blocks = {name: Blocks(name, "device", like.blocks[name].sizes, like.blocks[name].row_shape,
                           like.blocks[name].dtype, device=device) for name in names}
    with on_lane(device):
        return Arrays(blocks, {name: b.filled(0) for name, b in blocks.items()})


__all__ = ["BlockedStage"]
