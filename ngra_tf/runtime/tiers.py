"""The two memory tiers of a streamed plan, and the explicit copies between them (NGra §3.1).

The *device* tier is where kernels run and what the memory budget bounds:
a GPU's memory, or on a machine without one the process's own RAM. The
*host* tier backs it: host memory behind a GPU, or a spill directory on disk
behind RAM. Everything a plan moves between them goes through copy_h2d and
copy_d2h (ngra_tf.ops.copy), named so that a profiler trace shows the copies
next to the SAGA stages and counted by the copy ops' byte counters.

Reading a block is split in two: `read` gets its bytes to the host (a disk
read; safe to run ahead on a loader thread) and `upload` copies them to the
device (a copy_h2d on the caller's thread).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import tensorflow as tf

from ngra_tf.ops.copy import copy_d2h, copy_h2d
from ngra_tf.runtime import store_npy

TIERS = ("memory", "disk")


def device_tier() -> str:
    """The device the kernels run on: the first GPU TensorFlow sees, else the CPU."""
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


def device_peak_bytes(device: str) -> int | None:
    """Peak bytes allocated on a GPU device tier since TensorFlow started (None for the CPU: measure the
    process instead, with ngra_tf.runtime.resident)."""
    if not device.upper().startswith("/GPU"):
        return None
    return int(tf.config.experimental.get_memory_info(device.lstrip("/"))["peak"])


def upload(host, name: str):
    """A host array or tensor copied to the device tier (copy_h2d), as a tensor."""
    with tf.name_scope(f"H2D_{name}"):
        return copy_h2d(host)


class HostTier:
    """Blocks kept off the device between steps: in host memory, or as .npy files in a spill directory.

    Keys are strings naming what a block is (an activation, a spilled
    accumulator, a gradient): put, read + upload (or load), add, drop.
    """

    def __init__(self, kind: str = "memory", directory=None):
        if kind not in TIERS:
            raise ValueError(f"the host tier must be one of {', '.join(TIERS)}; got {kind!r}")
        self.kind = kind
        self._blocks = {}  # key -> host tensor (memory) or (path, shape, dtype) (disk)
        self._owned = None
        self._serial = itertools.count()
        if kind == "disk":
            if directory is None:
                directory = self._owned = tempfile.mkdtemp(prefix="ngra-spill-")
            os.makedirs(directory, exist_ok=True)
            self.directory = os.fspath(directory)

    def __contains__(self, key):
        return key in self._blocks

    def put(self, key: str, value):
        """Copies a device tensor to the host tier (copy_d2h), replacing what `key` held."""
        with tf.name_scope(f"D2H_{_scope(key)}"):
            host = copy_d2h(value)
        if self.kind == "memory":
            self._blocks[key] = host
            return
        path = self._blocks[key][0] if key in self._blocks else os.path.join(
            self.directory, f"{next(self._serial):06d}_{_scope(key)[:80]}.npy")
        array = host.numpy()
        store_npy.write_arrays(path, {key: array})
        self._blocks[key] = (path, array.shape, array.dtype)

    def spec(self, key: str) -> tuple:
        """(row shape, numpy dtype) of a block."""
        block = self._blocks[key]
        if self.kind == "memory":
            return tuple(block.shape[1:]), block.dtype.as_numpy_dtype
        return tuple(block[1][1:]), block[2]

    def read(self, key: str, rows=None):
        """The block (rows=(start, stop): those rows) in host memory: a disk read for the disk tier.

        Safe to run on a loader thread.
        """
        block = self._blocks[key]
        if self.kind == "memory":
            return block if rows is None else block[rows[0]:rows[1]]
        path, _, dtype = block
        return store_npy.read(path, key, dtype, rows)  # plain reads, by rows: no memory map

    def load(self, key: str):
        """read + upload."""
        return upload(self.read(key), _scope(key))

    def add(self, key: str, value):
        """key += value (key absent: key = value)."""
        self.put(key, value if key not in self._blocks else self.load(key) + value)

    def drop(self, prefix: str):
        """Forgets every block whose key starts with prefix."""
        for key in [k for k in self._blocks if k.startswith(prefix)]:
            block = self._blocks.pop(key)
            if self.kind == "disk":
                os.remove(block[0])

    def close(self):
        self.drop("")
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
            self._owned = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  Interpreter shutdown: best effort.
            pass


def _scope(key: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in key)
