"""Reading a store from inside compiled loops: a chunk or an interval's rows by tensor indices.

`StoreReader(store)` verifies every file a plan may read (once per process,
against the manifest's sizes and checksums) and builds tables of their
paths, data offsets, shapes and versions. `chunk(k)` and `rows(name, part,
start, stop)` then return TensorFlow ops that read chunk k = i * P + j, or
rows of an interval, when the loop iteration runs: npy files through
NgraReadFile (a byte range at the offset after the .npy header), HDF5 files
through tensorflow-io's hyperslab read. The reads are stateless ops, so a
loop with parallel_iterations >= 2 reads the next step's chunk while the
current one computes; each checks that its file still has the size,
modification time, inode and change time it was verified with (HDF5: after
tensorflow-io's read, with NgraReadFile of no bytes), so a file replaced
under a running trainer fails the read, naming it, instead of being read
unverified.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.fileio import read_file
from ngra_tf.ops.propagation import vouched_plan
from ngra_tf.store import hdf5 as store_hdf5, npy as store_npy
from ngra_tf.store.store import csr_tensor

INDEX_ARRAYS = AdjacencyTensors._fields


class _Table:
    """Per entry (chunk or interval) of one array: path, data offset, shape, size, mtime, inode, ctime and
    version."""

    def __init__(self, store, locations):
        full = [os.path.join(store.path, location.path) for location in locations]
        # Taken before verifying: a file changed in between then fails its first read rather than pass unverified.
        stats = []
        for location, path in zip(locations, full):
            try:
                before = os.stat(path)
            except FileNotFoundError:  # verifying names it
                before = None
            store._verify(location.path)
            stats.append(before or os.stat(path))
        identities = [(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) for st in stats]  # as integrity.file_identity
        self.dtype = np.dtype(locations[0].dtype)
        self.row_shape = tuple(locations[0].shape[1:])
        self.backend = store._backend
        self.key = locations[0].key
        with tf.init_scope():  # eager tensors: any traced function captures them
            self.paths = tf.constant(full)
            self.counts = tf.constant([location.shape[0] for location in locations], tf.int64)
            self.sizes = tf.constant([identity[2] for identity in identities], tf.int64)
            self.mtimes = tf.constant([identity[3] for identity in identities], tf.int64)
            self.inodes = tf.constant([st.st_ino for st in stats], tf.int64)
            self.ctimes = tf.constant([st.st_ctime_ns for st in stats], tf.int64)
            self.versions = tf.constant([f"{path}@{':'.join(map(str, identity))}" for path, identity
                                         in zip(full, identities)])
            if self.backend is store_npy:
                self.offsets = tf.constant([_npy_data_offset(path) for path in full], tf.int64)

    def read(self, k, start=None, stop=None, cache=-1, key=0, keep=False, after=None):
        """Rows start..stop (default: all) of entry k, as a host tensor; npy through `cache` (ngra_tf.ops.cache:
        found under `key`, not read; read, cached when `keep`), once `after` is computed."""
        count = tf.gather(self.counts, k)
        start = tf.constant(0, tf.int64) if start is None else tf.cast(start, tf.int64)
        stop = count if stop is None else tf.cast(stop, tf.int64)
        row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        shape = tf.concat([[stop - start], tf.constant(self.row_shape, tf.int64)], 0)
        if self.backend is store_npy:
            tensor = read_file(tf.gather(self.paths, k), tf.gather(self.offsets, k) + start * row_bytes, shape,
                               tf.as_dtype(self.dtype), **self._identity(k), cache=cache, key=key, keep=keep,
                               after=after)
        else:
            tensor = tf.cond(stop > start, lambda: self._hdf5(k, start, stop, count),
                             lambda: tf.zeros(shape, tf.as_dtype(self.dtype)))
        tensor.set_shape([None] + list(self.row_shape))
        return tensor

    def _identity(self, k):
        """What read_file checks entry k's file against: the identity it was verified with."""
        return dict(expected_size=tf.gather(self.sizes, k), expected_mtime_ns=tf.gather(self.mtimes, k),
                    expected_inode=tf.gather(self.inodes, k), expected_ctime_ns=tf.gather(self.ctimes, k))

    def _hdf5(self, k, start, stop, count):
        from tensorflow_io.python.ops import core_ops  # noqa: PLC0415  (loads tfio's op library: only when asked)

        full_shape = tf.concat([[count], tf.constant(self.row_shape, tf.int64)], 0)
        tensor = core_ops.io_hdf5_readable_read(
            input=tf.gather(self.paths, k), shared=tf.gather(self.versions, k), component=f"/{self.key}",
            shape=full_shape, start=[start], stop=[stop], dtype=tf.as_dtype(store_hdf5.stored_dtype(self.dtype)),
            container="NgraTfStore")
        # Checked after the read (a file replaced before tensorflow-io opened it, by name, fails here) by a read
        # of no bytes, whose size the rows then add: Grappler would turn a stateless op that only feeds control
        # edges into a NoOp, and remove a reshape or fold a count it can infer.
        none = tf.minimum(tf.size(tensor, tf.int64), 0)
        checked = read_file(tf.gather(self.paths, k), 0, tf.reshape(none, [1]), tf.uint8, **self._identity(k))
        tensor = tensor + tf.cast(tf.size(checked), tensor.dtype)
        return tf.cast(tensor, tf.bool) if self.dtype == np.bool_ else tensor


def _npy_data_offset(path) -> int:
    with open(path, "rb") as stream:
        return store_npy.data_offset(stream)


class StoreReader:
    """A store's chunks and vertex arrays as tables for ops with tensor indices (see the module doc)."""

    def __init__(self, store, vertex_names=()):
        self.store = store
        P = store.num_parts
        layout = store._layout
        names = INDEX_ARRAYS + (("edge_data",) if store.edge_data_spec is not None else ())
        self._chunks = {name: _Table(store, [layout.chunk(k // P, k % P, (name,))[0] for k in range(P * P)])
                        for name in names}
        dtypes = {self._chunks[name].dtype for name in INDEX_ARRAYS}
        if len(dtypes) != 1:
            raise ValueError(f"store {store.path} mixes index dtypes across chunks ({sorted(map(str, dtypes))}); "
                             "convert it again")
        self.index_dtype = tf.as_dtype(dtypes.pop())
        self.arrays = tuple(self._chunks)  # a chunk's arrays, in the order of their cache keys
        # Chunk k's (sources, destinations, edges): its plan's sizes. Opening the store checked every chunk's index
        # arrays as NgraPrepareGraph would, and a read fails unless its file is the one checked, so the fused ops
        # need not check them again on every call (on enwiki, about a quarter of the fused gradients' time).
        sizes = np.diff(np.asarray(store.bounds, np.int64))
        with tf.init_scope():
            self._plan_sizes = tf.constant([[sizes[k // P], sizes[k % P], store.edge_counts[k // P, k % P]]
                                            for k in range(P * P)], tf.int64)
        self._ids = None
        self._vertex = {name: _Table(store, [layout.vertex(name, p) for p in range(P)]) for name in vertex_names
                        if not store.is_sparse(name)}
        # A CSR array: its indptr, indices and values, each a table over the intervals.
        self._csr = {name: [_Table(store, [layout.vertex_parts(name, p)[a] for p in range(P)]) for a in range(3)]
                     for name in vertex_names if store.is_sparse(name)}
        self._widths = {name: store.vertex_spec(name)[0][0] for name in self._csr}

    @property
    def cacheable(self) -> bool:
        """Whether chunk reads can go through a cache (npy stores; tensorflow-io reads HDF5 by itself)."""
        return self.store._backend is store_npy

    def chunk(self, k, cache=-1, keep=False, after=None) -> LoadedChunk:
        """Chunk k = i * P + j, read when the op runs (host tensors); through `cache` (an npy store's: see
        `cacheable`), each array under the key k * len(self.arrays) + its position, kept there when `keep`;
        once `after` is computed."""
        arrays = {name: table.read(k, cache=cache, key=tf.cast(k, tf.int64) * len(self._chunks) + a, keep=keep,
                                   after=after)
                  for a, (name, table) in enumerate(self._chunks.items())}
        sizes = tf.gather(self._plan_sizes, k)
        plan = vouched_plan(sizes[0], sizes[1], sizes[2])
        return LoadedChunk(LoadedAdjacency(AdjacencyTensors(*(arrays[name] for name in INDEX_ARRAYS)), plan),
                           arrays.get("edge_data"), lambda: self._edge_ids().read(k))

    def _edge_ids(self) -> _Table:
        """The chunks' edge ids (read uncached, and verified, only when a layer draws per edge)."""
        if self._ids is None:
            P, layout = self.store.num_parts, self.store._layout
            self._ids = _Table(self.store, [layout.chunk(k // P, k % P, ("edge_ids",))[0] for k in range(P * P)])
        return self._ids

    def row_shape(self, name) -> tuple:
        """The shape of a row (after the edge axis) of chunk array `name`."""
        return self._chunks[name].row_shape

    def rows(self, name, part, start=None, stop=None, cache=-1, key=0, keep=False, after=None):
        """Rows start..stop of interval `part` of vertex array `name` (host tensor); through `cache` as chunk().
        A CSR array's rows are a tf.SparseTensor (entries in row-major order), read uncached: its pointers, then
        the range of indices and values they give."""
        if name in self._csr:
            return self._sparse_rows(name, part, start, stop)
        return self._vertex[name].read(part, start, stop, cache=cache, key=key, keep=keep, after=after)

    def _sparse_rows(self, name, part, start, stop):
        """Rows start..stop of interval `part` of CSR array `name` as a tf.SparseTensor: the rows' pointers, then
        the range of columns and values they bound (the stored rows are canonical: row-major order)."""
        indptr, indices, values = self._csr[name]
        start = tf.constant(0, tf.int64) if start is None else tf.cast(start, tf.int64)
        stop = tf.gather(indptr.counts, part) - 1 if stop is None else tf.cast(stop, tf.int64)
        pointers = indptr.read(part, start, stop + 1)
        first, last = pointers[0], pointers[-1]
        return csr_tensor(pointers, indices.read(part, first, last), values.read(part, first, last),
                          self._widths[name])


__all__ = ["StoreReader"]
