"""A graph layer over all rows at once: a partition in memory on one device. Traced once per signature.

    forward   H  the hoisted vertex stage on all rows (in the user's order), then put in interval order and
                 cut into device blocks
              C  ChunkLoops.forward: every chunk of the packed partition into its column's accumulators
                 the accumulators finished (mean: divided by the in-degree), back in the user's order: with
                 the hoisted rows ApplyVertex reads, what the forward returns
    backward  from d of those: C's backward loop, then H's (the hoisted stage recomputed under a tape: what
              is linear in its input costs nothing, only its gradient runs)

ApplyVertex (V) runs in the executor, on all rows, under a tape it keeps, as
the stage's prologue (per-vertex layers before the graph layer) does: its
backward is TensorFlow's own, from the forward's intermediates. Run again
here, under a tape of this function, it cost GG-NN's GRU cell a quarter of
its step. H draws its random numbers again in backward from the seed states
the forward started from. `WholeStage` is made from the first layer of its
signature; `forward` and `backward` take a layer's variables and states as
arguments (ngra_tf.runtime.shared).
"""

from __future__ import annotations

import tensorflow as tf

from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.loops import Arrays, column_result, per_row, set_seeds
from ngra_tf.runtime.tiles import gradients


class WholeStage:
    """The forward and backward of a graph layer of one signature on all rows (see the module doc)."""

    def __init__(self, executor, kernels, loops, name):
        self.executor, self.kernels, self.loops, self.name = executor, kernels, loops, name
        self.sizes = executor.sizes

    def _bind(self, args):
        k = self.kernels.bind(args["layer"])
        return k, self.loops.bind(k)

    def forward(self, args):
        """args: y (the prologue's rows, dense or sparse), layer (variables). Returns ApplyVertex's inputs (the
        finished accumulators, the hoisted vertex rows in k.vertex_keys' order) and what backward needs."""
        k, loops = self._bind(args)
        y = args["y"]
        hoist_seeds = k.seeds(k.hoist_variables())
        hoist_bases = tuple(v.read_value() for v in hoist_seeds)
        hoisted = k.hoist(y)
        rows = self._device_arrays({key: self.executor.to_intervals(hoisted[key])
                                    for key in k.source_keys + k.dest_keys})
        columns = self._column_arrays(loops)
        column_states, chunk_seeds = loops.forward(rows, self._chunks(), columns)
        columns = columns.with_states(column_states)
        accumulated = [self.executor.to_users(column_result(columns.blocks[f"acc{r}"].concat(columns.states[f"acc{r}"]),
                                                      reduce, loops.degree))
                       for r, reduce in enumerate(k.reduces)]
        return {"accumulated": accumulated, "vertex_rows": [hoisted[key] for key in k.vertex_keys],
                "rows": [rows.states[key] for key in rows.blocks],
                "columns": [columns.states[name] for name in columns.blocks], "seeds": (hoist_bases, chunk_seeds)}

    def backward(self, args):
        """args: y, layer, record (forward's), d_accumulated and d_vertex (d of what the forward returned).
        Returns d y and d weights (the layer's weights order) of H and C."""
        k, loops = self._bind(args)
        y, record, d_accumulated = args["y"], args["record"], args["d_accumulated"]
        hoist_bases, chunk_seeds = record["seeds"]
        hoist_seeds = k.seeds(k.hoist_variables())
        ends = [v.read_value() for v in hoist_seeds]  # as the forward left them
        set_seeds(hoist_seeds, hoist_bases, 0)
        sparse = isinstance(y, tf.SparseTensor)  # the model's features: no gradient
        with tf.GradientTape(persistent=True) as hoist_tape:
            if not sparse:
                hoist_tape.watch(y)
            hoisted = k.hoist(y)
        # C: the chunks' backward.
        keys = k.source_keys + k.dest_keys
        rows = Arrays(self._device_blocks({key: k.key_specs()[key] for key in keys}),
                      dict(zip(keys, record["rows"])))
        columns = self._column_arrays(loops, states=record["columns"])
        d_columns = self._device_arrays({f"acc{r}": _unfinish(self.executor.to_intervals(d), reduce, loops.degree)
                                         for r, (d, reduce) in enumerate(zip(d_accumulated, k.reduces))})
        d_rows = Arrays(rows.blocks, {key: b.filled(0) for key, b in rows.blocks.items()})
        d_states, chunk_weights = loops.backward(rows, self._chunks(), columns, d_columns, d_rows, chunk_seeds)
        d_rows = d_rows.with_states(d_states)
        d_hoisted = {key: self.executor.to_users(d_rows.blocks[key].concat(d_rows.states[key])) for key in keys}
        d_hoisted.update(zip(k.vertex_keys, args["d_vertex"]))
        # H: the hoisted stage's backward.
        names = list(hoisted)
        result = gradients(hoist_tape, [hoisted[key] for key in names], ([] if sparse else [y]) + k.weights,
                           [d_hoisted.get(key, tf.zeros_like(hoisted[key])) for key in names])
        for variable, end in zip(hoist_seeds, ends):
            variable.assign(end)
        d_y, d_hoist_weights = (None, result) if sparse else (result[0], result[1:])
        weights = [a + b for a, b in zip(chunk_weights, d_hoist_weights)]
        return {"d_y": d_y, "d_weights": weights}

    # ---- arrays ----

    def _chunks(self):
        return self.executor.residency.chunks(self.executor.lanes, 0)

    def _device_blocks(self, specs: dict) -> dict:
        return {name: Blocks(name, "device", self.sizes, shape, dtype) for name, (shape, dtype) in specs.items()}

    def _device_arrays(self, values: dict) -> Arrays:
        blocks = self._device_blocks({name: (value.shape[1:].as_list(), value.dtype) for name, value in values.items()})
        return Arrays(blocks, {name: blocks[name].from_rows(values[name]) for name in values})

    def _column_arrays(self, loops, states=None) -> Arrays:
        blocks = loops.column_arrays("device")
        if states is None:
            states = [b.filled(-1 if name.startswith(("won", "edge")) else 0) for name, b in blocks.items()]
        return Arrays(blocks, dict(zip(blocks, states)))


def _unfinish(d, reduce, degree):
    return d if reduce != "mean" else d / per_row(degree, d)


__all__ = ["WholeStage"]
