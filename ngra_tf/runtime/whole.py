"""A graph layer's chunks over all rows at once: a partition in memory on one device. Traced once per signature.

    forward   the hoisted vertex rows (H's, in the user's order) put in interval order and cut into device
              blocks; ChunkLoops.forward: every chunk of the packed partition into its column's accumulators;
              the accumulators finished (mean: divided by the in-degree), back in the user's order: what
              ApplyVertex reads, and what the forward returns
    backward  from d of the accumulators: C's backward loop, to d of the hoisted rows and of the edge
              stage's weights

The hoisted vertex stage (H) and ApplyVertex (V) run in the executor, on all
rows, under tapes it keeps, as the stage's prologue (per-vertex layers before
the graph layer) does: their backward is TensorFlow's own, from the
forward's intermediates. Run again in the backward function, V cost GG-NN's
GRU cell a quarter of its step, and H cost GAT a second X W (its scores'
gradient reads the projected rows). `WholeStage` is made from the first layer
of its signature; `forward` and `backward` take a layer's variables and
states as arguments (ngra_tf.runtime.shared).
"""

from __future__ import annotations

import tensorflow as tf

from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.loops import Arrays, column_result, per_row


class WholeStage:
    """The forward and backward of a graph layer of one signature on all rows (see the module doc)."""

    def __init__(self, executor, kernels, loops, name):
        self.executor, self.kernels, self.loops, self.name = executor, kernels, loops, name
        self.sizes = executor.sizes

    def _bind(self, args):
        k = self.kernels.bind(args["layer"])
        return k, self.loops.bind(k)

    def forward(self, args):
        """args: rows (the hoisted rows the chunks read, {key: rows in the user's order}), layer (variables).
        Returns the finished accumulators (in the user's order) and what backward needs."""
        k, loops = self._bind(args)
        rows = self._device_arrays({key: self.executor.to_intervals(args["rows"][key])
                                    for key in k.source_keys + k.dest_keys})
        columns = self._column_arrays(loops)
        column_states, chunk_seeds = loops.forward(rows, self._chunks(), columns)
        columns = columns.with_states(column_states)
        accumulated = [self.executor.to_users(column_result(columns.blocks[f"acc{r}"].concat(columns.states[f"acc{r}"]),
                                                      reduce, loops.degree))
                       for r, reduce in enumerate(k.reduces)]
        return {"accumulated": accumulated, "rows": [rows.states[key] for key in rows.blocks],
                "columns": [columns.states[name] for name in columns.blocks], "seeds": chunk_seeds}

    def backward(self, args):
        """args: layer, record (forward's), d_accumulated (d of the accumulators). Returns d of the hoisted rows
        ({key: rows in the user's order}) and d of the layer's weights (in its weights' order) through the
        chunks."""
        k, loops = self._bind(args)
        record, d_accumulated = args["record"], args["d_accumulated"]
        keys = k.source_keys + k.dest_keys
        rows = Arrays(self._device_blocks({key: k.key_specs()[key] for key in keys}),
                      dict(zip(keys, record["rows"])))
        columns = self._column_arrays(loops, states=record["columns"])
        d_columns = self._device_arrays({f"acc{r}": _unfinish(self.executor.to_intervals(d), reduce, loops.degree)
                                         for r, (d, reduce) in enumerate(zip(d_accumulated, k.reduces))})
        d_rows = Arrays(rows.blocks, {key: b.filled(0) for key, b in rows.blocks.items()})
        d_states, d_weights = loops.backward(rows, self._chunks(), columns, d_columns, d_rows, record["seeds"])
        d_rows = d_rows.with_states(d_states)
        return {"d_rows": {key: self.executor.to_users(d_rows.blocks[key].concat(d_rows.states[key])) for key in keys},
                "d_weights": d_weights}

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
