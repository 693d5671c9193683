"""Where a compiled loop gets chunk C[i][j] from, by its id k = i * P + j.

`PackedChunks` holds an in-memory partition's chunks as a handful of
tensors: each index array of every chunk concatenated, with offsets, so a
loop iteration slices chunk k out of them (no copy of the edges). The store
reader (ngra_tf.store.reader.StoreReader) answers the same `chunk(k)` with ops
that read chunk k's files when the iteration runs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk

INDEX_ARRAYS = AdjacencyTensors._fields


class PackedChunks:
    """A partition's P x P chunks as concatenated tensors (on `device`), sliced by chunk id in a loop.

    `chunks` limits which chunks are packed (others are empty): a device of
    a ring holds only the chunks of the columns it owns.
    """

    def __init__(self, partition, device=None, chunks=None):
        P = partition.num_parts
        wanted = set(range(P * P)) if chunks is None else set(chunks)
        pieces = {name: [] for name in INDEX_ARRAYS}
        data = []
        index_dtype = np.int32
        for k in range(P * P):
            chunk = partition.chunk(k // P, k % P) if k in wanted else None
            if chunk is not None and chunk.adjacency.index_dtype == np.int64:
                index_dtype = np.int64
            for name in INDEX_ARRAYS:
                pieces[name].append(None if chunk is None else getattr(chunk.adjacency, name))
            data.append(None if chunk is None else chunk.edge_data)
        has_data = partition.chunk(0, 0).edge_data is not None
        with tf.init_scope(), tf.device(device or "/cpu:0"):
            self.arrays, self.offsets = {}, {}
            for name in INDEX_ARRAYS:
                arrays = [np.zeros(0, index_dtype) if a is None else a.astype(index_dtype, copy=False)
                          for a in pieces[name]]
                self.arrays[name] = tf.constant(np.concatenate(arrays))
                self.offsets[name] = tf.constant(np.cumsum([0] + [len(a) for a in arrays]), tf.int64)
            self.edge_data = self.data_offsets = None
            if has_data:
                sample = partition.chunk(0, 0).edge_data
                arrays = [np.zeros((0,) + sample.shape[1:], sample.dtype) if d is None else d for d in data]
                self.edge_data = tf.constant(np.concatenate(arrays))
                self.data_offsets = tf.constant(np.cumsum([0] + [len(a) for a in arrays]), tf.int64)
        self.index_dtype = tf.as_dtype(index_dtype)

    def chunk(self, k) -> LoadedChunk:
        """Chunk k's arrays (tensor slices)."""
        tensors = [_piece(self.arrays[name], self.offsets[name], k) for name in INDEX_ARRAYS]
        data = None if self.edge_data is None else _piece(self.edge_data, self.data_offsets, k)
        return LoadedChunk(LoadedAdjacency(AdjacencyTensors(*tensors)), data)


def _piece(values, offsets, k):
    start = offsets[k]
    piece = tf.slice(values, tf.concat([[start], tf.zeros([values.shape.rank - 1], tf.int64)], 0),
                     tf.concat([[offsets[k + 1] - start], -tf.ones([values.shape.rank - 1], tf.int64)], 0))
    piece.set_shape([None] + values.shape[1:].as_list())
    return piece


__all__ = ["PackedChunks"]
