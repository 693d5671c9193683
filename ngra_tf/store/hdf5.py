"""The HDF5 store backend: one HDF5 file per chunk and one per vertex interval.

    order.h5                       dataset order: new vertex id -> user id (int64 [V])
    vertex/<part>.h5               one dataset per vertex array: its rows of interval `part` (a CSR
                                   array: datasets <name>.indptr, <name>.indices and <name>.values)
    chunks/<i>-<j>.h5              datasets csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge,
                                   edge_ids, edge_data of chunk C[i][j]

One file per unit a step reads, not one file for the store: each file is
written whole under a temporary name and renamed, so a killed conversion
never leaves a damaged HDF5 file (HDF5 does not survive a writer dying
mid-write), and its checksum covers exactly what a step reads, so reading
chunk (i, j) first verifies that chunk's file, not the whole store.

Files are written with h5py. NumPy-side reads use h5py; the TF ops read
through tensorflow-io (`tfio.IOTensor.from_hdf5` with a spec, sliced), which
reads only the requested hyperslab when the op runs. Bool arrays are stored
as uint8 (tensorflow-io reads no HDF5 enum, which is how h5py stores bool).
"""

from __future__ import annotations

import h5py
import numpy as np

NAME = "hdf5"
# File names (store.Layout fills them in); the key of an array in its file is its own name.
ORDER_FILE = "order.h5"
VERTEX_FILE = "vertex/{part:05d}.h5"
SPARSE_VERTEX_FILE = "vertex/{part:05d}.h5"  # datasets <name>.indptr, <name>.indices, <name>.values
CHUNK_FILE = "chunks/{src_part:05d}-{dst_part:05d}.h5"


def stored_dtype(dtype) -> np.dtype:
    """The dtype an array of `dtype` has inside the HDF5 file."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint8) if dtype == np.bool_ else dtype


def write_arrays(path, arrays: dict) -> None:
    with h5py.File(path, "w") as file:
        for key, array in arrays.items():
            file.create_dataset(key, data=np.ascontiguousarray(array, dtype=stored_dtype(array.dtype)))


class RowWriter:
    """Writes datasets of known shapes into one HDF5 file, a block of rows at a time."""

    def __init__(self, path, specs: dict):
        self._file = h5py.File(path, "w")
        self._shapes = {key: tuple(shape) for key, (shape, _) in specs.items()}
        self._datasets = {key: self._file.create_dataset(key, shape=tuple(shape), dtype=stored_dtype(dtype))
                          for key, (shape, dtype) in specs.items()}
        self._written = dict.fromkeys(specs, 0)

    def append(self, key: str, rows: np.ndarray) -> None:
        start = self._written[key]
        dataset = self._datasets[key]
        dataset[start:start + len(rows)] = np.asarray(rows, dtype=dataset.dtype)
        self._written[key] = start + len(rows)

    def close(self) -> None:
        self._file.close()
        for key, count in self._written.items():
            if count != self._shapes[key][0]:
                raise AssertionError(f"wrote {count} rows of {key}, expected {self._shapes[key][0]}")


def describe(path, keys) -> dict:
    """{key: (shape, dtype as stored)} of the datasets asked for; None for one that is missing."""
    found = {}
    with h5py.File(path, "r") as file:
        for key in keys:
            dataset = file.get(key)
            found[key] = None if not isinstance(dataset, h5py.Dataset) else (dataset.shape, dataset.dtype)
    return found


def read(path, key: str, dtype, rows=None) -> np.ndarray:
    """Dataset `key` (rows = (start, stop): only those rows) as a read-only array of `dtype`."""
    with h5py.File(path, "r") as file:
        dataset = file[key]
        array = dataset[()] if rows is None else dataset[rows[0]:rows[1]]
    array = np.asarray(array)
    if np.dtype(dtype) == np.bool_:
        array = array.view(np.bool_)
    array.flags.writeable = False
    return array


def read_ops(path: str, version, specs: dict, rows=None) -> dict:
    """TF ops reading datasets {key: (dataset shape, dtype)} through tensorflow-io when they run.

    This is the op that `tfio.IOTensor.from_hdf5(...)(key)[start:stop]` runs
    (a hyperslab read: only the rows asked for), called directly for one
    reason: tensorflow-io keeps every HDF5 file it opened open for the life
    of the process, keyed by the string `shared`, which the public API sets
    to the file name, so a file replaced on disk would go on being read
    from the old handle. `version` (a string tensor, computed when the ops
    run) names the file's current version instead. rows = (start, stop)
    reads only those rows of each dataset; static shapes are set.
    """
    import tensorflow as tf  # noqa: PLC0415  (only the op readers need TF)
    from tensorflow_io.python.ops import core_ops  # noqa: PLC0415  (loads tfio's op library: only when asked)

    tensors = {}
    for key, (shape, dtype) in specs.items():
        shape = tuple(shape)
        result = shape if rows is None else (rows[1] - rows[0],) + shape[1:]
        if int(np.prod(result)) == 0:  # nothing to read (HDF5 has no zero-sized hyperslab)
            with tf.control_dependencies([version]):
                tensors[key] = tf.identity(tf.zeros(result, tf.as_dtype(dtype)))
            continue
        start, stop = (0, -1) if rows is None else ([rows[0]], [rows[1]])
        tensor = core_ops.io_hdf5_readable_read(
            input=path, shared=version, component=f"/{key}", shape=tf.constant(shape, tf.int64), start=start,
            stop=stop, dtype=tf.as_dtype(stored_dtype(dtype)), container="NgraTfStore")
        if np.dtype(dtype) == np.bool_:
            tensor = tf.cast(tensor, tf.bool)
        tensors[key] = tf.ensure_shape(tensor, result)
    return tensors
