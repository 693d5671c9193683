"""Chunk stores: a partitioned graph on disk, read a chunk or an interval at a time.

A store of graph G at P holds exactly `G.partition(P, reencode)`: the
interval bounds, the re-encoding (`order`: new id -> user id), and for every
chunk C[i][j] its Adjacency arrays, user edge ids and edge data, plus vertex
arrays (features, labels, masks, ...) in interval order, one file per
interval, so that an interval's rows are one contiguous read.

    store = open_store("reddit.store")          # reads the manifest and the order, nothing else
    chunk = store.chunk(1, 2)                   # a Chunk, read from disk (checksum-verified)
    x = store.vertex_rows("features", 1)        # interval 1's feature rows
    t = store.vertex_rows_op("features", 1)     # the same as a TF op that reads when it runs

Layout: `manifest.json` (written last: a directory without it is an
unfinished conversion and does not open) and the files of a backend,
`store_npy` or `store_hdf5`. The manifest lists every file with its size,
crc32 and the shape and dtype of each array in it; a file is checked against
it the first time a process reads it, and `verify()` checks them all. Stores
are written by `write_store` (an in-memory Graph) or
`ngra_tf.store.convert` (a stream of edges, in bounded memory).
"""

from __future__ import annotations

import collections
import json
import os
import re

import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from ngra_tf.graph.adjacency import Adjacency
from ngra_tf.graph.adjacency import cached_tensor
from ngra_tf.graph.partition import Chunk
from ngra_tf.store import hdf5 as store_hdf5, integrity, memory, npy as store_npy


class StoreError(ValueError):
    """A store on disk that is not what its manifest says: missing, changed, damaged or inconsistent files.
    Raised when a store is opened and whenever one of its files is first read (so also mid-training)."""


FORMAT = "ngra-tf-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BACKENDS = {store_npy.NAME: store_npy, store_hdf5.NAME: store_hdf5}
INDEX_ARRAYS = ("csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge")
CHUNK_ARRAYS = INDEX_ARRAYS + ("edge_ids", "edge_data")
_OP_ARRAYS = INDEX_ARRAYS + ("edge_data",)
_VERTEX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_HEADER_KEYS = ("backend", "num_vertices", "num_edges", "num_parts", "reencode", "bounds", "edge_counts",
                "imbalance", "order", "vertex_arrays", "edge_data", "files")

# One array of a store: which file, which key in it, its shape and dtype, and what it is (for messages).
Location = collections.namedtuple("Location", ["path", "key", "shape", "dtype", "what"])


def check_vertex_name(name) -> str:
    if not isinstance(name, str) or not _VERTEX_NAME.match(name):
        raise ValueError(f"a vertex array name must be letters, digits, '_', '.' or '-' and start with a "
                         f"letter or '_' (it names files); got {name!r}")
    return name


def backend(name: str):
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"format must be one of {', '.join(BACKENDS)}; got {name!r}")
    return BACKENDS[name]


def chunk_index_dtype(num_edges: int, num_src: int, num_dst: int) -> np.dtype:
    """The index dtype Adjacency.from_coo gives a chunk of this size."""
    return np.dtype(np.int64 if memory.index_itemsize(num_edges, num_src, num_dst) == 8 else np.int32)


class Layout:
    """Where every array of a store lives, and the shape and dtype it must have.

    Follows from the manifest's header (P, bounds, edge counts, the vertex
    and edge data specs) and the backend's file naming; the manifest's file
    list must agree with it.
    """

    def __init__(self, backend_module, num_vertices, bounds, edge_counts, vertex_arrays: dict, edge_data,
                 sparse: dict | None = None):
        self.backend = backend_module
        self.num_vertices = int(num_vertices)
        self.sizes = np.diff(np.asarray(bounds, np.int64))
        self.edge_counts = np.asarray(edge_counts, np.int64)
        self.vertex_arrays = {name: (tuple(row_shape), np.dtype(dtype)) for name, (row_shape, dtype)
                              in vertex_arrays.items()}
        self.edge_data = None if edge_data is None else (tuple(edge_data[0]), np.dtype(edge_data[1]))
        # CSR vertex arrays: name -> stored entries per interval.
        self.sparse = {name: np.asarray(nnz, np.int64) for name, nnz in (sparse or {}).items()}

    @property
    def num_parts(self) -> int:
        return len(self.sizes)

    def order(self) -> Location:
        return Location(self.backend.ORDER_FILE, "order", (self.num_vertices,), np.dtype(np.int64), "the vertex order")

    def vertex(self, name: str, part: int) -> Location:
        """Interval `part` of dense vertex array `name` (a CSR array's parts: vertex_parts)."""
        row_shape, dtype = self.vertex_arrays[name]
        path = self.backend.VERTEX_FILE.format(name=name, part=part)
        return Location(path, name, (int(self.sizes[part]),) + row_shape, dtype,
                        f"interval {part} of vertex array {name!r}")

    def vertex_parts(self, name: str, part: int) -> list:
        """The Locations holding interval `part` of vertex array `name`: its rows, or a CSR array's `indptr`
        (rows + 1 offsets from 0), `indices` (each entry's column, increasing within a row) and `values`."""
        if name not in self.sparse:
            return [self.vertex(name, part)]
        (width,), dtype = self.vertex_arrays[name]
        nnz = int(self.sparse[name][part])
        specs = {"indptr": ((int(self.sizes[part]) + 1,), np.dtype(np.int64)),
                 "indices": ((nnz,), sparse_index_dtype(width)), "values": ((nnz,), dtype)}
        return [Location(self.backend.SPARSE_VERTEX_FILE.format(name=name, part=part, array=array),
                         f"{name}.{array}", shape, array_dtype,
                         f"interval {part} of vertex array {name!r} (CSR {array})")
                for array, (shape, array_dtype) in specs.items()]

    def chunk(self, src_part: int, dst_part: int, names=CHUNK_ARRAYS) -> list:
        """The Locations of chunk (src_part, dst_part)'s arrays among `names` (edge_data only if the graph has it)."""
        edges = int(self.edge_counts[src_part, dst_part])
        num_src, num_dst = int(self.sizes[src_part]), int(self.sizes[dst_part])
        index = chunk_index_dtype(edges, num_src, num_dst)
        specs = {"csc_indptr": ((num_dst + 1,), index), "csc_src": ((edges,), index),
                 "csr_indptr": ((num_src + 1,), index), "csr_dst": ((edges,), index),
                 "csr_edge": ((edges,), index), "edge_ids": ((edges,), np.dtype(np.int64))}
        if self.edge_data is not None:
            specs["edge_data"] = ((edges,) + self.edge_data[0], self.edge_data[1])
        locations = []
        for name in names:
            if name not in CHUNK_ARRAYS:
                raise ValueError(f"a chunk's arrays are {', '.join(CHUNK_ARRAYS)}; got {name!r}")
            if name in specs:
                path = self.backend.CHUNK_FILE.format(src_part=src_part, dst_part=dst_part, array=name)
                shape, dtype = specs[name]
                locations.append(Location(path, name, shape, dtype, f"chunk ({src_part}, {dst_part})"))
        return locations

    def all(self) -> list:
        found = [self.order()]
        found += [location for name in self.vertex_arrays for part in range(self.num_parts)
                  for location in self.vertex_parts(name, part)]
        found += [location for i in range(self.num_parts) for j in range(self.num_parts)
                  for location in self.chunk(i, j)]
        return found

    def files(self) -> dict:
        """{path: {key: Location}} of every file."""
        files = {}
        for location in self.all():
            files.setdefault(location.path, {})[location.key] = location
        return files

    def descriptions(self) -> dict:
        """{path: what the file holds} for messages (an HDF5 interval file holds every vertex array)."""
        described = {}
        for path, keyed in self.files().items():
            whats = sorted({location.what for location in keyed.values()})
            described[path] = whats[0] if len(whats) == 1 else (
                f"{whats[0].split(' of ')[0]} of vertex arrays {', '.join(map(repr, keyed))}")
        return described


def sparse_index_dtype(width: int) -> np.dtype:
    """The dtype of a CSR vertex array's column indices: int32 unless its rows are wider."""
    return np.dtype(np.int32 if width <= np.iinfo(np.int32).max else np.int64)


def sparse_entry(row_shape, dtype, nnz) -> dict:
    """A manifest's entry for a CSR vertex array: its rows' spec and its stored entries per interval."""
    return {"row_shape": [int(s) for s in row_shape], "dtype": np.dtype(dtype).str, "format": "csr",
            "nnz": [int(n) for n in nnz]}


def csr_problem(indptr, indices, width: int) -> str | None:
    """What keeps one interval of a CSR vertex array from being canonical (pointers rising from 0 to the
    entries, columns in 0..width-1 and increasing within each row), or None. O(entries), vectorized."""
    count = len(indices)
    if indptr[0] != 0 or indptr[-1] != count or np.any(np.diff(indptr) < 0):
        return f"indptr does not rise from 0 to the interval's {count} entries"
    if count and (indices.min() < 0 or indices.max() >= width):
        return f"indices holds columns outside 0..{width - 1}"
    row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    if np.any((np.diff(row) == 0) & (np.diff(indices) <= 0)):
        return "indices are not increasing within each row (repeated or unsorted columns)"
    return None


def array_entry(shape, dtype) -> dict:
    return {"shape": [int(s) for s in shape], "dtype": np.dtype(dtype).str}


def _spec(entry) -> tuple:
    """(row_shape, dtype) of a manifest vertex/edge data spec."""
    return tuple(int(s) for s in entry["row_shape"]), np.dtype(entry["dtype"])


def _checked_spec(entry, what) -> tuple:
    """_spec of an entry read from disk: raises ValueError unless it is a list of sizes and a numeric dtype."""
    if not isinstance(entry, dict) or not isinstance(entry.get("row_shape"), list) or not isinstance(
            entry.get("dtype"), str):
        raise ValueError(f"{what} must be {{'row_shape': [sizes], 'dtype': a numpy dtype string}}, got {entry!r}")
    for size in entry["row_shape"]:
        _natural(size, f"a size in {what}'s row_shape")
    try:
        dtype = np.dtype(entry["dtype"])
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or dtype.itemsize > 8:  # what TF and the read ops take
        raise ValueError(f"{what} has dtype {entry['dtype']!r}, not a numeric numpy dtype of at most 8 bytes")
    return _spec(entry)


def csr_tensor(pointers, indices, values, width: int) -> tf.SparseTensor:
    """Rows of a CSR array as a tf.SparseTensor [rows, width]: `pointers` (rows + 1, from the first row's
    offset), and the columns and values they bound (canonical rows: the entries in row-major order)."""
    rows = tf.size(pointers, tf.int64) - 1
    ids = tf.repeat(tf.range(rows), tf.cast(pointers[1:] - pointers[:-1], tf.int64))
    out = tf.SparseTensor(tf.stack([ids, tf.cast(indices, tf.int64)], axis=1), values,
                          tf.stack([rows, tf.constant(width, tf.int64)]))
    out.set_shape([pointers.shape[0] - 1 if pointers.shape[0] is not None else None, width])
    return out


def _sparse_arrays(entries: dict, num_parts: int) -> dict:
    """{name: entries per interval} of the CSR arrays among a manifest's vertex arrays: ValueError unless each
    is a 1-D row of a float dtype with one natural count per interval."""
    found = {}
    for name, entry in entries.items():
        kind = entry.get("format", "dense")
        if kind not in ("dense", "csr"):
            raise ValueError(f"vertex array {name!r} has format {kind!r}; a store knows 'dense' and 'csr'")
        if kind != "csr":
            continue
        nnz = entry.get("nnz")
        if not isinstance(nnz, list) or len(nnz) != num_parts:
            raise ValueError(f"CSR vertex array {name!r} needs nnz, one entry count per interval ({num_parts})")
        for count in nnz:
            _natural(count, f"an entry count of vertex array {name!r}")
        if len(entry["row_shape"]) != 1 or np.dtype(entry["dtype"]).kind != "f":
            raise ValueError(f"CSR vertex array {name!r} must have rows of one axis and a float dtype, got "
                             f"{entry['dtype']}{entry['row_shape']}")
        found[name] = nnz
    return found


def _natural(value, what) -> int:
    """value if it is a JSON integer >= 0 (not a bool, a float or a string), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _int_array(value, what) -> np.ndarray:
    """value (nested lists of JSON integers within int64) as an int64 array, else ValueError."""
    try:
        array = np.asarray(value)
    except ValueError:  # ragged
        array = None
    if array is None or array.dtype.kind != "i":
        raise ValueError(f"{what} must be a list of integers, got {value!r}")
    return array.astype(np.int64)


class Shape:
    """What a store's manifest says of its partition and vertex arrays, without its files: what a model's memory
    estimate reads (ngra_tf.runtime.plan.budget). A Store is one; a converter makes one for each P it weighs
    before it writes anything, so that the P it picks is the one the trainer accepts."""

    def __init__(self, path, num_vertices: int, num_edges: int, bounds, edge_counts, vertex_specs: dict,
                 edge_data_spec=None, sparse: dict | None = None, num_classes: int | None = None):
        self.path = os.path.abspath(os.fspath(path))
        self.num_vertices, self.num_edges = int(num_vertices), int(num_edges)
        self.bounds = np.asarray(bounds, np.int64)
        self.num_parts = len(self.bounds) - 1
        self.edge_counts = np.asarray(edge_counts, np.int64).reshape(self.num_parts, self.num_parts)
        self._vertex_specs = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in vertex_specs.items()}
        self.edge_data_spec = edge_data_spec
        self._sparse = dict(sparse or {})  # CSR array -> its entries per interval
        self._num_classes = num_classes

    @property
    def vertex_names(self) -> tuple:
        return tuple(self._vertex_specs)

    def vertex_spec(self, name: str) -> tuple:
        """(shape of one row, numpy dtype) of vertex array `name`."""
        self._check_name(name)
        return self._vertex_specs[name]

    def is_sparse(self, name: str) -> bool:
        """Whether vertex array `name` is stored as CSR (bag-of-words features): its rows read as
        scipy.sparse matrices here, as tf.SparseTensor in a model's steps."""
        self._check_name(name)
        return name in self._sparse

    def nnz(self, name: str) -> np.ndarray:
        """Stored entries per interval of CSR vertex array `name`."""
        if not self.is_sparse(name):
            raise ValueError(f"store {self.path}: vertex array {name!r} is dense; nnz() counts a CSR array's entries")
        return np.asarray(self._sparse[name]).copy()

    def row_nbytes(self, name: str) -> int:
        """Bytes one row of vertex array `name` takes in memory once read: a dense row's, or for a CSR array its
        densest interval's mean entries per row, each as read (index and value) and as a tf.SparseTensor
        entry (two int64 coordinates and a value), plus its pointer. What a store-backed model's row tiles
        are sized by."""
        row_shape, dtype = self.vertex_spec(name)
        if name not in self._sparse:
            return int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        sizes = np.maximum(np.diff(self.bounds), 1)
        per_row = float(np.max(np.asarray(self._sparse[name]) / sizes)) if len(sizes) else 0.0
        entry = sparse_index_dtype(row_shape[0]).itemsize + 16 + 2 * dtype.itemsize
        return int(np.ceil(per_row * entry)) + 8

    def num_classes(self) -> int:
        """Classes of the "labels" array, as the conversion recorded them."""
        if self._num_classes is None:
            raise ValueError(f"{self.path}: the number of classes is not known")
        return int(self._num_classes)

    def partition(self) -> "PartitionShape":
        """The partition's shape: intervals and chunk edge counts (no chunk can be read)."""
        return PartitionShape(self)

    def _check_name(self, name):
        if name not in self._vertex_specs:
            raise ValueError(f"store {self.path} has no vertex array {name!r}; it has "
                             f"{', '.join(map(repr, self._vertex_specs)) or 'none'}")

    def _check_parts(self, *parts):
        for part in parts:
            if isinstance(part, bool) or int(part) != part or not 0 <= part < self.num_parts:
                raise ValueError(f"interval {part!r} is out of range for a store of {self.num_parts} intervals")


class PartitionShape:
    """A Shape's partition as a model's plan reads it before its store is written: num_parts, bounds and
    edge_counts (in-degrees need the chunks: they are not asked for when only the memory is estimated)."""

    def __init__(self, shape: Shape):
        self.num_parts, self.bounds, self.edge_counts = shape.num_parts, shape.bounds, shape.edge_counts
        self.path = shape.path

    def in_degree(self, src_part: int, dst_part: int):
        raise ValueError(f"{self.path}: in-degrees need the store's chunks, which are not written yet")


class Store(Shape):
    """A graph partitioned into num_parts intervals and chunks, on disk. Open with open_store."""

    def __init__(self, path, manifest: dict):
        num_parts = int(manifest["num_parts"])
        super().__init__(path, manifest["num_vertices"], manifest["num_edges"], manifest["bounds"],
                         manifest["edge_counts"], {name: _spec(entry) for name, entry in
                                                   manifest["vertex_arrays"].items()},
                         None if manifest["edge_data"] is None else _spec(manifest["edge_data"]),
                         _sparse_arrays(manifest["vertex_arrays"], num_parts),
                         manifest.get("source", {}).get("num_classes"))
        self.manifest = manifest
        self.format = manifest["backend"]
        self._backend = backend(self.format)
        self.reencode = bool(manifest["reencode"])
        self._layout = Layout(self._backend, self.num_vertices, self.bounds, self.edge_counts,
                              self._vertex_specs, self.edge_data_spec, self._sparse)
        # A file -> the CSR intervals (array, interval) it holds part of: checked on first read, as a chunk's are.
        self._csr_of = {}
        for name in self._layout.sparse:
            for part in range(self.num_parts):
                for path in {location.path for location in self._layout.vertex_parts(name, part)}:
                    self._csr_of.setdefault(path, []).append((name, part))
        self._what = self._layout.descriptions()
        self._entry_keys = {path: json.dumps(entry, sort_keys=True) for path, entry in manifest["files"].items()}
        self._chunk_of = {location.path: (i, j) for i in range(self.num_parts) for j in range(self.num_parts)
                          for location in self._layout.chunk(i, j, INDEX_ARRAYS + ("edge_ids",))}
        order = self._read(self._layout.order())
        if order.size and (order.min() < 0 or order.max() >= self.num_vertices
                           or np.bincount(order, minlength=self.num_vertices).max() != 1):
            raise StoreError(f"store {self.path}: {self._layout.order().path} is not a permutation of the "
                             f"{self.num_vertices} vertex ids")
        self.order = order
        position = np.empty(self.num_vertices, np.int64)
        position[order] = np.arange(self.num_vertices)
        self.position = position
        for array in (self.bounds, self.edge_counts, self.position):
            array.flags.writeable = False

    # ---- description ----

    def chunk_nbytes(self, src_part: int, dst_part: int) -> int:
        """Bytes of chunk (src_part, dst_part)'s arrays in memory (index arrays, edge ids, edge data)."""
        self._check_parts(src_part, dst_part)
        return sum(_nbytes(location) for location in self._layout.chunk(src_part, dst_part))

    def vertex_nbytes(self, name: str, part: int) -> int:
        """Bytes of interval `part`'s rows of vertex array `name` in memory."""
        self._check_name(name)
        self._check_parts(part)
        return sum(_nbytes(location) for location in self._layout.vertex_parts(name, part))

    def num_classes(self) -> int:
        """Classes of the "labels" array: as the conversion recorded them, else the largest label + 1."""
        return super().num_classes() if self._num_classes is not None else int(self.array("labels").read().max()) + 1

    def array(self, name: str) -> "VertexArray":
        """Vertex array `name` as a handle to pass to a store-backed GraphModel's fit / evaluate / predict."""
        self._check_name(name)
        return VertexArray(self, name)

    def partition(self) -> "StorePartition":
        """A Partition-like view whose chunks are read from disk when asked for."""
        view = self.__dict__.get("_partition")
        if view is None:
            view = self._partition = StorePartition(self)
        return view

    # ---- NumPy readers ----

    def vertex_rows(self, name: str, part: int, start: int = 0, stop: int | None = None):
        """Rows start..stop (default: all) of interval `part` of vertex array `name`, in interval order: an
        array, or for a CSR array a scipy.sparse.csr_matrix."""
        rows = self._row_range(name, part, start, stop)
        if name not in self._layout.sparse:
            return self._read(self._layout.vertex(name, part), rows)
        indptr_at, indices_at, values_at = self._layout.vertex_parts(name, part)
        start, stop = rows or (0, indptr_at.shape[0] - 1)
        indptr = self._read(indptr_at, (start, stop + 1))
        entries = (int(indptr[0]), int(indptr[-1]))
        return sp.csr_matrix((self._read(values_at, entries), self._read(indices_at, entries), indptr - indptr[0]),
                             shape=(stop - start,) + self._vertex_specs[name][0])

    def chunk(self, src_part: int, dst_part: int) -> Chunk:
        """Chunk (src_part, dst_part), read from disk (not cached): equal to the partition's."""
        arrays = self.chunk_arrays(src_part, dst_part)
        adjacency = Adjacency(self.bounds[src_part + 1] - self.bounds[src_part],
                              self.bounds[dst_part + 1] - self.bounds[dst_part],
                              *(arrays[name] for name in INDEX_ARRAYS))
        return Chunk(src_part, dst_part, adjacency, arrays["edge_ids"], arrays.get("edge_data"))

    def chunk_arrays(self, src_part: int, dst_part: int, names=CHUNK_ARRAYS) -> dict:
        """{name: array} of chunk (src_part, dst_part) (edge_data only if the graph has edge data)."""
        self._check_parts(src_part, dst_part)
        return {location.key: self._read(location) for location in self._layout.chunk(src_part, dst_part, names)}

    # ---- TF op readers ----

    def vertex_rows_op(self, name: str, part: int, start: int = 0, stop: int | None = None):
        """vertex_rows as a TF op (static shape set) that reads from disk each time it runs.

        Usable inside tf.function. A damaged file fails the op when it runs
        with InvalidArgumentError naming the file and interval (eagerly, the
        reader's ValueError comes through as it is).
        """
        rows = self._row_range(name, part, start, stop)
        with tf.name_scope(f"store_read_interval_{part}_{name}"):
            if name not in self._layout.sparse:
                (tensor,) = self._read_ops([self._layout.vertex(name, part)], rows).values()
                return tensor
            indptr, indices, values = self._read_ops(self._layout.vertex_parts(name, part)).values()
            count, (width,) = int(indptr.shape[0]) - 1, self._vertex_specs[name][0]
            whole = csr_tensor(indptr, indices, values, width)
            start, stop = rows or (0, count)
            return tf.sparse.slice(whole, [start, 0], [stop - start, width])

    def chunk_arrays_op(self, src_part: int, dst_part: int, names=_OP_ARRAYS) -> dict:
        """{name: tensor} of chunk (src_part, dst_part)'s arrays, as TF ops that read from disk when they run.

        By default csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge and
        (if the graph has it) edge_data; `names` may add edge_ids.
        """
        self._check_parts(src_part, dst_part)
        with tf.name_scope(f"store_read_chunk_{src_part}_{dst_part}"):
            return self._read_ops(self._layout.chunk(src_part, dst_part, names))

    # ---- integrity ----

    def verify(self) -> None:
        """Checks every file against the manifest (size, crc32, array shapes and dtypes) and every chunk's
        index arrays, cached or not."""
        for path in self.manifest["files"]:
            self._verify_file(path, force=True)
        for i in range(self.num_parts):
            for j in range(self.num_parts):
                self._verify_chunk(i, j, force=True)
        for name in self._layout.sparse:
            for part in range(self.num_parts):
                self._verify_csr(name, part, force=True)

    def _verify(self, path: str) -> bytes:
        """Checks file `path` (and, for a chunk's file, the chunk's index arrays; for a CSR interval's, its
        pointers and columns) unless this process did; returns a key of the file's version."""
        version = self._verify_file(path)
        if path in self._chunk_of:
            self._verify_chunk(*self._chunk_of[path])
        for name, part in self._csr_of.get(path, ()):
            self._verify_csr(name, part)
        return version

    def _verify_csr(self, name: str, part: int, force: bool = False) -> None:
        """Checks interval `part` of CSR vertex array `name`: canonical pointers and columns, or the ops would
        read past its entries or sum repeated ones."""
        locations = self._layout.vertex_parts(name, part)
        paths = sorted({location.path for location in locations[:2]})
        key = ("csr",) + tuple((self._verify_file(path), self._entry_keys[path]) for path in paths)
        if not force and key in integrity.VERIFIED:
            return
        indptr, indices = (self._backend.read(os.path.join(self.path, location.path), location.key,
                                              location.dtype) for location in locations[:2])
        problem = csr_problem(indptr, indices, self._vertex_specs[name][0][0])
        if problem:
            raise StoreError(f"store {self.path}: interval {part} of vertex array {name!r} ({', '.join(paths)}): "
                             f"{problem}; its files match their checksums, so they were written wrong or edited: "
                             f"convert the graph again with tools/partition_graph.py --overwrite")
        integrity.VERIFIED.add(key)

    def _verify_chunk(self, i: int, j: int, force: bool = False) -> None:
        """Checks chunk (i, j)'s index arrays and edge ids: checksums match whatever wrote them, so an array a
        buggy writer or an edit made wrong would otherwise reach the ops (or a silent wrong answer)."""
        locations = self._layout.chunk(i, j, INDEX_ARRAYS + ("edge_ids",))
        paths = sorted({location.path for location in locations})
        key = ("chunk",) + tuple((self._verify_file(path), self._entry_keys[path]) for path in paths)
        if not force and key in integrity.VERIFIED:
            return
        arrays = {location.key: self._backend.read(os.path.join(self.path, location.path), location.key,
                                                   location.dtype) for location in locations}
        problem = chunk_problem(arrays, int(self.bounds[i + 1] - self.bounds[i]),
                                int(self.bounds[j + 1] - self.bounds[j]), self.num_edges)
        if problem:
            raise StoreError(f"store {self.path}: chunk ({i}, {j}) ({', '.join(paths)}): {problem}; its files "
                             f"match their checksums, so they were written wrong or edited: convert the graph "
                             f"again with tools/partition_graph.py --overwrite")
        integrity.VERIFIED.add(key)

    def _verify_file(self, path: str, force: bool = False) -> bytes:
        """Checks file `path` against the manifest unless this process did; returns a key of its version."""
        entry = self.manifest["files"][path]
        full = os.path.join(self.path, path)
        where = f"store {self.path}: file {path} ({self._what[path]})"
        try:
            identity = integrity.file_identity(full)
        except FileNotFoundError:
            raise StoreError(f"{where} is missing") from None
        key = (identity, self._entry_keys[path])
        version = f"{full}@{':'.join(map(str, identity))}".encode()
        if not force and key in integrity.VERIFIED:
            return version
        if identity[2] != entry["bytes"]:
            raise StoreError(f"{where} has {identity[2]} bytes, the manifest says {entry['bytes']}: "
                             f"the file is truncated or was replaced")
        crc = integrity.crc32_file(full)
        if crc != entry["crc32"]:
            raise StoreError(f"{where} fails its checksum (crc32 {crc:#010x}, the manifest says "
                             f"{entry['crc32']:#010x}): the file is corrupted")
        arrays = entry["arrays"]
        try:
            found = self._backend.describe(full, list(arrays))
        except (OSError, ValueError) as error:
            raise StoreError(f"{where} cannot be read: {error}") from None
        for name, expected in arrays.items():
            shape, dtype = tuple(expected["shape"]), np.dtype(expected["dtype"])
            stored = getattr(self._backend, "stored_dtype", np.dtype)(dtype)
            if found.get(name) is None:
                raise StoreError(f"{where} holds no array {name!r}")
            if tuple(found[name][0]) != shape or np.dtype(found[name][1]) != stored:
                raise StoreError(f"{where} holds {name!r} as {found[name][1]}{list(found[name][0])}, the "
                                 f"manifest says {stored}{list(shape)}")
        integrity.VERIFIED.add(key)
        return version

    # ---- internals ----

    def _read(self, location: Location, rows=None) -> np.ndarray:
        self._verify(location.path)
        return self._backend.read(os.path.join(self.path, location.path), location.key, location.dtype, rows)

    def _read_ops(self, locations: list, rows=None) -> dict:
        """TF ops reading the arrays at locations (all rows, or rows=(start, stop) of each) when they run."""
        if self._backend is store_npy:
            def read():
                arrays = [self._read(location, rows) for location in locations]
                for array in arrays:  # fresh buffers: TF copies a read-only array once more
                    array.flags.writeable = True
                return arrays

            tensors = tf.numpy_function(read, [], [tf.as_dtype(location.dtype) for location in locations],
                                        stateful=True, name="read_npy")
            if not isinstance(tensors, (list, tuple)):  # one output comes back bare
                tensors = [tensors]
            for tensor, location in zip(tensors, locations):
                tensor.set_shape(_rows_shape(location.shape, rows))
            return {location.key: tensor for location, tensor in zip(locations, tensors)}

        tensors = {}
        for path in sorted({location.path for location in locations}):
            # Verifies the file when the ops run (once per process) and names its version for tfio.
            version = tf.numpy_function(lambda path=path: self._verify(path), [], tf.string, stateful=True,
                                        name="verify_file")
            here = [location for location in locations if location.path == path]
            tensors.update(self._backend.read_ops(os.path.join(self.path, path), version,
                                                  {location.key: (location.shape, location.dtype)
                                                   for location in here}, rows))
        return {location.key: tensors[location.key] for location in locations}

    def _row_range(self, name, part, start, stop):
        """rows=(start, stop) of interval `part` for a reader, None for all of them; checked."""
        self._check_name(name)
        self._check_parts(part)
        count = int(self.bounds[part + 1] - self.bounds[part])
        stop = count if stop is None else stop
        if not 0 <= start <= stop <= count:
            raise ValueError(f"rows {start}..{stop} are outside interval {part}'s {count} rows")
        return None if (start, stop) == (0, count) else (int(start), int(stop))

    def __repr__(self):
        return (f"Store({self.path!r}, format={self.format}, num_vertices={self.num_vertices}, "
                f"num_edges={self.num_edges}, num_parts={self.num_parts})")


def chunk_problem(arrays: dict, num_src: int, num_dst: int, num_edges: int) -> str | None:
    """What keeps a chunk's arrays from being Adjacency.from_coo's (CSC sorted by (dst, src), the CSR its
    stable transpose, edge ids of repeated edges in the user's order), or None. O(E), vectorized."""
    csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge, edge_ids = (arrays[name] for name in
                                                                    INDEX_ARRAYS + ("edge_ids",))
    count = len(csc_src)
    for name, indptr in (("csc_indptr", csc_indptr), ("csr_indptr", csr_indptr)):
        if indptr[0] != 0 or indptr[-1] != count or np.any(np.diff(indptr) < 0):
            return f"{name} does not rise from 0 to the chunk's {count} edges"
    for name, ids, bound in (("csc_src", csc_src, num_src), ("csr_dst", csr_dst, num_dst),
                             ("csr_edge", csr_edge, count), ("edge_ids", edge_ids, num_edges)):
        if count and (ids.min() < 0 or ids.max() >= bound):
            return f"{name} holds ids outside 0..{bound - 1}"
    dst = np.repeat(np.arange(num_dst, dtype=csc_src.dtype), np.diff(csc_indptr))
    src = np.repeat(np.arange(num_src, dtype=csc_src.dtype), np.diff(csr_indptr))
    same_dst, same_src = np.diff(dst) == 0, np.diff(src) == 0
    if np.any(same_dst & (np.diff(csc_src) < 0)):
        return "csc_src is not sorted within each destination"
    if np.any(same_src & (np.diff(csr_edge) <= 0)):
        return "csr_edge is not increasing within each source"
    # With the above, this also makes csr_edge a permutation and csr_indptr the out-degrees.
    if not (np.array_equal(csc_src[csr_edge], src) and np.array_equal(dst[csr_edge], csr_dst)):
        return "the CSR arrays (csr_indptr, csr_dst, csr_edge) are not the transpose of the CSC arrays"
    if np.any(same_dst & (np.diff(csc_src) == 0) & (np.diff(edge_ids) <= 0)):
        return "edge_ids of repeated edges are not in increasing (the user's) order"
    return None


def _nbytes(location: Location) -> int:
    return int(np.prod(location.shape, dtype=np.int64)) * location.dtype.itemsize


def _rows_shape(shape, rows):
    return tuple(shape) if rows is None else (rows[1] - rows[0],) + tuple(shape[1:])


class VertexArray:
    """A handle on one vertex array of a store: its shape and dtype, read only when asked.

    Given as `x` to a store-backed GraphModel, the model streams it interval
    by interval; given as labels or a mask, it is read whole (one value per
    vertex) with read().
    """

    def __init__(self, store: Store, name: str):
        self.store, self.name = store, name
        row_shape, self.dtype = store.vertex_spec(name)
        self.shape = (store.num_vertices,) + tuple(row_shape)
        self.sparse = store.is_sparse(name)

    def read(self, order: str = "user"):
        """Every row, in the user's vertex order (order="user") or the store's interval order ("interval"): an
        array, or a scipy.sparse.csr_matrix for a CSR array."""
        if order not in ("user", "interval"):
            raise ValueError(f"order must be 'user' or 'interval', got {order!r}")
        parts = [self.store.vertex_rows(self.name, part) for part in range(self.store.num_parts)]
        rows = sp.vstack(parts, format="csr") if self.sparse else np.concatenate(parts)
        return rows if order == "interval" else rows[self.store.position]

    def __repr__(self):
        kind = ", CSR" if self.sparse else ""
        return (f"VertexArray({self.name!r}, shape={self.shape}, dtype={self.dtype}{kind}, "
                f"store={self.store.path!r})")


class StorePartition:
    """The Partition interface over a store: intervals in memory, chunks read from disk on each call."""

    def __init__(self, store: Store):
        self.store = store
        self.num_parts = store.num_parts
        self.bounds, self.order, self.position = store.bounds, store.order, store.position
        self.edge_counts = store.edge_counts
        self.identity_order = bool(np.array_equal(self.order, np.arange(store.num_vertices)))
        self._in_degrees = {}

    def vertices(self, part: int) -> np.ndarray:
        """The original ids of interval `part`, in local-id order."""
        return self.order[self.bounds[part]:self.bounds[part + 1]]

    def chunk(self, src_part: int, dst_part: int) -> Chunk:
        return self.store.chunk(src_part, dst_part)

    def in_degree(self, src_part: int, dst_part: int) -> np.ndarray:
        """In-degree of interval dst_part's vertices within a chunk: read from its CSC pointers only (cached)."""
        key = (src_part, dst_part)
        if key not in self._in_degrees:
            indptr = self.store.chunk_arrays(src_part, dst_part, names=("csc_indptr",))["csc_indptr"]
            self._in_degrees[key] = np.diff(indptr).astype(np.int64)
        return self._in_degrees[key]

    def order_tensor(self):
        """order as a cached int tensor: gathers user-ordered rows into interval order."""
        return cached_tensor(self, "_order", self.order)

    def position_tensor(self):
        """position as a cached int tensor: gathers interval-ordered rows back into user order."""
        return cached_tensor(self, "_position", self.position)

    def balance(self) -> dict:
        imbalance = self.store.manifest["imbalance"]
        return {"before": imbalance["before"], "after": imbalance["after"]}

    def __repr__(self):
        return f"StorePartition(num_parts={self.num_parts}, store={self.store.path!r})"


def open_store(path) -> Store:
    """Opens the store in directory `path`: validates its manifest and reads the vertex order.

    Cheap: no chunk or vertex array is read. Raises StoreError (a
    ValueError) naming the problem: no directory, an unfinished conversion
    (no manifest), a manifest that is not this format or version, or that
    disagrees with itself.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise StoreError(f"no store at {path}: not a directory")
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
        raise StoreError(f"incomplete store: no manifest ({MANIFEST}) in {path}; a conversion into it did not "
                         f"finish (or it is not a store): convert again with overwrite")
    try:
        with open(manifest_path) as stream:
            manifest = json.load(stream)
    except (OSError, ValueError) as error:
        raise StoreError(f"store {path}: cannot read {MANIFEST}: {error}") from None
    validate_manifest(manifest, path)
    return Store(path, manifest)


def validate_manifest(manifest, path) -> None:
    """Raises StoreError unless the manifest is this format and version and agrees with itself."""
    where = f"store {path}: {MANIFEST}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{where} is not an ngra-tf store manifest (format is not {FORMAT!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreError(f"{where} has format version {version!r}; this ngra_tf reads version {FORMAT_VERSION}")
    missing = [key for key in _HEADER_KEYS if key not in manifest]
    if missing:
        raise StoreError(f"{where} lacks {', '.join(missing)}")
    try:  # JSON from disk: every field the types the code below assumes (no bool, float or string numbers)
        module = backend(manifest["backend"])
        num_parts, num_vertices = _natural(manifest["num_parts"], "num_parts"), _natural(manifest["num_vertices"],
                                                                                          "num_vertices")
        _natural(manifest["num_edges"], "num_edges")
        bounds = _int_array(manifest["bounds"], "bounds")
        counts = _int_array(manifest["edge_counts"], "edge_counts")
        for key in ("vertex_arrays", "files"):
            if not isinstance(manifest[key], dict):
                raise ValueError(f"{key} must be a JSON object")
        vertex_arrays = {check_vertex_name(name): _checked_spec(entry, f"vertex array {name!r}")
                         for name, entry in manifest["vertex_arrays"].items()}
        sparse = _sparse_arrays(manifest["vertex_arrays"], num_parts)
        edge_data = None if manifest["edge_data"] is None else _checked_spec(manifest["edge_data"], "edge_data")
        if not isinstance(manifest["reencode"], bool):
            raise ValueError(f"reencode must be true or false, got {manifest['reencode']!r}")
        imbalance, source = manifest["imbalance"], manifest.get("source", {})
        if not isinstance(imbalance, dict) or not all(
                isinstance(imbalance.get(key), (int, float)) and not isinstance(imbalance[key], bool)
                for key in ("before", "after")):
            raise ValueError(f"imbalance must be {{'before': a number, 'after': a number}}, got {imbalance!r}")
        if not isinstance(source, dict):
            raise ValueError(f"source must be a JSON object, got {source!r}")
        if source.get("num_classes") is not None:
            _natural(source["num_classes"], "source.num_classes")
    except (TypeError, ValueError, KeyError) as error:
        raise StoreError(f"{where} is malformed: {error}; convert the graph again with "
                         f"tools/partition_graph.py --overwrite") from None
    if (num_parts < 1 or bounds.shape != (num_parts + 1,) or bounds[0] != 0 or bounds[-1] != num_vertices
            or np.any(np.diff(bounds) < 0)):
        raise StoreError(f"{where}: bounds {bounds.tolist()} do not cut {num_vertices} vertices into "
                         f"{num_parts} intervals")
    if counts.shape != (num_parts, num_parts) or np.any(counts < 0) or counts.sum() != manifest["num_edges"]:
        raise StoreError(f"{where}: edge_counts must be {num_parts} x {num_parts} non-negative counts summing to "
                         f"num_edges={manifest['num_edges']}")
    layout = Layout(module, num_vertices, bounds, counts, vertex_arrays, edge_data, sparse)
    if manifest["order"] != layout.order().path:
        raise StoreError(f"{where}: the order file is {manifest['order']!r}, expected {layout.order().path!r}")
    files = manifest["files"]
    expected = layout.files()
    described = layout.descriptions()
    for name in sorted(set(expected) - set(files)):
        raise StoreError(f"{where} does not list {name} ({described[name]})")
    for name in sorted(set(files) - set(expected)):
        raise StoreError(f"{where} lists {name}, which this store's layout has no place for")
    for name, arrays in expected.items():
        entry = files[name]
        what = described[name]
        if (not isinstance(entry, dict) or not {"bytes", "crc32", "arrays"} <= set(entry)
                or not isinstance(entry["arrays"], dict)):
            raise StoreError(f"{where}: the entry of {name} ({what}) needs bytes, crc32 and arrays")
        try:
            _natural(entry["bytes"], f"the byte count of {name}")
            _natural(entry["crc32"], f"the crc32 of {name}")
        except ValueError as error:
            raise StoreError(f"{where}: {error}") from None
        if set(entry["arrays"]) != set(arrays):
            raise StoreError(f"{where}: {name} ({what}) lists arrays {sorted(entry['arrays'])}, expected "
                             f"{sorted(arrays)}")
        for key, location in arrays.items():
            if entry["arrays"][key] != array_entry(location.shape, location.dtype):
                raise StoreError(f"{where}: {name} ({what}) lists {key!r} as {entry['arrays'][key]}, but the "
                                 f"store's header implies {array_entry(location.shape, location.dtype)}")


