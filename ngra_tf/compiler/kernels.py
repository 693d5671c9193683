"""What the executor runs of a compiled layer: hoist, a chunk forward and backward, ApplyVertex.

    hoist(rows)                      the vertex stage (hoisted S / D / V sub-graphs) on any vertex rows
    chunk_forward(chunk, src, dst, inits)
                                     chunk C[i][j] reduced into its column's accumulators (one per reducer),
                                     with the winning edges of max / min
    chunk_backward(chunk, src, dst, grads, argedges)
                                     its vector-Jacobian product: d source rows, d destination rows, d weights
    vertex(accumulated, rows)        ApplyVertex on a destination interval

Vertex-stage values travel as dicts {key: rows}: `source_keys` are what a
chunk reads from its source interval, `dest_keys` from its destination
interval, `vertex_keys` what ApplyVertex reads. A chunk is a Chunk or a
LoadedChunk (its arrays as tensors, inside a compiled loop); the pieces know
nothing of schedules, devices or where rows come from.

A chunk's gradient does not depend on the value it reduced into: sum and
mean pass d A straight through, and max / min route it to each element's
winning edge, so a column's chunks are differentiated independently given
which chunk won each element (the executor keeps that). Fused chunks are
differentiated by the fused kernel's gradient ops directly, without running
the forward kernel again; unfused ones replay their edge ops under a tape.

Layers whose apply_edge calls edge.softmax (GAT) normalise over a whole
column. Their chunks still run one at a time: the column's statistics of
every softmax (its per-destination maximum and sum of exponentials) are
accumulated in passes over the column's chunks (`softmax_statistic`), and a
chunk's messages are computed from them (`chunk_forward(..., stats=)`). In
backward, the sums are inputs like the rows: a pass over the column gives
each sum's gradient (`chunk_backward` returns it), and a pass per softmax
sends it back through the exponentials (`softmax_backward`).
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf

from ngra_tf.compiler.program import LayerProgram
from ngra_tf.compiler.replay import Replay, densified
from ngra_tf.ops import edge_code, propagation

# Reductions of a chunk into a column accumulator: mean chains as sum and divides once, by the column's in-degree.
CHAIN_REDUCE = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}


class LayerKernels:
    """The runnable pieces of one compiled layer (see the module doc)."""

    def __init__(self, program: LayerProgram, variables):
        self.program = program
        self.name = program.name
        self.variables = list(variables)
        # The random ops' state among them (dropout's seed generators), by the tf.Variable's id; those that
        # edge.dropout reads draw once per pass.
        self._seed_ids = {id(tf_variable(v)) for v in variables if "seed_generator_state" in v.name}
        self._pass_seed_ids = {id(tf_variable(v)) for v in program.pass_seeds}
        ids = program.edge.inputs["ids"]
        self.reads_ids = bool(ids.consumers())  # edge.dropout draws at the edges' ids
        self.edge_replay, self.vertex_replay = Replay(program.edge, variables), Replay(program.vertex, variables)
        self.weights = [v for v in variables if getattr(v, "trainable", True)]
        self.feature_shape, self.dtype = program.accum_spec()
        self.reduces = tuple(program.reduces)
        self.chain_reduces = tuple(CHAIN_REDUCE[r] for r in self.reduces)
        edge, fused = program.edge, program.fused
        self.code = fused.code if fused is not None and fused.program == "code" else None
        if self.code is not None:
            self.source_keys = ["fused_src"]
            self.dest_keys = ["fused_dst"] if self.code.code.reads("dst") else []
            if self.code.code.attention:  # the online-softmax state [acc | sum | m] accumulates
                self.feature_shape = [3 * self.code.code.width]
                self.chain_reduces = ("softmax",)
        elif fused is not None:
            self.source_keys = ["fused_src"]
            self.dest_keys = [] if fused.dst is None else ["d:" + fused.dst.name]
        else:
            self.source_keys = ["s:" + t.name for t in program.src_frontier]
            self.dest_keys = ["d:" + t.name for t in program.dst_frontier]
        self.vertex_keys = ["v:" + t.name for t in program.vertex_frontier]
        # edge.softmax markers in graph order (a later softmax may read an earlier one); fused attention
        # normalises inside its kernels instead.
        self.markers = [] if self.code is not None else [
            op.name for op in edge.graph.get_operations() if op.name in edge.markers]
        self.column_wide = bool(self.markers)

    def bind(self, variables) -> "LayerKernels":
        """These kernels reading `variables` instead of the layer's own (tf.Variables at the same positions as
        `self.variables`: another layer of the same signature's, or a traced function's arguments)."""
        replacement = {id(tf_variable(mine)): tf_variable(theirs) for mine, theirs in zip(self.variables, variables)}
        bound = copy.copy(self)
        bound.variables = list(variables)
        bound.edge_replay = self.edge_replay.bound(replacement)
        bound.vertex_replay = self.vertex_replay.bound(replacement)
        bound.weights = [tf_variable(theirs) for mine, theirs in zip(self.variables, variables)
                         if getattr(mine, "trainable", True)]
        bound._seed_ids = {id(replacement[i]) for i in self._seed_ids}
        bound._pass_seed_ids = {id(replacement[i]) for i in self._pass_seed_ids}
        return bound

    def seeds(self, variables) -> list:
        """The seed-generator states among `variables` (from edge_variables(), hoist_variables() or
        vertex_variables())."""
        return [v for v in variables if id(v) in self._seed_ids]

    def per_pass(self, seeds) -> list:
        """Per seed state of `seeds`: whether it draws once per pass (edge.dropout's: every chunk sees the same
        state) rather than once per chunk."""
        return [id(v) in self._pass_seed_ids for v in seeds]

    def edge_variables(self) -> list:
        """The variables the edge stage reads (tf.Variables): its weights, and the seeds of random ops in it."""
        return [v for v in self.edge_replay._variable_of.values() if v is not None]

    def hoist_variables(self) -> list:
        """The variables the vertex stage (hoist) reads (tf.Variables)."""
        program = self.program
        found = []
        for replay, trace, frontier in ((self.edge_replay, program.edge, program.src_frontier + program.dst_frontier),
                                        (self.vertex_replay, program.vertex, program.vertex_frontier)):
            inputs = [t.name for t in trace.inputs.values()]
            for op in trace.ops_between(inputs, frontier):
                for t in op.inputs:
                    variable = replay._variable_of.get(t.name)
                    if variable is not None and all(variable is not f for f in found):
                        found.append(variable)
        return found

    def vertex_variables(self) -> list:
        """The variables ApplyVertex reads (tf.Variables)."""
        return [v for v in self.vertex_replay._variable_of.values() if v is not None]

    @property
    def keys(self):
        return self.source_keys + self.dest_keys + self.vertex_keys

    def key_specs(self) -> dict:
        """{key: (row shape, dtype)} of what hoist returns, from the traced stages (nothing is run)."""
        program = self.program
        specs = {}
        for prefix, tensors in (("s:", program.src_frontier), ("d:", program.dst_frontier),
                                ("v:", program.vertex_frontier)):
            for t in tensors:
                specs[prefix + t.name] = (tuple(t.shape[1:].as_list()), t.dtype)
        fused = program.fused
        if self.code is not None:
            src_width, dst_width, _ = self.code.widths()
            specs["fused_src"] = ((src_width,), self.code.dtype)
            specs["fused_dst"] = ((dst_width,), self.code.dtype)
        elif fused is not None:
            first = program.narrow.outputs[0] if program.narrow is not None else fused.src[0]
            shape = tuple(first.shape[1:].as_list())
            specs["fused_src"] = (shape if len(fused.src) == 1 else (len(fused.src),) + shape, first.dtype)
        return {key: specs[key] for key in self.keys}

    def check_chunkable(self, num_parts: int):
        if num_parts > 1 and not self.program.chunkable:
            name, reason = self.program.edge.mixing_ops[0]
            raise ValueError(f"{self.program.name}: apply_edge mixes edges ({name}, {reason}), so its result "
                             "would change with the chunking; run it with chunks=1")

    # ---- the vertex stage ----

    def hoist(self, x, keys=None) -> dict:
        """The vertex stage on vertex rows x: {key: rows} for `keys` (default: all of them)."""
        program, edge = self.program, self.program.edge
        keys = set(self.keys if keys is None else keys)
        values = {}
        with tf.name_scope("ApplyEdge/Hoisted"):
            src = [t for t in program.src_frontier if "s:" + t.name in keys or "fused_src" in keys]
            dst = [t for t in program.dst_frontier if "d:" + t.name in keys or "fused_dst" in keys]
            # Both endpoints fed the same rows: what they compute alike (a shared projection) is built once.
            seen = {}
            for prefix, tensors, name in (("s:", src, "src"), ("d:", dst, "dst")):
                values.update((prefix + t.name, value) for t, value in
                              zip(tensors, self.edge_replay.evaluate(tensors, {edge.inputs[name].name: x}, seen=seen)))
            if self.code is not None:
                for key, tensors, x in (("fused_src", self.code.src, x), ("fused_dst", self.code.dst, x)):
                    if key in keys:
                        values[key] = _packed([values[("s:" if key == "fused_src" else "d:") + t.name]
                                               for t in tensors], tf.shape(x)[0], self.code.dtype)
            elif "fused_src" in keys:
                operand = [values["s:" + t.name] for t in program.fused.src]
                if program.narrow is not None:
                    operand = self.vertex_replay.evaluate(
                        program.narrow.outputs, {program.vertex.inputs["accum"].name: operand[0]})[:1]
                values["fused_src"] = operand[0] if len(operand) == 1 else tf.stack(operand, axis=1)
        vertex = [t for t in program.vertex_frontier if "v:" + t.name in keys]
        feeds = {program.vertex.inputs["vertex"].name: x}
        if "fused_src" in values and program.narrow is not None:  # vertex @ W is the narrowed rows: once (GIN)
            feeds.update({name: values["fused_src"] for name in program.narrowed_vertex})
        with tf.name_scope("ApplyVertex/Hoisted"):
            for t, value in zip(vertex, self.vertex_replay.evaluate(vertex, feeds)):
                values["v:" + t.name] = value
        # Sparse input rows that reach a chunk as they are (no matmul narrowed them) move densified. Every
        # value has x's rows, which a sparse-dense product's static shape loses (a traced function taking
        # them would be traced again for sparse input).
        values = {key: densified(value) for key, value in values.items() if key in keys}
        for value in values.values():
            value.set_shape(x.shape[:1].concatenate(value.shape[1:]))
        return values

    # ---- a chunk ----

    def _data_feed(self, chunk):
        """The chunk's edge rows that the edge stage reads: its edge data, and its edge ids (edge.dropout)."""
        edge = self.program.edge
        feeds = {}
        if self.reads_ids:
            feeds[edge.inputs["ids"].name] = chunk.edge_ids_tensor()
        if "data" not in edge.inputs:
            return feeds
        data = chunk.edge_data_tensor()
        spec = edge.inputs["data"]
        if data.dtype.is_floating and data.dtype != spec.dtype:
            data = tf.cast(data, spec.dtype)
        feeds[spec.name] = data
        return feeds

    def _edge_operand(self, chunk):
        fused = self.program.fused
        if fused.edge_operand is None:
            return None
        operand = self.edge_replay.evaluate([fused.edge_operand], self._data_feed(chunk))[0]
        return tf.reshape(operand, [-1, *fused.weight_shape]) if fused.program == "src_mul_edge" else operand

    def _memo(self, chunk, src: dict, dst: dict, stats=None) -> dict:
        """The edge stage's inputs on a chunk (its frontiers scattered to the edges), and the output of every
        edge.softmax whose column statistics are in `stats`."""
        program = self.program
        feeds = self._data_feed(chunk)
        with tf.name_scope("Scatter"):
            for t in program.src_frontier:
                feeds[t.name] = propagation.scatter(chunk, src["s:" + t.name])
            for t in program.dst_frontier:
                feeds[t.name] = propagation.scatter_side(chunk, dst["d:" + t.name], "dst")
        for m, (peak, total) in enumerate(stats or ()):
            weights = self._exponentials(chunk, feeds, m, peak)
            marker = self._marker(m)
            feeds[marker.outputs[0].name] = weights / propagation.scatter_side(chunk, total, "dst")
        return feeds  # the replay's memo: evaluation starts from these

    def _marker(self, m):
        return self.program.edge.graph.get_operation_by_name(self.markers[m])

    def _exponentials(self, chunk, memo, m, peak):
        """exp(scores - the column's peak) of softmax m on a chunk, its earlier softmaxes in memo."""
        with tf.name_scope("EdgeSoftmax"):
            scores = self.edge_replay.evaluate(self._marker(m).inputs[:1], memo=memo)[0]
            return tf.exp(scores - propagation.scatter_side(chunk, tf.stop_gradient(peak), "dst"))

    def chunk_forward(self, chunk, src: dict, dst: dict, inits: list, stats=None) -> list:
        """[(value, argedge)] per reducer: chunk C[i][j] reduced into each init (None: from nothing) with the
        chain reducer (sum for sum and mean), and each element's winning edge (max / min; else empty).

        `stats` are the column's softmax statistics [(peak, total)], required by column-wide layers.
        """
        fused = self.program.fused
        if self.code is not None:
            return self._code_forward(chunk, src, dst, inits)
        if fused is not None:
            x_dst = None if fused.dst is None else dst["d:" + fused.dst.name]
            operand = self._edge_operand(chunk)
            with tf.name_scope("FusedGather"):
                return [propagation.fused_gather(chunk, src["fused_src"], x_dst, operand, fused.program, reduce=r,
                                                 init=init, return_argedge=True)
                        for init, r in zip(inits, self.chain_reduces)]
        messages = self._messages(chunk, src, dst, stats)
        with tf.name_scope("Gather"):
            return [propagation.gather(chunk, messages, reduce=r, init=init, return_argedge=True)
                    for init, r in zip(inits, self.chain_reduces)]

    def _messages(self, chunk, src, dst, stats):
        if self.column_wide and stats is None:
            raise ValueError(f"{self.name}: a column-wide layer's chunk needs its column's softmax statistics")
        memo = self._memo(chunk, src, dst, stats)
        with tf.name_scope("ApplyEdge"):
            return self.edge_replay.evaluate([self.program.edge.output], memo=memo)[0]

    def chunk_backward(self, chunk, src: dict, dst: dict, grads: list, argedges: list, stats=None):
        """The chunk's vector-Jacobian product for d A = grads (one per reducer; argedges from chunk_forward,
        -1 where another chunk won).

        Returns (d src {key: rows}, d dst {key: rows}, d weights (self.weights order), d totals (one per
        softmax of `stats`, else [])).
        """
        fused = self.program.fused
        if self.code is not None:
            return self._code_backward(chunk, src, dst, grads, argedges)
        if fused is not None:
            return self._fused_backward(chunk, src, dst, grads, argedges)
        watched_src, watched_dst = list(src.values()), list(dst.values())
        totals = [total for _, total in stats or ()]
        d_messages = None
        for grad, argedge, r in zip(grads, argedges, self.chain_reduces):
            d = propagation.gather_grad(chunk, grad, r, argedge)
            d_messages = d if d_messages is None else d_messages + d
        with tf.GradientTape() as tape:
            tape.watch(watched_src + watched_dst + totals)
            messages = self._messages(chunk, src, dst, stats)
        result = _gradients(tape, messages, watched_src + watched_dst + self.weights + totals, d_messages)
        return self._split(result, src, dst, len(totals))

    def _fused_backward(self, chunk, src, dst, grads, argedges):
        fused = self.program.fused
        x_dst = None if fused.dst is None else dst["d:" + fused.dst.name]
        with tf.GradientTape() as tape:  # the edge operand may be a function of parameters
            operand = self._edge_operand(chunk)
        d_src = d_dst = d_operand = None
        for grad, argedge, r in zip(grads, argedges, self.chain_reduces):
            ds, dd, dw = propagation.fused_gather_grads(chunk, grad, src["fused_src"], x_dst, operand, fused.program,
                                                        reduce=r, argedge=argedge)
            d_src, d_dst, d_operand = _plus(d_src, ds), _plus(d_dst, dd), _plus(d_operand, dw)
        d_weights = self._edge_weight_gradients(tape, operand, d_operand)
        d_dst_rows = {} if fused.dst is None else {"d:" + fused.dst.name: d_dst}
        return {"fused_src": d_src}, d_dst_rows, d_weights, []

    def _edge_weight_gradients(self, tape, operand, d_operand) -> list:
        """d weights (zeros where none) through a fused kernel's per-edge operand, recorded on `tape`."""
        d_weights = [None] * len(self.weights)
        if d_operand is not None and self.weights:
            d_weights = tape.gradient(operand, self.weights, output_gradients=d_operand)
        return [tf.zeros(w.shape, w.dtype) if d is None else tf.convert_to_tensor(d)
                for w, d in zip(self.weights, d_weights)]

    # ---- edge code ----

    def _code_operands(self, chunk):
        """The chunk's per-edge rows ([E, Ke], or None) and edge types (or None) that the code reads."""
        code = self.code
        feeds = self._data_feed(chunk)
        rows = types = None
        if code.edge:
            values = self.edge_replay.evaluate(list(code.edge), dict(feeds))
            rows = _packed(values, tf.shape(values[0])[0], code.dtype)
        if code.types is not None:
            types = tf.cast(self.edge_replay.evaluate([code.types], dict(feeds))[0], tf.int32)
        return rows, types

    def _code_forward(self, chunk, src, dst, inits):
        code, width = self.code, self.code.code.width
        rows, types = self._code_operands(chunk)
        results = []
        with tf.name_scope("FusedEdgeCode"):
            for init, r in zip(inits, self.chain_reduces):
                init = None if init is None else tf.reshape(init, [-1, 3 * width if r == "softmax" else width])
                value, aux = edge_code.edge_code_gather(chunk, code.code, src["fused_src"], dst.get("fused_dst"), rows,
                                                        types, reduce=r, init=init, return_aux=True)
                results.append((tf.reshape(value, [-1] + list(self.feature_shape)), aux))
        return results

    def _code_backward(self, chunk, src, dst, grads, auxes):
        code, width = self.code, self.code.code.width
        with tf.GradientTape() as tape:  # the edge rows may be functions of parameters
            rows, types = self._code_operands(chunk)
        d_src = d_dst = d_rows = None
        for grad, aux, r in zip(grads, auxes, self.chain_reduces):
            grad = tf.reshape(grad, [-1, 3 * width if r == "softmax" else width])
            state = tf.reshape(aux, [-1, 3 * width]) if r == "softmax" else None
            ds, dd, de = edge_code.edge_code_grads(chunk, code.code, grad, src["fused_src"], dst.get("fused_dst"),
                                                   rows, types, reduce=r, aux=None if state is not None else aux,
                                                   state=state)
            d_src, d_dst, d_rows = _plus(d_src, ds), _plus(d_dst, dd), _plus(d_rows, de)
        d_weights = self._edge_weight_gradients(tape, rows, d_rows)
        d_src = tf.zeros_like(src["fused_src"]) if d_src is None else d_src
        return {"fused_src": d_src}, ({"fused_dst": d_dst} if self.dest_keys else {}), d_weights, []

    def _split(self, result, src, dst, num_totals):
        result = list(result)
        d_src = dict(zip(src, result[:len(src)]))
        d_dst = dict(zip(dst, result[len(src):len(src) + len(dst)]))
        rest = result[len(src) + len(dst):]
        return d_src, d_dst, rest[:len(self.weights)], rest[len(self.weights):len(self.weights) + num_totals]

    # ---- column softmax (column-wide layers) ----

    def softmax_statistic(self, chunk, src: dict, dst: dict, stats: list, m: int, kind: str, init):
        """One chunk's contribution to softmax m's column statistic, reduced into init (None: from nothing):
        kind "peak" (the max of its scores, chained with max) or "total" (the sum of exp(scores - peak)).
        stats holds the column's finished statistics of softmaxes 0..m-1 (and, for "total", m's peak)."""
        memo = self._memo(chunk, src, dst, stats[:m])
        with tf.name_scope("EdgeSoftmax"):
            if kind == "peak":
                scores = self.edge_replay.evaluate(self._marker(m).inputs[:1], memo=memo)[0]
                return propagation.gather(chunk, scores, reduce="max", init=init)
            return propagation.gather(chunk, self._exponentials(chunk, memo, m, stats[m][0]), reduce="sum",
                                      init=init)

    def softmax_backward(self, chunk, src: dict, dst: dict, stats: list, m: int, d_total):
        """Sends d (softmax m's column sum) back through the chunk's exponentials: (d src, d dst, d weights,
        d totals of softmaxes 0..m-1)."""
        watched_src, watched_dst = list(src.values()), list(dst.values())
        totals = [total for _, total in stats[:m]]
        with tf.GradientTape() as tape:
            tape.watch(watched_src + watched_dst + totals)
            memo = self._memo(chunk, src, dst, stats[:m])
            weights = self._exponentials(chunk, memo, m, stats[m][0])
        d_weights = propagation.scatter_side(chunk, d_total, "dst")
        result = _gradients(tape, weights, watched_src + watched_dst + self.weights + totals, d_weights)
        return self._split(result, src, dst, len(totals))

    # ---- ApplyVertex ----

    def vertex(self, accumulated: list, vertex_rows: dict):
        """ApplyVertex on interval j from its finished accumulators (one per reducer)."""
        program = self.program
        accum = accumulated[0] if len(accumulated) == 1 else tf.concat(accumulated, axis=-1)
        if self.code is not None and self.code.code.attention:
            width = self.code.code.width
            accum = tf.reshape(edge_code.softmax_result(tf.reshape(accum, [-1, 3 * width]), width),
                               [-1] + list(self.code.feature_shape))
        feeds = {t.name: vertex_rows["v:" + t.name] for t in program.vertex_frontier}
        target = program.narrow.outputs[0] if program.narrow is not None else program.vertex.inputs["accum"]
        feeds[target.name] = accum
        with tf.name_scope("ApplyVertex"):
            return self.vertex_replay.evaluate([program.vertex.output], feeds)[0]


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (or the tf.Variable itself)."""
    return getattr(variable, "value", variable) if not isinstance(variable, tf.Variable) else variable


def _packed(values, rows, dtype):
    """Row tensors flattened and side by side ([rows, 0] for none), in dtype."""
    flat = [tf.reshape(tf.cast(v, dtype), [-1, int(np.prod(v.shape[1:].as_list(), dtype=np.int64))])
            for v in values]
    if not flat:
        return tf.zeros([rows, 0], dtype)
    return flat[0] if len(flat) == 1 else tf.concat(flat, axis=1)


def _plus(a, b):
    return b if a is None else a if b is None else a + b


def _gradients(tape, targets, sources, output_gradients):
    """tape.gradient with zeros (not None) for sources the targets do not depend on."""
    result = tape.gradient(targets, sources, output_gradients=output_gradients)
    return [tf.zeros(tf.shape(s), s.dtype) if g is None else tf.convert_to_tensor(g) for s, g in zip(sources, result)]


__all__ = ["CHAIN_REDUCE", "LayerKernels", "tf_variable"]
