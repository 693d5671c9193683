"""The executor: a model's stages, forward and backward, as one custom gradient, in every mode.

A model is a list of *stages* (ngra_tf.runtime.stages): per-vertex layers
(its prologue: Dropout, Dense, Add, ...) over kept values (the model's
input, earlier stages' outputs) and the graph layer they lead to, or
per-vertex layers alone. Every stage's output is kept until its last reader
has run; in backward, the gradients of a value read by several stages are
summed before its own stage's backward runs.

Two choices, made once, say how a stage runs:

    residency  InMemory (a Partition) | Streamed (a chunk store): where rows, chunks and kept values live
    lanes      OneDevice | Ring: which devices run the steps (ngra_tf.runtime.lanes)

In memory on one device a graph layer runs on all rows at once (WholeStage,
its prologue and its ApplyVertex under tapes kept for backward); otherwise every stage is a
loop over interval blocks (BlockedStage). Either way a stage's forward and
backward are functions traced once per *signature* (its compiled program,
widths, schedule) and called with each layer's own variables and states
(ngra_tf.runtime.shared): what is compiled grows with the number of distinct
layers, not with depth. `Executor(x, training)` returns the last stage's
output in the user's vertex order, differentiable w.r.t. x and the weights.
In memory on one device x may be sparse (a tf.SparseTensor, bag-of-words
features), and so may a store's features (a CSR array, read as
tf.SparseTensor tiles): they are never densified where a matmul reads them
first (the compiled layers' replay, Keras's Dense), and get no gradient.
The executor imports no layer: a stage's graph layer is anything with
`compiled(rows, graph, rewrites, training)` and `compute_output_shape`.
"""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf

from ngra_tf import tf_compat
from ngra_tf.compiler.kernels import tf_variable
from ngra_tf.compiler.replay import sparse_with_values, sparse_zeros
from ngra_tf.ops.copy import copy_h2d
from ngra_tf.runtime.plan import compile_layer, tables as sched
from ngra_tf.runtime.blocked import BlockedStage
from ngra_tf.runtime.tiles import BlockRows, Rows, gradients
from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.lanes import by_lane, lanes_for, rounds
from ngra_tf.runtime.loops import PARALLEL_STEPS, ChunkLoops
from ngra_tf.runtime.residency import on_lane
from ngra_tf.runtime.shared import SharedFunctions
from ngra_tf.runtime.stages import INPUT, variable_of
from ngra_tf.runtime.whole import WholeStage

SPILL_POLICIES = ("recompute", "spill")
TILE_BYTES = 4 * 2**20  # rows of input a per-vertex step takes at a time


class Executor:
    """Runs `stages` over a residency (InMemory or Streamed) and a DeviceRing (`ring`, None: one device).

    From a store, `spill` says what backward reloads ("spill") or recomputes ("recompute"), `tile_bytes` how
    many input rows a per-vertex step takes, `overlap` whether a loop's next step may start (its reads) while
    the current one computes.
    """

    def __init__(self, stages, residency, schedule: str = "ngra", rewrites=True, spill: str = "spill",
                 tile_bytes: int = TILE_BYTES, compute_dtype="float32", ring=None, overlap: bool = True):
        if spill not in SPILL_POLICIES:
            raise ValueError(f"spill must be one of {', '.join(SPILL_POLICIES)}; got {spill!r}")
        self.stages = list(stages)
        self.residency = residency
        self.partition = residency.partition
        self.lanes = lanes_for(ring, self.partition)
        self.schedule, self.rewrites = sched.check_schedule(schedule), rewrites
        self.spill, self.tile_bytes = spill, int(tile_bytes)
        self.parallel = PARALLEL_STEPS if overlap else 1
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.sizes = np.diff(np.asarray(self.partition.bounds, np.int64))
        self.whole = not residency.streamed and ring is None  # in memory on one device: graph layers on all rows
        # Whether moving a block between the host and a lane copies it: not on one lane that is the host.
        self.copies = ring is not None or residency.copies(None)
        self._compiled = {}  # (stage index, training, input spec) -> (LayerKernels, ChunkLoops)
        self._programs = {}  # (signature key) -> the first WholeStage / BlockedStage of it
        self.shared = SharedFunctions()
        self._functions = {}  # training -> tf.function (eager calls)
        # The backwards traced into graphs, and their names in TensorFlow's gradient registry (released with this).
        self._backwards, self._registered = [], []
        weakref.finalize(self, tf_compat.forget_gradients, self._registered)
        self._check_layers()

    @property
    def streamed(self) -> bool:
        return self.residency.streamed

    @property
    def host(self) -> str:
        """Where a store-backed model's host tier lives: "memory" or "disk"."""
        return self.residency.host

    @property
    def selective_rows_saved(self) -> int:
        """Source rows a forward pass leaves on the host per layer by selective scheduling."""
        residency = self.residency
        if not (self.streamed and residency.selective and self.lanes.ring is None):
            return 0
        P = self.partition.num_parts
        return sum(int(self.sizes[c // P]) - used for c, used in residency.selected_chunks().items())

    def _check_layers(self):
        """Over blocks, per-vertex work runs on tiles or columns of rows, and again in backward: a layer that
        updates state as it runs (BatchNormalization's moving statistics) would see part of the rows, and update
        twice. Such a layer fails here, when the model is made."""
        if self.whole:
            return
        mode = "from a store" if self.streamed else "over several devices"
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
            kernels, plan = compile_layer(self.stages[index].graph_layer, spec, self.residency.graph, self.rewrites,
                                          training, self.partition, self.schedule, self.lanes.ring)
            loops = ChunkLoops(kernels, plan, kernels.seeds(kernels.edge_variables()), parallel=self.parallel)
            self._compiled[key] = (kernels, loops)
        return self._compiled[key]

    def describe(self) -> list:
        """Per compiled graph layer, its step lists; and what is compiled: the stages' traced functions."""
        lines = []
        for (index, training, _, _), (kernels, loops) in sorted(self._compiled.items(), key=lambda kv: kv[0][:2]):
            if training:
                lines.append(f"  {self.stages[index].name}: {loops.forward_steps.shape[0]} forward chunk steps and "
                             f"{loops.backward_steps.shape[0]} backward ({self.schedule} order), each pass one "
                             "compiled loop")
        if self.streamed and self.residency.selective:
            lines.append(f"  selective scheduling ({self.residency.selective:g}): "
                         f"{len(self.residency.selected_chunks())} chunks copy only the source rows they use, "
                         f"{self.selective_rows_saved} rows left on the host per layer and pass")
        if len(self.shared):
            signatures = len({key[1] for key in self.shared.keys()})
            lines.append(f"  compiled: {len(self.shared)} traced functions for {signatures} stage signatures "
                         f"({sum(stage.graph_layer is not None for stage in self.stages)} graph layers)")
        return lines

    def __call__(self, x, training=False):
        """The last stage's output for input rows x (the user's order; from a store, x is ignored and the
        features are read from it); differentiable w.r.t. x and the weights.

        Called eagerly, it runs as a tf.function (traced once per input shape
        and training flag), so that the loops compile; inside a caller's
        tf.function it is traced into the caller's graph.
        """
        training = bool(training)
        if isinstance(x, tf.SparseTensor):
            if self.streamed or not self.whole:
                raise ValueError("sparse features in memory train on one device; over several devices give dense "
                                 "rows (tf.sparse.to_dense), or train from a store, whose CSR features stream sparse "
                                 "(tools/partition_graph.py)")
            x = sparse_with_values(x, x.values)  # (a copy: Keras may hand over rows of unknown count)
            x.set_shape([int(self.sizes.sum())] + x.shape[1:].as_list())
        else:
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
            if self.streamed:
                row_shape, dtype = self.residency.input_spec(self.compute_dtype)
                values = {INPUT: sparse_zeros((2,) + row_shape, dtype) if self.residency.sparse else
                          tf.zeros((2,) + row_shape, dtype)}
            else:
                values = {INPUT: _two_rows_of_zeros(x)}
            for index, stage in enumerate(self.stages):
                y = stage.prologue_of([values[key] for key in stage.inputs], False)
                if stage.graph_layer is not None:
                    shape = stage.graph_layer.compute_output_shape(tuple(y.shape))
                    y = tf.zeros([2] + list(shape[1:]), y.dtype)
                values[index] = y

    def _run(self, x, training):
        last = len(self.stages) - 1

        sparse = x if isinstance(x, tf.SparseTensor) else None

        @tf.custom_gradient
        def run(x):  # (sparse: x is its values, which get no gradient)
            records = []
            if sparse is not None:
                x = sparse_with_values(sparse, x)
            values = {INPUT: self.store_rows(x) if self.streamed else x}
            for index, stage in enumerate(self.stages):
                with tf.name_scope(stage.name):
                    values[index], record = self._forward(index, stage, [values[key] for key in stage.inputs],
                                                          training)
                records.append(record)
            output = values[last]
            if not self.whole:
                with tf.device(self.lanes.host):
                    output = self.to_users(output.blocks.concat(output.state, to_device=self.streamed))

            def grad(dy, variables=None):
                grads = {}
                d = {last: dy if self.whole else self._host_rows(self.to_intervals(dy), f"d_{last}")}
                for index in reversed(range(len(self.stages))):
                    stage = self.stages[index]
                    with tf.name_scope(f"{stage.name}/Backward"):
                        d_inputs = self._backward(index, stage, records[index], d.pop(index), grads, training)
                        for key, d_input in zip(stage.inputs, d_inputs):
                            if d_input is not None:  # (None: the store's features, which only name an array)
                                d[key] = d_input if key not in d else self._sum(d[key], d_input)
                d_x = None if sparse is not None else d.get(INPUT)
                if not self.whole:  # a store's input only names its features; in memory, d x in the user's order
                    d_x = None if self.streamed else self.to_users(self._whole_rows(d_x))
                self.check_spill_space()
                if variables is None:
                    return d_x
                return d_x, [grads.get(id(variable_of(v))) for v in variables]

            self.check_spill_space()
            return output, self._weakly(grad)

        if self.streamed:  # x names the store's features: an empty tensor computed from it, which the steps wait for
            x = tf.zeros(tf.minimum(tf.reduce_sum(tf.strings.length(x)), 0)[None], self.compute_dtype)
        output = run(x if sparse is None else sparse.values)
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

    # ---- a stage, forward and backward ----

    def _forward(self, index, stage, xs, training):
        """A stage's output (a tensor in memory on one device, else host rows) and what its backward needs."""
        prologue = None
        if not self.streamed:  # in memory the prologue runs on all rows, under a tape kept for backward
            xs = [x if isinstance(x, (tf.Tensor, tf.SparseTensor)) else self.to_users(self._whole_rows(x))
                  for x in xs]
            with tf.GradientTape(persistent=True) as tape:  # persistent: TF may build the backward twice
                tape.watch(_dense(xs))
                y = stage.prologue_of(xs, training)
            prologue = {"tape": tape, "inputs": xs, "output": y, "weights": stage.prologue_weights()}
            if stage.graph_layer is None:
                return (y if self.whole else self._host_rows(self.to_intervals(y), f"p{index}")), {"prologue": prologue}
            stage, xs = stage.without_prologue(index), [y if self.whole else
                                                        self._host_rows(self.to_intervals(y), f"p{index}")]
        if self.whole:
            program, variables, weights = self._whole_stage(index, stage, xs[0], training)
            k = program.kernels.bind(variables)
            # H and ApplyVertex on all rows under tapes kept for backward, as the prologue: TensorFlow keeps
            # their intermediates, where running them again in the backward function cost GG-NN a quarter of
            # its step (ApplyVertex) and GAT a second X W (H: its scores' gradient reads the projected rows).
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(_dense(xs))
                hoisted = k.hoist(xs[0])
            hoist = {"tape": tape, "inputs": _dense(xs), "output": hoisted, "weights": k.weights}
            record = self.shared(("whole_forward", program.kernels.signature, training), program.forward,
                                 {"rows": {key: hoisted[key] for key in k.source_keys + k.dest_keys},
                                  "layer": variables}, program.name + "_forward")
            inputs = list(record["accumulated"]) + [hoisted[key] for key in k.vertex_keys]
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(inputs)
                out = k.vertex(inputs[:len(k.reduces)], dict(zip(k.vertex_keys, inputs[len(k.reduces):])))
            vertex = {"tape": tape, "inputs": inputs, "output": out, "weights": k.weights}
            return out, {"prologue": prologue, "program": program, "layer": variables, "record": record,
                         "weights": weights, "hoist": hoist, "vertex": vertex}
        program, variables, weights = self._blocked_stage(index, stage, xs, training)
        prefix = self.spill_prefix(f"L{index}_forward")
        args = {"prologue": variables["prologue"], "layer": variables["layer"], "inputs": _states(xs),
                "prefix": prefix, "cache": self._cache_offsets(index, training, ("forward", "forward_tiles"))}
        record = self.shared(("blocked_forward", program.signature), program.forward, args, program.name + "_forward")
        self._expect(program, "forward", prefix)
        out = BlockRows(program.result_blocks("forward", prefix)["out"], record["out"])
        return out, {"prologue": prologue, "program": program, "inputs": xs, "variables": variables,
                     "record": record, "prefix": prefix, "weights": weights}

    def _backward(self, index, stage, record, d_out, grads, training):
        """d of the stage's inputs (a list) from d of its output; adds d weights into grads."""
        prologue = record.get("prologue")
        if "program" in record:
            program = record["program"]
            if self.whole:
                hoist, vertex = record["hoist"], record["vertex"]
                d_vertex = gradients(vertex["tape"], vertex["output"], vertex["inputs"] + vertex["weights"], d_out)
                n, m = len(program.kernels.reduces), len(vertex["inputs"])
                result = self.shared(("whole_backward", program.kernels.signature, training), program.backward,
                                     {"layer": record["layer"], "record": record["record"],
                                      "d_accumulated": d_vertex[:n]}, program.name + "_backward")
                d_hoisted = {**result["d_rows"], **dict(zip(program.kernels.vertex_keys, d_vertex[n:m]))}
                keys = list(hoist["output"])
                d_h = gradients(hoist["tape"], [hoist["output"][key] for key in keys],
                                hoist["inputs"] + hoist["weights"], [d_hoisted[key] for key in keys])
                i = len(hoist["inputs"])
                _add(grads, record["weights"],
                     [a + b + c for a, b, c in zip(d_vertex[m:], result["d_weights"], d_h[i:])])
                d_out = d_h[0] if i else None  # (sparse features get no gradient)
            else:
                prefix = self.spill_prefix(f"L{index}_backward")
                args = {"prologue": record["variables"]["prologue"], "layer": record["variables"]["layer"],
                        "inputs": _states(record["inputs"]), "record": record["record"],
                        "d_out": (d_out.state, _path(d_out.blocks)), "forward_prefix": record["prefix"],
                        "prefix": prefix, "cache": self._cache_offsets(
                            index, training, ("recompute", "backward", "recompute_tiles", "backward_tiles"))}
                result = self.shared(("blocked_backward", program.signature), program.backward, args,
                                     program.name + "_backward")
                self._expect(program, "backward", prefix)
                _add(grads, record["weights"], result["d_weights"])
                blocks = program.result_blocks("backward", prefix)
                d_ins = [None if state is None else BlockRows(blocks[f"d_in{k}"], state)
                         for k, state in enumerate(result["d_inputs"])]
                if prologue is None:
                    return d_ins
                d_out = self.to_users(self._whole_rows(d_ins[0]))
        elif not self.whole:
            d_out = self.to_users(self._whole_rows(d_out))
        if d_out is None:  # the graph layer read sparse features (the prologue's dropout at most): no gradient
            return [None] * len(prologue["inputs"])
        inputs = _dense(prologue["inputs"])
        result = gradients(prologue["tape"], prologue["output"], inputs + prologue["weights"], d_out)
        n = len(inputs)
        _add(grads, prologue["weights"], result[n:])
        found = iter(result[:n])  # (a sparse input gets no gradient)
        d_xs = [None if isinstance(x, tf.SparseTensor) else next(found) for x in prologue["inputs"]]
        return d_xs if self.whole else [self._host_rows(self.to_intervals(d), f"d_p{index}_{k}")
                                        for k, d in enumerate(d_xs)]

    def _whole_stage(self, index, stage, y, training):
        kernels, loops = self.compiled(index, y, training)  # (its rows are checked against the graph's)
        key = ("whole", kernels.signature, training)
        if key not in self._programs:
            self._programs[key] = WholeStage(self, kernels, loops, signature_name(stage, y.shape[1:], kernels))
        return self._programs[key], [tf_variable(v) for v in kernels.variables], _trainable(kernels.variables)

    def _blocked_stage(self, index, stage, xs, training):
        spec = tf.TensorSpec([None] + list(stage.row_shape(xs[0].row_shape)), xs[0].dtype)
        kernels = loops = None
        if stage.graph_layer is not None:
            kernels, loops = self.compiled(index, spec, training)
        input_specs = tuple((tuple(x.row_shape), tf.as_dtype(x.dtype).name,
                             "store" if x.blocks is None else x.blocks.home) for x in xs)
        signature = (stage.prologue_signature([x.spec for x in xs], training),
                     None if kernels is None else kernels.signature, input_specs, bool(training),
                     self.tile_bytes, tuple(spec.shape[1:].as_list()))
        if signature not in self._programs:
            self._programs[signature] = BlockedStage(self, stage, kernels, loops, spec, training, input_specs,
                                                     signature, signature_name(stage, spec.shape[1:], kernels))
        variables = {"prologue": _prologue_variables(stage.prologue),
                     "layer": [] if kernels is None else [tf_variable(v) for v in kernels.variables]}
        weights = [] if stage.prologue is None else list(stage.prologue.trainable_variables)
        weights += [] if kernels is None else _trainable(kernels.variables)
        return self._programs[signature], variables, weights

    def _cache_offsets(self, index, training, kinds) -> dict:
        """Where stage `index`'s chunk loops of `kinds` start in a training step's accesses (plan.cache), as
        arguments of its traced call (-1: look up only)."""
        offset = getattr(self.residency, "cache_offset", lambda *_: -1)
        return {kind: tf.constant(offset(index, kind, training), tf.int32) for kind in kinds}

    # ---- rows between stages ----

    def store_rows(self, after=None):
        """The first stage's input from a store: its features, read tile by tile (by calls that wait for
        `after`: the input the step was given, so that no step starts before its input is read, and a failed
        read is not reported as the cancellation of that input's read)."""
        residency = self.residency
        reader, name = residency.reader, residency.features
        row_shape, dtype = residency.input_spec(self.compute_dtype)
        cached = residency.cached and self.lanes.ring is None

        def rows(part, start, stop, tile=None, offset=None, after=None):
            if cached and tile is not None:  # through the cache, as its plan says (plan.cache)
                value = reader.rows(name, part, start, stop, cache=residency.cache, key=residency.tile_key(tile),
                                    keep=residency.cache_access(offset, tile, after), after=after)
            else:
                value = reader.rows(name, part, start, stop)
            if isinstance(value, tf.SparseTensor):  # (CSR features: their entries move, in the compute dtype)
                indices = copy_h2d(value.indices) if self.copies else value.indices
                out = tf.SparseTensor(indices, on_device(value.values), value.dense_shape)
                out.set_shape(value.shape)
                return out
            return on_device(value)

        def on_device(value):
            value = copy_h2d(value) if self.copies else value
            return tf.cast(value, dtype) if value.dtype != dtype else value

        return Rows(rows, row_shape, dtype, state=after, sparse=residency.sparse,
                    row_nbytes=residency.input_row_nbytes())

    def _host_rows(self, rows, name):
        """Rows in interval order as host-tier blocks (in memory: host memory)."""
        home = self.residency.host_home if self.streamed else "host"
        blocks = Blocks(name, home, self.sizes, rows.shape[1:].as_list(), rows.dtype, host=self.lanes.host,
                        path=self.residency.spill.file(name, int(np.sum(self.sizes)) * _row_bytes(rows))
                        if home == "disk" else None, copies=self.copies)
        with tf.device(self.lanes.host):
            return BlockRows(blocks, blocks.from_rows(rows))

    def _whole_rows(self, rows):
        """Blocks of rows as one tensor, in interval order (in memory, on the host: nothing moves)."""
        with tf.device(self.lanes.host):
            return rows.blocks.concat(rows.state, to_device=self.streamed)

    def _sum(self, a, b):
        """Two gradients of one kept value (it is read by several stages): tensors, or host-tier rows (added
        interval by interval, by a function traced once per row shape)."""
        if self.whole:
            return a + b
        home, row_shape, dtype = a.blocks.home, tuple(a.row_shape), tf.as_dtype(a.dtype)
        path = self.residency.spill.file(f"sum_{a.blocks.name}", a.blocks.nbytes) if home == "disk" else ""

        def blocks(name, file):
            return Blocks(name, home, self.sizes, row_shape, dtype, host=self.lanes.host,
                          path=file if home == "disk" else None, copies=self.copies)

        def body(args):
            first, second, total = (blocks(name, file) for name, file in zip(("a", "b", "sum"), args["paths"]))

            def add(d, part, state):
                return total.put(state, part, first.get(args["a"], part) + second.get(args["b"], part))

            with on_lane(total.host):
                fresh = total.empty()
            return rounds(self.lanes, by_lane(self.lanes, self.lanes.loaders()), add, fresh, self.parallel)

        state = self.shared(("sum", home, row_shape, dtype.name), body,
                            {"a": a.state, "b": b.state, "paths": [_path(a.blocks), _path(b.blocks), path]},
                            f"Sum_{int(np.prod(row_shape, dtype=np.int64))}")
        return BlockRows(blocks(f"sum_{a.blocks.name}", path), state)

    # ---- spill files ----

    def spill_prefix(self, name):
        return self.residency.spill.prefix(name) if self.streamed and self.residency.host == "disk" else ""

    def _expect(self, program, kind, prefix):
        for name, nbytes in program.layouts.get(kind, {}).items():
            self.residency.spill.expect(prefix + name, nbytes)

    def check_spill_space(self):
        """When a pass is traced, before it runs: the spill files it names that are not on disk yet must fit."""
        if self.streamed and self.residency.host == "disk":
            self.residency.spill.check_space()

    def open(self):
        if self.streamed:
            self.residency.spill.open()

    def close(self):
        if self.streamed:
            self.residency.spill.close()

    def fault(self, error):
        """A TrainingFault for `error` when it names a spill file or a file of the store, else None."""
        if not self.streamed:
            return None
        return self.residency.spill.fault(error, self.residency.store)

    # ---- orders ----

    def to_intervals(self, rows):
        p = self.partition
        return rows if p.identity_order else tf.gather(rows, p.order_tensor())

    def to_users(self, rows):
        p = self.partition
        return rows if p.identity_order else tf.gather(rows, p.position_tensor())


def signature_name(stage, row_shape, kernels) -> str:
    """A readable name for a stage signature: its graph layer's class (or "Vertex") and its rows' widths, as
    the traced functions' ops are named (profiler traces show it)."""
    width = int(np.prod(list(row_shape), dtype=np.int64))
    if kernels is None:
        return f"Vertex_{width}"
    out = int(np.prod(kernels.program.vertex.output.shape[1:].as_list(), dtype=np.int64))
    return f"{type(stage.graph_layer).__name__}_{width}_{out}"


def _dense(xs) -> list:
    """The dense tensors among xs: those a tape watches (a sparse input is the model's features)."""
    return [x for x in xs if not isinstance(x, tf.SparseTensor)]


def _two_rows_of_zeros(x):
    """Two rows like x's, of zeros (sparse if x is): what the layers are built on."""
    shape = [2] + x.shape[1:].as_list()
    return sparse_zeros(shape, x.dtype) if isinstance(x, tf.SparseTensor) else tf.zeros(shape, x.dtype)


def _trainable(variables):
    """A layer's trainable variables, in the order its kernels' d weights come (LayerKernels.weights)."""
    return [v for v in variables if getattr(v, "trainable", True)]


def _prologue_variables(prologue):
    if prologue is None:
        return {"trainable": [], "state": []}
    return {"trainable": [tf_variable(v) for v in prologue.trainable_variables],
            "state": [tf_variable(v) for v in prologue.non_trainable_variables]}


def _states(rows):
    """What a stage call takes of its inputs: (state, path) of host rows; of the store's features, what the
    call waits for."""
    return [(x.state, _path(x.blocks) if x.blocks is not None else "") for x in rows]


def _path(blocks):
    return blocks.path if blocks.home == "disk" else ""


def _row_bytes(rows) -> int:
    return int(np.prod(rows.shape[1:].as_list(), dtype=np.int64)) * rows.dtype.size


def _add(grads: dict, variables, values):
    for variable, value in zip(variables, values):
        key = id(variable_of(variable))
        grads[key] = value if key not in grads else grads[key] + value


__all__ = ["Executor", "SPILL_POLICIES", "TILE_BYTES"]
