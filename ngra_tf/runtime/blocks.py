"""Arrays of blocks, one per vertex interval, wherever they live: the device, host memory or a file.

Everything a plan keeps between steps is such an array: a layer's hoisted
rows and its output, the accumulators A[j], gradients, spilled values. A
`Blocks` describes one (its home, the intervals' sizes, the row shape and
dtype); its *state* is a value that compiled loops carry: a TensorArray
(device or host memory) or a token that orders a file's reads after its
writes (disk). Moving a block between the host and the device is an
explicit copy (copy_h2d / copy_d2h, NGra §3.1), counted by the copy ops.

    home "device"  a TensorArray on the device: get and put copy nothing
    home "host"    a TensorArray in host memory: get copies to the device, put copies back
    home "disk"    a file in a spill directory, interval p at its rows' offset: get reads the
                   range (NgraReadFile) and copies it to the device; put writes it (NgraWriteFile)

When the device is the host itself (`copies=False`: a CPU-only process),
there is nothing to copy: a host block is where the kernels read it.

P = 1 is one block.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from ngra_tf.ops.copy import copy_d2h, copy_h2d
from ngra_tf.ops.fileio import read_file, write_file

HOMES = ("device", "host", "disk")


class Blocks:
    """One block per interval of `sizes[p]` rows of `row_shape`, in `dtype`, living at `home`.

    `device` is where gets deliver and puts take blocks (None: the default
    device); `host` is the host device; `path` the file of a disk array (a
    str, or a string tensor inside a traced function); `copies` whether
    moving a block between the host and the device is a copy (not when the
    device is the host).
    """

    def __init__(self, name: str, home: str, sizes, row_shape, dtype, device=None, host="/CPU:0", path=None,
                 copies=True):
        if home not in HOMES:
            raise ValueError(f"home must be one of {', '.join(HOMES)}; got {home!r}")
        if home == "disk" and path is None:
            raise ValueError("a disk array needs a path")
        self.name, self.home = name, home
        self.sizes = np.asarray(sizes, np.int64)
        self.bounds = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.row_shape = tuple(int(d) for d in row_shape)
        self.dtype = tf.as_dtype(dtype)
        self.device, self.host, self.path, self.copies = device, host, path, bool(copies)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.size

    @property
    def nbytes(self) -> int:
        return int(self.bounds[-1]) * self.row_bytes

    def _where(self):
        return tf.device(self.device if self.home == "device" else self.host)

    # ---- states ----

    def empty(self):
        """A state with nothing written (reading a block before it is put is an error)."""
        if self.home == "disk":
            return tf.constant(0, tf.int64)
        with self._where():
            return tf.TensorArray(self.dtype, size=len(self.sizes), element_shape=self._element_shape(),
                                  infer_shape=False)

    def filled(self, value=0):
        """A state whose every block holds `value`."""
        if self.home == "disk":
            # Interval by interval, each block's shape a loop value: the whole array of `value` is never made,
            # nor folded by Grappler into a constant the graph would hold (one per array and call site).
            sizes, row_shape = tf.constant(self.sizes), tf.constant(self.row_shape, tf.int64)

            def fill(p, written):
                block = tf.fill(tf.concat([[tf.gather(sizes, p)], row_shape], 0), tf.cast(value, self.dtype))
                offset = tf.gather(self.bounds, p) * self.row_bytes
                return p + 1, written + write_file(self.path, offset, block, after=written)

            with tf.device(self.host):
                return tf.while_loop(lambda p, _: p < len(self.sizes), fill,
                                     (tf.constant(0), tf.constant(0, tf.int64)))[1]
        with self._where():
            rows = tf.fill([int(self.bounds[-1])] + list(self.row_shape), tf.cast(value, self.dtype))
            return self._cut(rows)

    def from_rows(self, rows):
        """A state holding `rows` (all intervals, in interval order, on the device), cut into blocks."""
        if self.home == "device":
            with self._where():
                return self._cut(rows)
        with tf.device(self.host):
            host_rows = self._to_host(rows)
            if self.home == "disk":
                return write_file(self.path, tf.constant(0, tf.int64), host_rows)
            return self._cut(host_rows)

    def _cut(self, rows):
        # TensorFlow's list split and concat copy every block, even the only one; a one-block state holds
        # `rows` itself (P = 1 runs the same loops, without two copies of each array per pass).
        if len(self.sizes) == 1:
            return self.empty().write(0, rows)
        return self.empty().split(rows, tf.constant(self.sizes))

    def _joined(self, state):
        return self._shaped(state.read(0) if len(self.sizes) == 1 else state.concat())

    def _element_shape(self):
        return tf.TensorShape([None] + list(self.row_shape))

    # ---- blocks ----

    def get(self, state, part):
        """Block `part` on the device."""
        if self.home == "device":
            return self._shaped(state.read(part))
        return self._to_device(self.get_host(state, part))

    def get_host(self, state, part):
        """Block `part` where it lives, for work on the host before a copy (a device array's stays put)."""
        if self.home == "device":
            return self._shaped(state.read(part))
        with tf.device(self.host):
            return self._read(state, part)

    def get_rows(self, state, part, start, stop):
        """Rows start..stop of block `part`, on the device."""
        if self.home == "device":
            return self._shaped(state.read(part))[start:stop]
        with tf.device(self.host):
            if self.home == "disk":
                first = tf.gather(self.bounds, part) + tf.cast(start, tf.int64)
                block = self._read_range(state, first, tf.cast(stop, tf.int64) - tf.cast(start, tf.int64))
            else:
                block = self._shaped(state.read(part))[start:stop]
        return self._to_device(block)

    def _read(self, state, part):
        if self.home == "disk":
            return self._read_range(state, tf.gather(self.bounds, part), tf.gather(self.sizes, part))
        return self._shaped(state.read(part))

    def _shaped(self, block):
        """A block with its known row shape (a TensorArray passed through a function forgets it)."""
        block.set_shape(self._element_shape())
        return block

    def _read_range(self, token, first_row, count):
        block = read_file(self.path, tf.cast(first_row, tf.int64) * self.row_bytes,
                          tf.concat([[tf.cast(count, tf.int64)], tf.constant(self.row_shape, tf.int64)], 0),
                          self.dtype, after=token)
        block.set_shape(self._element_shape())
        return block

    def put(self, state, part, block):
        """The state with block `part` replaced by `block` (a device tensor)."""
        if self.home == "device":
            with self._where():
                return state.write(part, block)
        with tf.device(self.host):
            host_block = self._to_host(block)
            if self.home == "disk":
                offset = tf.cast(tf.gather(self.bounds, part), tf.int64) * self.row_bytes
                # The state as `after`, not a control dependency: that one TensorFlow drops inside the
                # conditionals of a loop, and the block could be written before the file's fill.
                return state + write_file(self.path, offset, host_block, after=state)
            return state.write(part, host_block)

    def add(self, state, part, block):
        """The state with `block` added to block `part` (on the device, then put back)."""
        return self.put(state, part, self.get(state, part) + block)

    def concat(self, state, to_device=True):
        """Every block, in interval order, as one tensor on the device (to_device=False: on the host)."""
        if self.home == "device":
            return self._joined(state)
        with tf.device(self.host):
            rows = self._read_range(state, 0, int(self.bounds[-1])) if self.home == "disk" else self._joined(state)
        if not to_device:
            return rows
        return self._to_device(rows)

    def _to_device(self, block):
        if not self.copies:
            return block
        with tf.device(self.device):
            return copy_h2d(block)

    def _to_host(self, block):
        return copy_d2h(block) if self.copies else block

    def remove(self):
        """Deletes a disk array's file (nothing else to free)."""
        if self.home == "disk" and os.path.exists(self.path):
            os.remove(self.path)


__all__ = ["HOMES", "Blocks"]
