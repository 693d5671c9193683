"""The npy store backend: one .npy file per array.

    order.npy                              new vertex id -> user id (int64 [V])
    vertex/<name>/<part>.npy               a vertex array's rows of one interval, in interval order
    vertex/<name>/<part>.<array>.npy       a CSR vertex array's indptr, indices and values of one interval
    chunks/<i>-<j>/<array>.npy             chunk C[i][j]: csc_indptr, csc_src, csr_indptr, csr_dst,
                                           csr_edge, edge_ids, edge_data

Files are read with plain reads (no memory map, whose pages would count
against a process's resident memory), whole or by rows; the TF ops read
them in a tf.numpy_function when they run.
"""

from __future__ import annotations

import math
import os
import tokenize

import numpy as np

NAME = "npy"
# File names (store.Layout fills them in); the key of an array in its file is its own name.
ORDER_FILE = "order.npy"
VERTEX_FILE = "vertex/{name}/{part:05d}.npy"
SPARSE_VERTEX_FILE = "vertex/{name}/{part:05d}.{array}.npy"  # a CSR array's indptr, indices and values
CHUNK_FILE = "chunks/{src_part:05d}-{dst_part:05d}/{array}.npy"


def write_arrays(path, arrays: dict) -> None:
    """Writes the one array of an npy file (the dict has one key)."""
    (array,) = arrays.values()
    with open(path, "wb") as stream:
        np.lib.format.write_array(stream, np.ascontiguousarray(array), allow_pickle=False)


class RowWriter:
    """Writes an npy file of known shape a block of rows at a time."""

    def __init__(self, path, specs: dict):
        ((self._key, (shape, dtype)),) = specs.items()
        self._shape, self._dtype = tuple(shape), np.dtype(dtype)
        self._written = 0
        self._stream = open(path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self._dtype), "fortran_order": False,
                  "shape": self._shape}
        np.lib.format.write_array_header_1_0(self._stream, header)

    def append(self, key: str, rows: np.ndarray) -> None:
        assert key == self._key and rows.shape[1:] == self._shape[1:], (key, rows.shape, self._shape)
        self._stream.write(np.ascontiguousarray(rows, dtype=self._dtype).data)
        self._written += len(rows)

    def close(self) -> None:
        self._stream.close()
        if self._written != self._shape[0]:
            raise AssertionError(f"wrote {self._written} rows of {self._key}, expected {self._shape[0]}")


def _header(stream):
    """(shape, dtype, data offset) of the npy file open in stream."""
    version = np.lib.format.read_magic(stream)
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"npy format version {version} is not supported")
    except (SyntaxError, tokenize.TokenError) as error:  # numpy tokenizes the header: a damaged one fails so too
        raise ValueError(f"the .npy header cannot be parsed: {error}") from None
    if fortran and len(shape) > 1:
        raise ValueError("the array is stored in Fortran order")
    return tuple(shape), dtype, stream.tell()


def data_offset(stream) -> int:
    """Where the array's bytes start in the npy file open in stream (after its header)."""
    return _header(stream)[2]


def describe(path, keys) -> dict:
    """{key: (shape, dtype)} of the file's array, under the one key asked for."""
    (key,) = keys
    with open(path, "rb") as stream:
        shape, dtype, offset = _header(stream)
        size = os.fstat(stream.fileno()).st_size
    # numpy reads a header whose length field is off by a few bytes, which moves the data: the array must
    # fill the file exactly from where the header ends.
    end = offset + math.prod(shape) * dtype.itemsize
    if end != size:
        raise ValueError(f"its header puts {dtype}{list(shape)} at bytes {offset}..{end}, but the file has {size}")
    return {key: (shape, dtype)}


def read(path, key: str, dtype, rows=None) -> np.ndarray:
    """The file's array of `dtype` (rows = (start, stop): only those rows), read-only."""
    with open(path, "rb") as stream:
        shape, stored, offset = _header(stream)
        if stored != np.dtype(dtype):
            raise ValueError(f"{path} holds {stored}, expected {np.dtype(dtype)}")
        dtype = stored
        start, stop = (0, shape[0] if shape else 1) if rows is None else rows
        row_nbytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        if rows is not None:
            shape = (stop - start,) + shape[1:]
        array = np.empty(shape, dtype)
        stream.seek(offset + start * row_nbytes)
        view = array.reshape(-1).view(np.uint8)
        if stream.readinto(view) != view.size:
            raise ValueError(f"{path} ended early")
    array.flags.writeable = False
    return array
