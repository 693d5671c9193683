"""A stage's per-vertex passes over its input rows, tile by tile (H of ngra_tf.runtime.blocked).

A pass runs the stage's prologue (a Keras functional model bound to a
caller's variables: `BoundPrologue`) and a function of its result on every
interval's rows, at most `tile_bytes` of input rows at a time (`RowTiles`;
the whole interval in memory), each interval on the lane `items` gives it,
and puts the results into Blocks arrays. Its backward recomputes the same
under a tape per tile, drawing the same random numbers (tile k's seed
states are base + [0, k]), and sums the weights' gradients. The inputs are
`Rows`: blocks of the host tier (`BlockRows`), or the store's features read
through the executor's reader (and the cache, at a training step's reads).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from ngra_tf.runtime.blocks import Blocks
from ngra_tf.runtime.lanes import by_lane, rounds
from ngra_tf.runtime.loops import set_seeds
from ngra_tf.runtime.plan.budget import tiles_of
from ngra_tf.runtime.residency import on_lane


@dataclasses.dataclass
class RowTiles:
    """Each interval's tiles (plan.budget.tiles_of) as tables the loops index."""

    table: tf.Tensor  # [tiles, 3]: interval, first row, stop row
    first: tf.Tensor  # [P]: each interval's first tile
    count: tf.Tensor  # [P]: its number of tiles
    rows: list

    @classmethod
    def of(cls, sizes, row_bytes: int, tile_bytes: int) -> RowTiles:
        rows = tiles_of(sizes, row_bytes, tile_bytes)
        first = [next(t for t, row in enumerate(rows) if row[0] == p) for p in range(len(sizes))]
        count = [sum(1 for row in rows if row[0] == p) for p in range(len(sizes))]
        return cls(tf.constant(np.array(rows, np.int64).reshape(-1, 3)), tf.constant(first, tf.int32),
                   tf.constant(count, tf.int32), rows)


class TilePasses:
    """A stage's per-vertex passes over row tiles, each interval on a lane of `lanes` (`parallel`: how many
    rounds of intervals may run at once, lanes.rounds)."""

    def __init__(self, lanes, parallel):
        self.lanes, self.parallel = lanes, parallel

    def forward(self, tiles: RowTiles, inps, prologue, fn, specs, items, outputs, bases, seeds, offset=None,
                after=None):
        """fn(prologue(rows)) of every interval of the inputs `inps` (Rows), tile by tile: lane d runs the
        intervals items[d] and puts the results (named as `specs`: {name: (row shape, dtype)}) into the Blocks
        outputs[d][name]; returns the states, keyed like `outputs`. Tile k draws with the seed states `bases`
        (the prologue's, then `seeds`') + [0, k]; `offset` and `after` go to the inputs' reads (plan.cache)."""
        states = {key: fresh(blocks) for lane_outputs in outputs for key, blocks in lane_outputs.items()}

        def interval(d, p, states):
            first, count = tiles.first[p], tiles.count[p]
            pieces = {name: tf.TensorArray(dtype, size=count, element_shape=tf.TensorShape([None] + list(shape)),
                                           infer_shape=False) for name, (shape, dtype) in specs.items()}

            def tile(t, pieces):
                start, stop = tiles.table[first + t][1], tiles.table[first + t][2]
                set_seeds(seeds, bases[1], first + t)  # tile k draws with base + [0, k] (again in backward)
                rows = [inp.rows(p, start, stop, first + t, offset, after) for inp in inps]
                values = fn(prologue(rows, bases[0], first + t))
                return t + 1, {name: pieces[name].write(t, values[name]) for name in pieces}

            _, pieces = tf.while_loop(lambda t, *_: t < count, tile, (tf.constant(0), pieces))
            states = dict(states)
            for key, blocks in outputs[d].items():
                states[key] = blocks.put(states[key], p, pieces[blocks.name].concat())
            return states

        states = rounds(self.lanes, items, interval, states, self.parallel)
        prologue.seed_end(bases[0], len(tiles.rows))
        set_seeds(seeds, bases[1], len(tiles.rows))
        return states

    def backward(self, tiles: RowTiles, inps, prologue, fn, d_named, d_ins, weights, bases, seeds, offset=None,
                 after=None):
        """Recomputes fn(prologue(rows)) tile by tile under a tape (drawing the forward's random numbers, from
        its `bases`) and returns (d of each input's rows: states of the Blocks `d_ins`, None where d_ins has
        None; d of `weights`), from d of fn's outputs `d_named` ({name: BlockRows})."""
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
                set_seeds(seeds, bases[1], first + t)
                xs = [inp.rows(p, start, stop, first + t, offset, after) for inp in inps]
                with tf.GradientTape() as tape:
                    tape.watch([x for x in xs if not isinstance(x, tf.SparseTensor)])  # (sparse: the features)
                    values = fn(prologue(xs, bases[0], first + t))
                targets = [values[name] for name in names]
                result = gradients(tape, targets, [xs[k] for k in wanted] + weights,
                                   [d_blocks[name][start:stop] for name in names])
                pieces = [piece.write(t, value) for piece, value in zip(pieces, result)]
                return t + 1, pieces, [a + b for a, b in zip(d_weights, result[len(wanted):])]

            _, pieces, d_weights = tf.while_loop(lambda t, *_: t < count, tile, (tf.constant(0), pieces, d_weights))
            d_states = tuple(d_ins[k].put(state, p, piece.concat())
                             for k, state, piece in zip(wanted, d_states, pieces))
            return d_states, d_weights

        d_states = tuple(fresh(d_ins[k]) for k in wanted)
        d_states, d_weights = rounds(self.lanes, by_lane(self.lanes, self.lanes.loaders()), interval,
                                     (d_states, zero), self.parallel)
        prologue.seed_end(bases[0], len(tiles.rows))
        set_seeds(seeds, bases[1], len(tiles.rows))
        found = dict(zip(wanted, d_states))
        return [None if d_in is None else found[k] for k, d_in in enumerate(d_ins)], d_weights


class BoundPrologue:
    """A stage's prologue (a Keras functional model, or None) run on a caller's variables: Keras's
    stateless_call with the values of `variables` ({"trainable": [...], "state": [...]}: tf.Variables at the
    positions of the prologue's own). Its seed generators (dropout) draw with the states given per tile."""

    def __init__(self, prologue, variables, training):
        self.prologue, self.training = prologue, training
        self.weights = list(variables["trainable"])
        self.state = list(variables["state"])
        own = [] if prologue is None else prologue.non_trainable_variables
        self._is_seed = ["seed_generator_state" in v.path for v in own]

    @property
    def seeds(self):
        return [v for v, seed in zip(self.state, self._is_seed) if seed]

    def seed_bases(self):
        return tuple(v.read_value() for v in self.seeds)

    def seed_end(self, bases, k):
        set_seeds(self.seeds, bases, k)

    def __call__(self, xs, bases, k):
        """The prologue on rows xs (one tensor per input), its seeds at base + [0, k]."""
        if self.prologue is None:
            return xs[0]
        draws = iter(bases)
        state = [next(draws) + tf.cast(tf.stack([0, k]), v.dtype) if seed else v.value()
                 for v, seed in zip(self.state, self._is_seed)]
        out, _ = self.prologue.stateless_call([w.value() for w in self.weights], state,
                                              list(xs) if len(xs) > 1 else xs[0], training=self.training)
        return out


class Rows:
    """A stage's input as blocks of rows: rows(part, start, stop) on the device. `sparse`: they come as
    tf.SparseTensor (a store's CSR features); `row_nbytes`: what a row takes once read (tiles are sized by it)."""

    def __init__(self, read, row_shape, dtype, blocks=None, state=None, sparse=False, row_nbytes=None):
        self._read, self.row_shape, self.dtype = read, tuple(row_shape), tf.as_dtype(dtype)
        self.blocks, self.state, self.sparse = blocks, state, bool(sparse)
        self.row_nbytes = row_bytes(self.row_shape, self.dtype) if row_nbytes is None else int(row_nbytes)

    @property
    def spec(self):
        """The spec of a tile of these rows."""
        shape = [None] + list(self.row_shape)
        return tf.SparseTensorSpec(shape, self.dtype) if self.sparse else tf.TensorSpec(shape, self.dtype)

    def rows(self, part, start, stop, tile=None, offset=None, after=None):
        """Rows start..stop of interval `part`; `tile`, the tile's index, `offset`, where the pass's tiles start
        in a training step's reads (plan.cache), and `after`, the previous pass's token, matter only to a reader
        with a cache."""
        return self._read(part, start, stop, tile, offset, after)


class BlockRows(Rows):
    """Rows held in a Blocks array (the host tier), with its state."""

    def __init__(self, blocks: Blocks, state):
        super().__init__(lambda part, start, stop, *_: blocks.get_rows(state, part, start, stop), blocks.row_shape,
                         blocks.dtype, blocks, state)

    def get(self, part):
        return self.blocks.get(self.state, part)


def row_bytes(row_shape, dtype) -> int:
    return int(np.prod(row_shape, dtype=np.int64)) * tf.as_dtype(dtype).size


def fresh(blocks):
    """A state with nothing written yet (every block is put before it is read)."""
    with on_lane(blocks.device if blocks.home == "device" else blocks.host):
        return blocks.empty()


def gradients(tape, targets, sources, output_gradients):
    """tape.gradient with zeros (not None) for sources the targets do not depend on."""
    result = tape.gradient(targets, sources, output_gradients=output_gradients)
    return [tf.zeros(tf.shape(s), s.dtype) if g is None else tf.convert_to_tensor(g) for s, g in zip(sources, result)]


__all__ = ["BlockRows", "BoundPrologue", "RowTiles", "Rows", "TilePasses", "fresh", "gradients", "row_bytes"]
