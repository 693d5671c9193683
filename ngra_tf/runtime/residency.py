"""Residency: where a model's rows, chunks and kept values live. One of two, chosen once per model.

    InMemory   a Partition held whole: the model's input is a tensor, chunks are sliced from the packed
               partition (on each lane's device), values kept between steps are tensors or blocks in memory
    Streamed   a chunk store on disk: the input is a vertex array read by interval, chunks are read from
               the store's files by ops inside the loops, values kept between steps live in the host tier
               (host memory, or files in a spill directory: ngra_tf.runtime.spill)

Both answer the same questions for the executor: the chunks a lane reads,
the home of an array kept between steps (`host_home`), and whether moving a
block between the host and a lane is a copy at all: when the compute device
is the host itself (no GPU), a block read from the host tier or a chunk read
from the store is already where the kernels read it, and no copy_h2d /
copy_d2h runs.

From a store on one device, chunks go through a cache in host memory
(ngra_tf.ops.cache) under the memory budget: a training step's accesses are
known in advance (the step tables), so its plan (plan.cache.CachePlan,
Belady's policy) says which reads to keep and what to evict; a hit returns
the cached tensor itself. Steps that do not train (evaluate, predict) only
look up.
"""

from __future__ import annotations

import contextlib
import weakref

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.cache import cache_clear, cache_erase, new_cache
from ngra_tf.ops.copy import copy_h2d
from ngra_tf.ops.propagation import prepare_graph
from ngra_tf.runtime.chunks import PackedChunks
from ngra_tf.runtime.spill import SpillDirectory
from ngra_tf.store.reader import StoreReader

HOST_TIERS = ("memory", "disk")


class InMemory:
    """A Partition held whole (see the module doc)."""

    streamed = False
    host_home = "host"  # blocks kept between steps over several devices

    def __init__(self, partition):
        self.partition, self.graph = partition, partition.graph
        self._chunks = {}

    def chunks(self, lanes, d, offset=None, after=None):
        """Lane d's chunk source: the chunks of the columns it owns, packed on its device once (one lane: all)."""
        if d not in self._chunks:
            P = self.partition.num_parts
            mine = None if len(lanes) == 1 else [i * P + j for i in range(P) for j in lanes.columns(d)]
            self._chunks[d] = PackedChunks(self.partition, device=lanes.devices[d], chunks=mine)
        return self._chunks[d]

    def copies(self, lane) -> bool:
        return True


class StoreShapes:
    """What SAGALayer.compiled reads of a graph, for a store."""

    def __init__(self, store):
        self.num_vertices = store.num_vertices
        spec = store.edge_data_spec
        self.stored_edge_data = None if spec is None else np.zeros((0,) + tuple(spec[0]), spec[1])


class Streamed:
    """A chunk store (see the module doc): `features` is the vertex array the model reads; `host` the host tier
    ("memory" or "disk", in `spill_dir` or the temporary directory); `selective` NeuGraph's threshold."""

    streamed = True

    def __init__(self, store, features="features", host="memory", spill_dir=None, selective: float = 0.0):
        if host not in HOST_TIERS:
            raise ValueError(f"the host tier must be one of {', '.join(HOST_TIERS)}; got {host!r}")
        self.store, self.features, self.host = store, features, host
        self.partition, self.graph = store.partition(), StoreShapes(store)
        self.spill = SpillDirectory(spill_dir)
        self.selective = float(selective or 0.0)
        self._reader = None
        self._selected = None
        # The chunk cache, its plan and where each stage's loops start in a training step's accesses (the model
        # sets them from its budget: plan.budget.Budget).
        self.cache, self.cache_plan, self.cache_offsets = new_cache(), None, {}
        self._plan_tables = None  # the plan's keep and evict tables as constants, made once
        weakref.finalize(self, cache_clear, self.cache)

    @property
    def host_home(self):
        return "disk" if self.host == "disk" else "host"

    @property
    def reader(self) -> StoreReader:
        if self._reader is None:
            self._reader = StoreReader(self.store, [self.features])
        return self._reader

    def chunks(self, lanes, d, offset=None, after=None):
        """Lane d's chunks: read on the host (and copied to the lane unless it is the host); on one lane with a
        cache plan, through the cache, at the training step's accesses from `offset` (None or < 0: lookups
        only), once `after` (the previous pass's token) is computed: the plan is made in that order."""
        if len(lanes) == 1 and self.cached:
            return CachedChunks(self, offset, copy=self.copies(lanes.devices[d]), after=after)
        return CopiedChunks(self.reader, lanes.devices[d], copy=self.copies(lanes.devices[d]))

    @property
    def cached(self) -> bool:
        """Whether reads go through the cache (a plan that keeps something, an npy store, no selective
        scheduling, one lane: the plan is made for one)."""
        plan = self.cache_plan
        return plan is not None and bool(plan.keep.any()) and not self.selective and self.reader.cacheable

    def cache_access(self, offset, step, after=None):
        """At a training step's access offset + step (offset < 0 or None: not training): erases what the plan
        evicts there (once `after` is computed) and gives whether to keep what is read (a bool tensor)."""
        if offset is None or step is None:
            return tf.constant(False)
        plan = self.cache_plan
        if self._plan_tables is None:
            with tf.init_scope():  # eager constants, captured by every function that reads them
                self._plan_tables = tf.constant(plan.keep), tf.constant(plan.evict)
        tables = self._plan_tables
        training = tf.cast(offset, tf.int32) >= 0
        at = tf.maximum(tf.cast(offset, tf.int32) + tf.cast(step, tf.int32), 0)
        if (plan.evict >= 0).any():
            items = tf.where(training, tf.gather(tables[1], at), -1)
            cache_erase(self.cache, self.cache_keys(items), after=0 if after is None else after)
        return tf.logical_and(training, tf.gather(tables[0], at))

    def cache_keys(self, items):
        """The cache keys of plan items (a vector; -1: none): chunk k's arrays k * A + a (A arrays a chunk),
        feature tile t (item P^2 + t) P^2 * A + t; -1 padded."""
        P2, width = self.partition.num_parts ** 2, len(self.reader.arrays)
        items = tf.cast(items, tf.int64)[:, None]
        arrays = tf.range(width, dtype=tf.int64)[None]
        none = tf.constant(-1, tf.int64)
        chunks = items * width + arrays
        tiles = tf.where(arrays == 0, P2 * width + items - P2, none)  # a tile's one key, then none
        return tf.reshape(tf.where(items < 0, none, tf.where(items < P2, chunks, tiles)), [-1])

    def tile_key(self, tile):
        return self.partition.num_parts ** 2 * len(self.reader.arrays) + tf.cast(tile, tf.int64)

    def cache_offset(self, index, kind, training) -> int:
        """Where stage `index`'s `kind` loop ("forward", "recompute", "backward") starts in a training step's
        chunk accesses; -1 (look up only) outside training or without a cache plan."""
        return self.cache_offsets.get((index, kind), -1) if training else -1

    def copies(self, lane) -> bool:
        return copies_to(lane)

    def input_spec(self, compute_dtype):
        return input_spec(self.store, self.features, compute_dtype)

    @property
    def sparse(self) -> bool:
        """Whether the features are a CSR array: read as tf.SparseTensor rows, never densified."""
        return self.store.is_sparse(self.features)

    def input_row_nbytes(self) -> int:
        """Bytes a row of the features takes once read (what their row tiles are sized by)."""
        return self.store.row_nbytes(self.features)

    def selected_chunks(self) -> dict:
        """{chunk id: source rows it uses}, for the chunks whose edges leave from fewer than `selective` of their
        source interval's rows (NeuGraph's selective scheduling; read from the store's CSR pointers once)."""
        if self._selected is None:
            self._selected = {}
            P, sizes = self.partition.num_parts, np.diff(np.asarray(self.partition.bounds, np.int64))
            for i in range(P):
                for j in range(P):
                    if self.partition.edge_counts[i, j]:
                        indptr = self.store.chunk_arrays(i, j, names=("csr_indptr",))["csr_indptr"]
                        used = int(np.count_nonzero(np.diff(indptr)))
                        if used < self.selective * sizes[i]:
                            self._selected[i * P + j] = used
        return self._selected


class CopiedChunks:
    """A store's chunks read on the host, and copied to a lane (copy_h2d) unless the lane is the host."""

    def __init__(self, reader, lane, copy=True):
        self.reader, self.lane, self.copy = reader, lane, copy
        self.index_dtype = reader.index_dtype

    def chunk(self, k, step=None):
        return _copied(self.reader.chunk(k), self.lane, self.copy)


class CachedChunks:
    """A store's chunks through the cache (one lane, npy): chunk(k, step) is served from the cache when k is
    there, else read; at a training step's access (offset + step) the read is kept, and items evicted, as the
    plan says."""

    def __init__(self, residency, offset, copy=False, after=None):
        self.residency, self.offset, self.copy, self.after = residency, offset, copy, after
        self.reader = residency.reader
        self.index_dtype = self.reader.index_dtype

    def chunk(self, k, step=None):
        keep = self.residency.cache_access(self.offset, step, self.after)
        return _copied(self.reader.chunk(k, cache=self.residency.cache, keep=keep, after=self.after), None,
                       self.copy)


def _copied(loaded, lane, copy):
    """A chunk read on the host, copied to `lane` (or not: the lane is the host), and prepared there once
    (prepare_graph) for every fused op of the step that reads it."""
    if not copy:
        return loaded
    with on_lane(lane):
        tensors = [copy_h2d(t) for t in loaded.adjacency.tensors()]
        data = None if loaded.edge_data is None else copy_h2d(loaded.edge_data)
        plan = prepare_graph(tensors)

    def ids():
        with on_lane(lane):
            return copy_h2d(loaded.edge_ids_tensor())

    return LoadedChunk(LoadedAdjacency(AdjacencyTensors(*tensors), plan), data, ids)


def on_lane(lane):
    """tf.device(lane), or nothing for the default lane (None)."""
    return contextlib.nullcontext() if lane is None else tf.device(lane)


def input_spec(shape, features: str, compute_dtype) -> tuple:
    """(row shape, dtype) of the rows a model reads from vertex array `features` of a store (or a store's
    Shape): floating rows in the model's compute dtype."""
    row_shape, dtype = shape.vertex_spec(features)
    dtype = tf.as_dtype(dtype)
    return tuple(row_shape), compute_dtype if dtype.is_floating else dtype


def copies_to(lane) -> bool:
    """Whether a block moved between the host tier and `lane` is copied: not when the lane is the host."""
    return not _is_host(lane)


def _is_host(lane) -> bool:
    """Whether ops placed on `lane` run on the host CPU: the default lane with no GPU in the process."""
    return lane is None and not tf.config.list_logical_devices("GPU")


__all__ = ["CachedChunks", "CopiedChunks", "HOST_TIERS", "InMemory", "StoreShapes", "Streamed", "copies_to",
           "input_spec", "on_lane"]
