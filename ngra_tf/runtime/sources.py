"""Where a stage's rows and chunks come from: a partition in memory, or a chunk store on disk.

A source tells the executor whether it streams, hands it the chunks (sliced
from the packed partition, or read from the store's files by TensorFlow ops),
and, over several devices, each lane's chunks.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.copy import copy_h2d
from ngra_tf.runtime.chunks import PackedChunks
from ngra_tf.store.reader import StoreReader


class MemorySource:
    """An in-memory Partition: the model's input is a tensor, chunks are sliced from the packed partition."""

    streamed = False

    def __init__(self, partition):
        self.partition, self.graph = partition, partition.graph
        self._chunks = None

    @property
    def chunks(self):
        if self._chunks is None:
            self._chunks = PackedChunks(self.partition)
        return self._chunks

    def lane_chunks(self, ring, d):
        """The chunks of the columns lane d owns, packed on its device (copied there once)."""
        lanes = self.__dict__.setdefault("_lanes", {})
        if d not in lanes:
            P = self.partition.num_parts
            lane = ring.order[d]
            mine = [i * P + j for i in range(P) for j in range(P) if ring.owner(j) == lane]
            lanes[d] = PackedChunks(self.partition, device=lane, chunks=mine)
        return lanes[d]


class StoreShapes:
    """What SAGALayer.compiled reads of a graph, for a store."""

    def __init__(self, store):
        self.num_vertices = store.num_vertices
        spec = store.edge_data_spec
        self.stored_edge_data = None if spec is None else np.zeros((0,) + tuple(spec[0]), spec[1])


class StoreSource:
    """A chunk store: the model's input is vertex array `features`, read by interval; chunks read from files."""

    streamed = True

    def __init__(self, store, features="features"):
        self.store, self.features = store, features
        self.partition, self.graph = store.partition(), StoreShapes(store)
        self._reader = None

    @property
    def chunks(self) -> StoreReader:
        if self._reader is None:
            self._reader = StoreReader(self.store, [self.features])
        return self._reader

    def input_spec(self, compute_dtype):
        row_shape, dtype = self.store.vertex_spec(self.features)
        dtype = tf.as_dtype(dtype)
        return tuple(row_shape), compute_dtype if dtype.is_floating else dtype


class CopiedChunks:
    """A store's chunks read on the host and copied to a lane (copy_h2d)."""

    def __init__(self, reader, lane):
        self.reader, self.lane = reader, lane
        self.index_dtype = reader.index_dtype

    def chunk(self, k):
        loaded = self.reader.chunk(k)
        with on_lane(self.lane):
            tensors = [copy_h2d(t) for t in loaded.adjacency.tensors()]
            data = None if loaded.edge_data is None else copy_h2d(loaded.edge_data)
        return LoadedChunk(LoadedAdjacency(AdjacencyTensors(*tensors)), data)


def on_lane(lane):
    """tf.device(lane), or nothing for the default lane (None)."""
    return contextlib.nullcontext() if lane is None else tf.device(lane)


__all__ = ["CopiedChunks", "MemorySource", "StoreShapes", "StoreSource", "on_lane"]
