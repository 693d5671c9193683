"""Where a compiled loop gets chunk C[i][j] from, by its id k = i * P + j.

`PackedChunks` holds an in-memory partition's chunks as a handful of tensor
lists: one per index array (and the edge data), element k chunk k's array, so
a loop iteration reads chunk k out of them without copying its edges (a list
element is the tensor itself; a slice of one concatenated tensor would copy
it, on every access). Each chunk is also prepared once (NgraPrepareGraph:
its arrays checked, and on a GPU its walks' schedules, in position-free
bytes), and the plans are packed the same way, so that no fused op of a loop
checks or schedules its chunk again. The store reader (ngra_tf.store.reader.StoreReader)
answers the same `chunk(k)` with ops that read chunk k's files when the
iteration runs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.graph.adjacency import AdjacencyTensors, LoadedAdjacency
from ngra_tf.graph.partition import LoadedChunk
from ngra_tf.ops.propagation import prepare_graph

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
            self.lists = {}  # name -> (dtype, the list's handle: an eager variant tensor that traced loops capture)
            for name in INDEX_ARRAYS:
                arrays = [np.zeros(0, index_dtype) if a is None else a.astype(index_dtype, copy=False)
                          for a in pieces[name]]
                self.lists[name] = _tensor_list(arrays, tf.as_dtype(index_dtype))
            if has_data:
                sample = partition.chunk(0, 0).edge_data
                arrays = [np.zeros((0,) + sample.shape[1:], sample.dtype) if d is None else d for d in data]
                self.lists["edge_data"] = _tensor_list(arrays, tf.as_dtype(sample.dtype))
        self._plans = _prepared(pieces, index_dtype, device)
        self.index_dtype = tf.as_dtype(index_dtype)
        self._partition, self._wanted, self._device = partition, wanted, device
        self._ids = None  # the edge ids' list, packed when a layer first reads them
        self._row_shapes = {name: [None] for name in INDEX_ARRAYS}
        if has_data:
            self._row_shapes["edge_data"] = [None] + list(partition.chunk(0, 0).edge_data.shape[1:])

    def chunk(self, k, step=None) -> LoadedChunk:
        """Chunk k's arrays (elements of the lists: no copy). `step`, the loop's step, is not needed here."""
        arrays = {}
        for name, packed in self.lists.items():
            value = _item(packed, k)
            value.set_shape(self._row_shapes[name])
            arrays[name] = value
        plan = None if self._plans is None else _item(self._plans, k)
        return LoadedChunk(LoadedAdjacency(AdjacencyTensors(*(arrays[name] for name in INDEX_ARRAYS)), plan),
                           arrays.get("edge_data"), lambda: self._edge_ids(k))

    def _edge_ids(self, k):
        if self._ids is None:
            P = self._partition.num_parts
            ids = [self._partition.chunk(c // P, c % P).edge_ids.astype(np.int64) if c in self._wanted
                   else np.zeros(0, np.int64) for c in range(P * P)]
            with tf.init_scope(), tf.device(self._device or "/cpu:0"):
                self._ids = _tensor_list(ids, tf.int64)
        value = _item(self._ids, k)
        value.set_shape([None])
        return value


def _item(packed, k):
    """Element k of a packed (dtype, handle) tensor list: the tensor itself, no copy."""
    dtype, handle = packed
    return tf.raw_ops.TensorListGetItem(input_handle=handle, index=tf.cast(k, tf.int32),
                                        element_shape=tf.constant(-1, tf.int32), element_dtype=dtype)


def _prepared(pieces, index_dtype, device):
    """The packed chunks' plans (NgraPrepareGraph, made eagerly on the device the fused ops default to) as a
    tensor list on `device`; an empty plan for a chunk not packed; None without the compiled library."""
    plans = []
    with tf.init_scope():
        for k in range(len(pieces[INDEX_ARRAYS[0]])):
            if pieces[INDEX_ARRAYS[0]][k] is None:
                plans.append(np.zeros(0, np.int8))
                continue
            plan = prepare_graph([tf.constant(pieces[name][k].astype(index_dtype, copy=False))
                                  for name in INDEX_ARRAYS])
            if plan is None:
                return None
            plans.append(plan.numpy())
        with tf.device(device or "/cpu:0"):
            return _tensor_list(plans, tf.int8)


def _tensor_list(arrays, dtype):
    """(dtype, handle) of a tensor list holding `arrays` (numpy), one element each (built eagerly: traced
    loops capture the handle)."""
    handle = tf.raw_ops.EmptyTensorList(element_shape=tf.constant(-1, tf.int32), max_num_elements=-1,
                                        element_dtype=dtype)
    for array in arrays:
        handle = tf.raw_ops.TensorListPushBack(input_handle=handle, tensor=tf.constant(array, dtype))
    return dtype, handle


__all__ = ["PackedChunks"]
