"""What a conversion reads, as streams of blocks: edges and per-vertex rows.

Edge sources yield `EdgeBlock`s (user vertex ids, each edge's position in
the user's edge order, edge data) and can be read again for every pass of a
conversion; a source's first pass (`scan`) validates the ids and counts
degrees. Row sources yield consecutive blocks of a [V, ...] array from row
0. Files are read with plain reads a block at a time, never memory-mapped
(mapped pages would count against the converter's resident memory):

    edges     an in-memory Graph; a text edge list (as datasets.load_edge_list reads it);
              an .npz with src, dst[, edge_data][, num_vertices], members streamed
              (compressed or not) through zipfile
    rows      an array; .npy; an .npz member; an HDF5 dataset (h5py slices)

Every pass is told how (`Work`): block sizes from the memory budget, where
scratch goes, `Work.map` to run independent blocks on the cores in order,
and `Buckets`, the scratch files records are appended to by key.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import resource
import tokenize
import zipfile

import numpy as np
import scipy.sparse as sp

from ngra_tf.graph import datasets


@dataclasses.dataclass
class Work:
    """How a conversion may use memory, disk and cores, and where it reports progress."""

    scratch: str  # a directory for temporary files
    block_edges: int  # edges per streamed block
    block_bytes: int  # bytes of vertex rows per streamed block
    bucket_bytes: int  # bytes of records one in-memory bucket (sort, dedup) may hold
    progress: object = None  # progress(stage, done, total) or None; done and total in stage_unit(stage)
    workers: int = dataclasses.field(default_factory=lambda: min(2, os.cpu_count() or 1))

    def report(self, stage: str, done: int, total: int | None) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    def map(self, function, items):
        """function(item) for each item, in order, on `workers` threads.

        numpy's sorts, gathers and arithmetic and file I/O release the GIL, so
        independent blocks use every core. At most `workers` items are in
        flight (and one being consumed), so memory stays a few blocks.
        """
        if self.workers <= 1:
            yield from map(function, items)
            return
        pool = concurrent.futures.ThreadPoolExecutor(self.workers)
        pending = collections.deque()
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) >= self.workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def stage_unit(stage: str) -> str:
    """What a stage's progress counts: vertex rows for `write <vertex array>`, else edges."""
    return "rows" if stage.startswith("write ") and stage != "write chunks" else "edges"


class Buckets:
    """Scratch files that records are appended to by a small integer key (a chunk, a hash bucket).

    Within a bucket, records keep the order they were appended in.
    """

    def __init__(self, scratch: str, prefix: str, count: int):
        self.paths = [os.path.join(scratch, f"{prefix}-{b:07d}.bin") for b in range(count)]
        self._streams = {}
        # Kept open between blocks unless that would use up the process's file descriptors.
        self._keep_open = count <= resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2

    def group(self, records: np.ndarray, keys: np.ndarray):
        """(records sorted by key, stably; each key's start): what write() appends. Safe on any thread."""
        counts = np.bincount(keys, minlength=len(self.paths))
        # A stable sort of 16-bit keys is numpy's radix sort: linear time.
        narrow = keys.astype(np.uint16) if len(self.paths) <= 1 << 16 else keys
        starts = np.zeros(len(self.paths) + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        return records[np.argsort(narrow, kind="stable")], starts

    def write(self, grouped) -> None:
        records, starts = grouped
        for b in np.flatnonzero(np.diff(starts)):
            stream = self._streams.get(b) or open(self.paths[b], "ab")
            stream.write(records[starts[b]:starts[b + 1]].data)
            if self._keep_open:
                self._streams[b] = stream
            else:
                stream.close()

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close()
        self._streams = {}

    def read(self, b: int, dtype) -> np.ndarray:
        path = self.paths[b]
        return np.fromfile(path, dtype) if os.path.exists(path) else np.empty(0, dtype)

    def remove(self, b: int) -> None:
        if os.path.exists(self.paths[b]):
            os.remove(self.paths[b])

    def remove_all(self) -> None:
        self.close()
        for b in range(len(self.paths)):
            self.remove(b)


@dataclasses.dataclass
class EdgeBlock:
    src: np.ndarray  # int64 user vertex ids
    dst: np.ndarray
    ids: np.ndarray  # int64: each edge's position in the user's edge order
    data: np.ndarray | None  # [n, ...] edge data or None
    where: object = None  # where(k) names edge k of the block's origin in messages (a file and line)

    def locate(self, k: int) -> str:
        return self.where(k) if self.where is not None else f"edge {int(self.ids[k])}"


@dataclasses.dataclass
class Scan:
    """What a first pass over the edges finds."""

    num_vertices: int
    num_edges: int
    degree: np.ndarray  # int64 [V]: in-degree + out-degree
    edge_data_spec: tuple | None  # (row shape, dtype) of the edge data, or None


class EdgeSource:
    """A graph's edges as a stream of EdgeBlocks; every blocks() call is a new pass."""

    description: dict = {}
    num_vertices: int | None = None  # known before reading, else 1 + the largest id

    def blocks(self, block_edges: int):
        raise NotImplementedError

    def known_sizes(self) -> tuple | None:
        """(num_vertices, num_edges) if both are known and blocks() works before any scan, else None."""
        return None

    def scan_scratch_nbytes(self) -> int:
        """Bytes of scratch files scan() will write, as far as is known before it runs (0: none or unknown)."""
        return 0

    def endpoints(self, block_edges: int):
        """(src, dst) of each block: for passes that need neither the edge ids nor the data."""
        for block in self.blocks(block_edges):
            yield block.src, block.dst

    def scan(self, work: Work) -> Scan:
        """The first pass: validates ids, counts vertices, edges and degrees."""
        return scan_blocks(self.blocks(work.block_edges), self.num_vertices, work, getattr(self, "num_edges", None))

    def release(self) -> None:
        """The edges have been read for the last time: scratch files of the source's own may go."""


def check_ids(block: EdgeBlock, num_vertices: int | None) -> None:
    """Raises ValueError naming the edge (file and line) of a negative or out-of-range vertex id."""
    for side, ids in (("source", block.src), ("destination", block.dst)):
        if not ids.size:
            continue
        k = int(np.argmin(ids))
        if ids[k] < 0:
            raise ValueError(f"{block.locate(k)}: {side} vertex id {int(ids[k])} is negative")
        k = int(np.argmax(ids))
        if num_vertices is not None and ids[k] >= num_vertices:
            raise ValueError(f"{block.locate(k)}: {side} vertex id {int(ids[k])} is out of range for "
                             f"num_vertices={num_vertices}")


def scan_blocks(blocks, num_vertices: int | None, work: Work, expected_edges: int | None = None) -> Scan:
    """Scan of a stream of edge blocks (see EdgeSource.scan); expected_edges, if known, is for progress."""
    degree = np.zeros(num_vertices or 0, np.int64)
    count, spec, first = 0, None, True
    for block in blocks:
        check_ids(block, num_vertices)
        if block.src.size:
            high = int(max(block.src.max(), block.dst.max()))
            if high >= len(degree):
                degree = np.concatenate([degree, np.zeros(max(high + 1, 2 * len(degree)) - len(degree), np.int64)])
            degree += np.bincount(block.src, minlength=len(degree))
            degree += np.bincount(block.dst, minlength=len(degree))
        block_spec = None if block.data is None else (tuple(block.data.shape[1:]), block.data.dtype)
        if first:
            spec, first = block_spec, False
        elif block_spec != spec:
            raise ValueError(f"{block.locate(0)}: edge data {block_spec} differs from earlier edges' {spec}")
        count += len(block.src)
        work.report("scan edges", count, expected_edges)
    if num_vertices is None:
        nonzero = np.flatnonzero(degree)
        num_vertices = int(nonzero[-1]) + 1 if nonzero.size else 0
    degree = np.concatenate([degree, np.zeros(max(0, num_vertices - len(degree)), np.int64)])[:num_vertices]
    return Scan(num_vertices, count, degree, spec)


class GraphEdges(EdgeSource):
    """An in-memory Graph's edges, in its stored order, with their user positions."""

    def __init__(self, graph):
        self.graph = graph
        self.num_vertices = graph.num_vertices
        self.description = {"kind": "graph", "graph": repr(graph)}

    def blocks(self, block_edges: int):
        adjacency, data = self.graph.adjacency, self.graph.stored_edge_data
        for start in range(0, max(self.graph.num_edges, 1), block_edges):
            stop = min(start + block_edges, self.graph.num_edges)
            yield EdgeBlock(adjacency.src[start:stop].astype(np.int64), adjacency.dst[start:stop].astype(np.int64),
                            self.graph.edge_order[start:stop].astype(np.int64),
                            None if data is None else data[start:stop])

    def known_sizes(self) -> tuple:
        return self.graph.num_vertices, self.graph.num_edges

    def scan(self, work: Work) -> Scan:
        data = self.graph.stored_edge_data
        degree = (self.graph.in_degree() + self.graph.out_degree()).astype(np.int64)
        return Scan(self.graph.num_vertices, self.graph.num_edges, degree,
                    None if data is None else (tuple(data.shape[1:]), data.dtype))


def _existing(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path} does not exist")
    return path


class TextEdges(EdgeSource):
    """A text edge list: `src dst [weight]` per line, # comments (datasets.load_edge_list's format)."""

    def __init__(self, path, num_vertices: int | None = None):
        self.path = _existing(path, "edge list")
        self.num_vertices = num_vertices
        self.description = {"kind": "text edge list", "path": os.path.abspath(self.path)}

    def blocks(self, block_edges: int):
        start = 0
        for src, dst, weights, lines in datasets.read_edge_list_blocks(self.path, block_edges):
            yield EdgeBlock(src, dst, np.arange(start, start + len(src)), weights,
                            lambda k, lines=lines: f"{self.path}:{lines[k]}")
            start += len(src)


class _NpyStream:
    """An .npy array read sequentially a block of rows at a time, from a file or a zip member."""

    def __init__(self, stream, label: str):
        self.stream, self.label = stream, label
        try:
            version = np.lib.format.read_magic(stream)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(stream)
        except (ValueError, SyntaxError, tokenize.TokenError) as error:  # numpy tokenizes the header text
            raise ValueError(f"{label} is not a readable .npy array: {error}") from None
        if dtype.hasobject:
            raise ValueError(f"{label} holds Python objects ({dtype}); store numbers")
        if fortran and len(shape) > 1:
            raise ValueError(f"{label} is stored in Fortran order; save np.ascontiguousarray(x) instead")
        if not shape:
            raise ValueError(f"{label} is a scalar, expected an array with one row per item")
        self.shape, self.dtype = tuple(shape), dtype
        self.row_nbytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        self.rows_read = 0

    def read(self, count: int) -> np.ndarray:
        count = min(count, self.shape[0] - self.rows_read)
        wanted = count * self.row_nbytes
        data = bytearray(wanted)
        view, got = memoryview(data), 0
        while got < wanted:
            chunk = self.stream.read(wanted - got)
            if not chunk:
                raise ValueError(f"{self.label} ends after {self.rows_read + got // max(self.row_nbytes, 1)} of "
                                 f"{self.shape[0]} rows: the file is truncated")
            view[got:got + len(chunk)] = chunk
            got += len(chunk)
        self.rows_read += count
        return np.frombuffer(data, self.dtype).reshape((count,) + self.shape[1:])

    def close(self):
        self.stream.close()


class _Npz:
    """The members of an .npz, each opened as an _NpyStream (zip members are streamed, compressed or not)."""

    def __init__(self, path, what: str):
        self.path = _existing(path, what)
        try:
            with zipfile.ZipFile(self.path) as archive:
                self.keys = [name[:-4] for name in archive.namelist() if name.endswith(".npy")]
        except zipfile.BadZipFile as error:
            raise ValueError(f"{self.path} is not an .npz archive: {error}") from None

    def open(self, key: str) -> _NpyStream:
        if key not in self.keys:
            raise ValueError(f"{self.path} has no array {key!r}; it has {', '.join(self.keys) or 'none'}")
        archive = zipfile.ZipFile(self.path)
        return _NpyStream(archive.open(key + ".npy"), f"{self.path}[{key}]")

    def describe(self, key: str) -> _NpyStream:
        stream = self.open(key)
        stream.close()
        return stream


class NpzEdges(EdgeSource):
    """An .npz with int arrays src and dst, optionally edge_data ([E, ...]) and num_vertices."""

    def __init__(self, path, num_vertices: int | None = None):
        self.npz = _Npz(path, "edge file")
        self.path = self.npz.path
        src, dst = self.npz.describe("src"), self.npz.describe("dst")
        for stream in (src, dst):
            if len(stream.shape) != 1 or not np.issubdtype(stream.dtype, np.integer):
                raise ValueError(f"{stream.label} must be a 1-D integer array, got {stream.dtype}{list(stream.shape)}")
        if src.shape != dst.shape:
            raise ValueError(f"{self.path}: src and dst must have the same length, got {src.shape[0]} and "
                             f"{dst.shape[0]}")
        self.num_edges = src.shape[0]
        self.has_data = "edge_data" in self.npz.keys
        if self.has_data and self.npz.describe("edge_data").shape[0] != self.num_edges:
            raise ValueError(f"{self.path}: edge_data must have one row per edge ({self.num_edges})")
        if num_vertices is None and "num_vertices" in self.npz.keys:
            with np.load(self.path, allow_pickle=False) as stored:  # members load lazily: only this scalar
                num_vertices = int(stored["num_vertices"])
        self.num_vertices = num_vertices
        self.description = {"kind": "npz edges", "path": os.path.abspath(self.path)}

    def blocks(self, block_edges: int):
        streams = [self.npz.open(key) for key in ("src", "dst") + (("edge_data",) if self.has_data else ())]
        try:
            for start in range(0, max(self.num_edges, 1), block_edges):
                count = min(block_edges, self.num_edges - start)
                arrays = [stream.read(count) for stream in streams]
                yield EdgeBlock(arrays[0].astype(np.int64), arrays[1].astype(np.int64),
                                np.arange(start, start + count), arrays[2] if self.has_data else None,
                                lambda k, start=start: f"{self.path}: edge {start + k}")
        finally:
            for stream in streams:
                stream.close()


class SpooledEdges(EdgeSource):
    """Another source read once (its scan), copied to binary scratch files, and re-read from them.

    Parsing a text file or inflating an npz is then paid once, not once per pass.
    """

    def __init__(self, base: EdgeSource):
        self.base = base
        self.num_vertices = base.num_vertices
        self.description = base.description
        self._files = None

    def scan_scratch_nbytes(self) -> int:
        count = getattr(self.base, "num_edges", None)  # (an npz says; a text file does not)
        if count is None:
            return 0
        data = self.base.npz.describe("edge_data") if getattr(self.base, "has_data", False) else None
        return count * (24 + (0 if data is None else data.row_nbytes))

    def scan(self, work: Work) -> Scan:
        names = {key: os.path.join(work.scratch, f"spool-{key}.bin") for key in ("src", "dst", "ids", "data")}
        streams = {key: open(path, "wb") for key, path in names.items()}

        def copy():
            for block in self.base.blocks(work.block_edges):
                yield block
                for key in ("src", "dst", "ids"):
                    streams[key].write(np.ascontiguousarray(getattr(block, key), np.int64).data)
                if block.data is not None:
                    streams["data"].write(np.ascontiguousarray(block.data).data)

        try:
            scan = scan_blocks(copy(), self.base.num_vertices, work, getattr(self.base, "num_edges", None))
        finally:
            for stream in streams.values():
                stream.close()
        self._files, self._spec, self._count = names, scan.edge_data_spec, scan.num_edges
        return scan

    def blocks(self, block_edges: int):
        assert self._files is not None, "scan first"
        streams = {key: open(path, "rb") for key, path in self._files.items()}
        try:
            for start in range(0, max(self._count, 1), block_edges):
                count = min(block_edges, self._count - start)
                src, dst, ids = (np.frombuffer(streams[key].read(8 * count), np.int64) for key in ("src", "dst", "ids"))
                data = None
                if self._spec is not None:
                    row_shape, dtype = self._spec
                    nbytes = count * dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
                    data = np.frombuffer(streams["data"].read(nbytes), dtype).reshape((count,) + row_shape)
                yield EdgeBlock(src, dst, ids, data)
        finally:
            for stream in streams.values():
                stream.close()

    def release(self) -> None:
        """Removes the spooled files: after the last pass."""
        for path in (self._files or {}).values():
            if os.path.exists(path):
                os.remove(path)


# ---- per-vertex rows ----

class RowSource:
    """A [num_rows, ...] array read as consecutive blocks of rows from row 0."""

    label: str  # names the origin in messages
    num_rows: int
    row_shape: tuple
    dtype: np.dtype

    def blocks(self, block_rows: int):
        raise NotImplementedError

    @property
    def row_nbytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))


class ArrayRows(RowSource):
    def __init__(self, label: str, array):
        array = np.asarray(array)
        if array.ndim == 0 or array.dtype.hasobject:
            raise ValueError(f"vertex array {label!r} must be a numeric array with one row per vertex, got "
                             f"{array.dtype}{list(array.shape)}")
        self.label, self.array = label, array
        self.num_rows, self.row_shape, self.dtype = array.shape[0], tuple(array.shape[1:]), array.dtype

    def blocks(self, block_rows: int):
        for start in range(0, self.num_rows, block_rows):
            yield self.array[start:start + block_rows]


class SparseRows(RowSource):
    """A scipy.sparse matrix (bag-of-words features), stored as a CSR vertex array: blocks of rows come as
    canonical CSR matrices (columns sorted, repeats summed), of a float dtype."""

    sparse = True

    def __init__(self, label: str, matrix):
        matrix = sp.csr_matrix(matrix)  # (shares a CSR matrix's arrays: copied before changing them)
        if matrix.dtype.kind != "f":
            matrix = matrix.astype(np.float32)
        if not matrix.has_canonical_format:
            matrix = matrix.copy()
            matrix.sum_duplicates()  # (also sorts each row's columns)
        self.label, self.matrix = label, matrix
        self.num_rows, self.row_shape, self.dtype = matrix.shape[0], (matrix.shape[1],), matrix.dtype

    def row_counts(self) -> np.ndarray:
        """Stored entries per row."""
        return np.diff(self.matrix.indptr)

    @property
    def row_nbytes(self) -> int:  # a row's entries as stored (index, value), on average
        per_row = self.matrix.nnz / max(self.num_rows, 1)
        return int(np.ceil(per_row * (self.dtype.itemsize + 8))) + 8

    def blocks(self, block_rows: int):
        for start in range(0, self.num_rows, block_rows):
            yield self.matrix[start:start + block_rows]


def row_source(label: str, array) -> RowSource:
    """A row source for an array in memory: SparseRows for a scipy.sparse matrix, else ArrayRows."""
    return SparseRows(label, array) if sp.issparse(array) else ArrayRows(label, array)


class NpyRows(RowSource):
    """An .npy file, or a member of an .npz (key)."""

    def __init__(self, path, key: str | None = None):
        if key is None:
            self.path = _existing(path, "vertex array file")
            self._open = lambda: _NpyStream(open(self.path, "rb"), self.path)
        else:
            npz = _Npz(path, "vertex array file")
            self.path = npz.path
            self._open = lambda: npz.open(key)
        stream = self._open()
        stream.close()
        self.label = stream.label
        self.num_rows, self.row_shape, self.dtype = stream.shape[0], stream.shape[1:], stream.dtype

    def blocks(self, block_rows: int):
        stream = self._open()
        try:
            for _ in range(0, self.num_rows, block_rows):
                yield stream.read(block_rows)
        finally:
            stream.close()


class Hdf5Rows(RowSource):
    """A dataset of an HDF5 file, read by row slices (h5py)."""

    def __init__(self, path, key: str):
        import h5py  # noqa: PLC0415

        self.path = _existing(path, "vertex array file")
        self.key, self.label = key, f"{self.path}[{key}]"
        try:
            with h5py.File(self.path, "r") as file:
                dataset = file.get(key)
                if not isinstance(dataset, h5py.Dataset):
                    raise ValueError(f"{self.path} has no dataset {key!r}; it has {', '.join(_datasets(file))}")
                shape, dtype = dataset.shape, dataset.dtype
        except OSError as error:
            raise ValueError(f"cannot read {self.path} as HDF5: {error}") from None
        if not shape or dtype.hasobject:
            raise ValueError(f"{self.label} must be a numeric array with one row per vertex, got {dtype}{list(shape)}")
        self.num_rows, self.row_shape, self.dtype = shape[0], tuple(shape[1:]), dtype

    def blocks(self, block_rows: int):
        import h5py  # noqa: PLC0415

        with h5py.File(self.path, "r") as file:
            dataset = file[self.key]
            for start in range(0, self.num_rows, block_rows):
                yield dataset[start:start + block_rows]


def _datasets(file) -> list:
    import h5py  # noqa: PLC0415

    names = []
    file.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names or ["none"]


HDF5_SUFFIXES = (".h5", ".hdf5", ".he5", ".hdf")


def rows_from_file(path, key: str | None = None) -> RowSource:
    """A row source for a .npy, an .npz member (key, default 'features') or an HDF5 dataset (key required)."""
    path = os.fspath(path)
    lower = path.lower()
    if lower.endswith(".npy"):
        return NpyRows(path)
    if lower.endswith(".npz"):
        if key is None and _is_scipy_npz(path):  # scipy.sparse.save_npz's: stored as CSR (read whole: compact)
            return SparseRows(os.path.abspath(path), sp.load_npz(path))
        return NpyRows(path, key or "features")
    if lower.endswith(HDF5_SUFFIXES):
        if not key:
            raise ValueError(f"{path} is HDF5: name the dataset to read (features_key)")
        return Hdf5Rows(path, key)
    raise ValueError(f"cannot tell the format of {path}: use .npy, .npz or an HDF5 file ({', '.join(HDF5_SUFFIXES)})")


def _is_scipy_npz(path) -> bool:
    try:
        with np.load(_existing(path, "vertex array file")) as npz:
            return {"format", "shape", "indptr", "indices", "data"} <= set(npz.files)
    except (OSError, ValueError):
        return False  # NpyRows names the problem


def edges_from_file(path, num_vertices: int | None = None) -> EdgeSource:
    """An .npz (src, dst[, edge_data]) or a text edge list, spooled so that later passes read binary."""
    path = os.fspath(path)
    base = NpzEdges(path, num_vertices) if path.lower().endswith(".npz") else TextEdges(path, num_vertices)
    return SpooledEdges(base)
