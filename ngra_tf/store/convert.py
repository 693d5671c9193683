"""Writing a store from a stream of edges and vertex rows, in bounded memory.

The passes (each reads the edges as blocks; nothing holds all edges or all
vertex rows):

1. scan: validate ids, count vertices, edges and degrees (O(V)). A text or
   npz input is copied to binary scratch files on the way; a preparation
   (prepare.SymmetrizedEdges) deduplicates here, bucket by bucket.
2. count: the [P, P] chunk edge counts of the candidate interval assignments
   (identity and degree snake, `partition.candidate_intervals`), for one P
   or, with a memory budget, for a few P at once until one fits by the
   trainer's estimate of a training step over that partition's shape
   (`working_set`, `memory.smallest_num_parts`); `partition.choose_intervals`
   then decides exactly as Partition does.
3. bucket: every edge goes, as (local src, local dst, user edge id, data),
   to the scratch file of its chunk, in stream order.
4. chunks: one bucket at a time is loaded and made into the chunk by
   `partition.chunk_from_edges`, the function Partition uses, then written.
   Edges of one (src, dst) pair must come in user order: they do when the
   source has no repeated pairs (a preparation) or streams ids in
   increasing order (files, presets); otherwise the bucket is sorted by id.
5. vertex rows: each vertex array is read once in row blocks; each block's
   rows go to the end of their interval's file (an interval's rows are its
   vertices in increasing user id, so appending keeps interval order).
6. the vertex order, then the manifest, last.

Memory: blocks of `Work.block_edges` edges (a few in flight, one per core)
and `Work.block_bytes` of rows, one chunk at a time (about 48 bytes an edge
while its CSC and CSR orders are sorted), and O(V) arrays (degrees, the
assignment), all derived from one budget (`work_for_budget`).

Disk: before the first pass and again once P is known, the bytes the
conversion will need at its peak on the output's and the scratch
directory's filesystems are compared with what is free (`check_disk`).

Interruption: files are written under temporary names and renamed, the
manifest last, so a directory without a manifest is never a store. A
marker file (`CONVERTING`) names a conversion in progress; an error or
a signal removes what was written, and a conversion killed outright (kill
-9) leaves the marker, so running it again replaces the unfinished one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from ngra_tf.graph.graph import Graph
from ngra_tf.graph.partition import (_check_num_parts, assign_intervals, candidate_intervals, choose_intervals,
                                     chunk_from_edges, count_chunk_edges)
from ngra_tf.store import integrity, memory, store
from ngra_tf.store.prepare import PREPARATIONS, SymmetrizedEdges
from ngra_tf.store.sources import Buckets, EdgeSource, GraphEdges, RowSource, Work, row_source

# The most intervals a memory budget may ask for (a step table per chunk grows as P^2).
_MOST_PARTS = 1024
# Without a budget (num_parts given), blocks are sized for this much memory.
DEFAULT_BUDGET = 1 << 30
# Working bytes per edge of a block while bucketing: the block's ids and data,
# interval lookups, the sort by chunk and the records written.
_BYTES_PER_STREAMED_EDGE = 128
# Bytes per edge a chunk's build holds beside its bucket's records (measured: the CSC order and gathers,
# then a CSR sort buffer; adjacency.from_csc).
_CHUNK_BUILD_BYTES_PER_EDGE = 32
# Names a conversion in progress in its output directory (removed once the manifest is written).
MARKER = "CONVERTING"


def work_for_budget(budget: int, scratch: str, progress=None) -> Work:
    """Block and bucket sizes that keep a conversion's working set a fraction of `budget`.

    A block is budget / 16: up to four are alive at once (read, two being
    worked on, one being written).
    """
    block_edges = int(np.clip(budget // 16 // _BYTES_PER_STREAMED_EDGE, 1024, 1 << 21))
    return Work(scratch, block_edges, block_bytes=max(budget // 8, 1), bucket_bytes=max(budget // 4, 1 << 16),
                progress=progress)


def convert(directory, edges: EdgeSource, vertex_rows: dict | None = None, *, num_parts: int | None = None,
            memory_budget=None, working_set=None, format: str = "npy", reencode: bool = True,
            prepare: str = "none", overwrite: bool = False, scratch_dir=None, progress=None,
            source: dict | None = None) -> store.Store:
    """Writes a store of the graph `edges` streams (prepared as asked) with vertex arrays; returns it opened.

    Args:
      directory: the store's directory: created, or empty, or replaced with overwrite.
      edges: an EdgeSource (ngra_tf.store.sources).
      vertex_rows: {name: RowSource} of per-vertex arrays in the user's order.
      num_parts: P; or memory_budget (bytes or a size such as "256MB") with
        working_set, from which the smallest P whose training fits is
        chosen (memory.smallest_num_parts). Given both, P is kept and the
        budget only sizes the conversion's blocks.
      working_set: working_set(shape) -> (bytes, what they sum): the
        training working set over a store of that shape (a store.Shape;
        ngra_tf.recipes.TrainingMemory: the trainer's own estimate).
      format: "npy" or "hdf5".
      reencode: as Graph.partition.
      prepare: "none", "gcn" or "symmetric" (recipes.prepare_graph's graphs).
      scratch_dir: where temporary files go (default: inside directory).
      progress: progress(stage, done, total) as the passes advance.
      source: a description of the input, kept in the manifest.

    On any error the output directory is removed (or emptied, if it existed).
    """
    module = store.backend(format)
    vertex_rows = dict(vertex_rows or {})
    for name, rows in vertex_rows.items():
        store.check_vertex_name(name)
        if not isinstance(rows, RowSource):
            raise ValueError(f"vertex_rows[{name!r}] must be a RowSource, got {type(rows).__name__}")
    if num_parts is None and (memory_budget is None or working_set is None):
        raise ValueError("give num_parts, or memory_budget and working_set (ngra_tf.recipes.TrainingMemory) to "
                         "choose it by")
    if num_parts is not None:
        num_parts = _check_num_parts(num_parts)
    budget = None if memory_budget is None else memory.parse_size(memory_budget)
    if prepare not in PREPARATIONS:
        raise ValueError(f"prepare must be one of {', '.join(PREPARATIONS)}; got {prepare!r}")
    if prepare != "none":
        edges = SymmetrizedEdges(edges, prepare)
    if edges.num_vertices is not None:
        _check_rows(vertex_rows, edges.num_vertices)
    directory = os.path.abspath(os.fspath(directory))
    if scratch_dir is not None and not os.path.isdir(scratch_dir):
        raise ValueError(f"scratch directory {scratch_dir} does not exist: create it or leave it out (default: "
                         f"inside the output directory)")
    created = _prepare_directory(directory, overwrite, progress)
    scratch = None
    try:
        scratch = tempfile.mkdtemp(prefix=".scratch-", dir=directory if scratch_dir is None else scratch_dir)
        integrity.write_json_atomically(os.path.join(directory, MARKER), {"pid": os.getpid(), "scratch": scratch})
        work = work_for_budget(budget or DEFAULT_BUDGET, scratch, progress)
        manifest = _Conversion(directory, module, edges, vertex_rows, work).run(
            num_parts, budget, bool(reencode), working_set, dict(source or {}))
        manifest["source"] = dict(source or {}, edges=edges.description)
        store.validate_manifest(manifest, directory)
        integrity.write_json_atomically(os.path.join(directory, store.MANIFEST), manifest)
        os.remove(os.path.join(directory, MARKER))
    except BaseException:
        _remove_output(directory, created)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return store.open_store(directory)


def check_disk(needs: dict, what: str, progress=None) -> None:
    """Checks that {directory: bytes still to be written there} fits the free space of each filesystem
    (directories on one filesystem add up); raises ValueError naming the directory, bytes needed and free."""
    by_device = {}
    for directory, nbytes in needs.items():
        device = os.stat(directory).st_dev
        paths, total = by_device.get(device, ((), 0))
        by_device[device] = (paths + (directory,), total + max(int(nbytes), 0))
    for paths, total in by_device.values():
        free = shutil.disk_usage(paths[0]).free
        where = " and ".join(paths)
        if total > free:
            raise ValueError(f"not enough disk space for {what} in {where}: needs {memory.format_bytes(total)} "
                             f"({total} bytes), {memory.format_bytes(free)} ({free} bytes) free; free some "
                             f"space, or put --scratch_dir (scratch) or --output on another filesystem")
        _note(progress, f"disk for {what}: {memory.format_bytes(total)} more in {where} "
                        f"({memory.format_bytes(free)} free)")


def _check_rows(vertex_rows: dict, num_vertices: int) -> None:
    for name, rows in vertex_rows.items():
        if rows.num_rows != num_vertices:
            raise ValueError(f"vertex array {name!r} ({rows.label}) has {rows.num_rows} rows; the graph has "
                             f"{num_vertices} vertices")


def _prepare_directory(directory: str, overwrite: bool, progress=None) -> bool:
    """Makes `directory` an empty directory to write into; True if it was created.

    A conversion killed outright left its marker and no manifest: that is replaced without overwrite.
    """
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"output {directory} exists and is not a directory")
    if not os.path.exists(directory):
        os.makedirs(directory)
        return True
    entries = os.listdir(directory)
    unfinished = MARKER in entries and store.MANIFEST not in entries
    if entries and not overwrite and not unfinished:
        what = ("holds a store" if store.MANIFEST in entries else
                "is not empty and holds no store manifest (not a store, or a conversion from an older version)")
        raise ValueError(f"output directory {directory} {what}: pass overwrite=True (--overwrite) to replace "
                         f"its contents, or choose another directory")
    if unfinished:
        _remove_stale_scratch(os.path.join(directory, MARKER))
        _note(progress, f"replacing the unfinished conversion in {directory} (it was interrupted)")
    if store.MANIFEST in entries:  # first, so that the directory stops being a store at once
        os.remove(os.path.join(directory, store.MANIFEST))
    _remove_contents(directory)
    return False


def _remove_stale_scratch(marker: str) -> None:
    """Removes the scratch directory an interrupted conversion named in its marker (if elsewhere, and ours)."""
    try:
        with open(marker) as stream:
            scratch = json.load(stream).get("scratch", "")
    except (OSError, ValueError, AttributeError):
        return
    if os.path.basename(scratch).startswith(".scratch-") and os.path.isdir(scratch):
        shutil.rmtree(scratch, ignore_errors=True)


def _note(progress, line: str) -> None:
    """Tells the user something (progress.note, if the progress object has one)."""
    note = getattr(progress, "note", None)
    if note is not None:
        note(line)


def _remove_contents(directory: str) -> None:
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _remove_output(directory: str, created: bool) -> None:
    try:
        if created:
            shutil.rmtree(directory)
        else:
            _remove_contents(directory)
    except OSError:
        pass  # the original error matters more


class _Conversion:
    """The passes of one conversion (see the module docstring)."""

    def __init__(self, directory, module, edges: EdgeSource, vertex_rows: dict, work: Work):
        self.directory, self.module, self.edges, self.vertex_rows, self.work = (
            directory, module, edges, vertex_rows, work)
        self.files = {}  # manifest entries of the files written
        self._counts = {}  # num_parts -> chunk counts of its candidate assignments

    def run(self, num_parts, budget, reencode, working_set=None, source=None) -> dict:
        self._check_disk_for_scan()
        scan = self.edges.scan(self.work)
        _check_rows(self.vertex_rows, scan.num_vertices)
        self.scan, self.reencode = scan, reencode
        if num_parts is None:
            num_parts, _, _ = memory.smallest_num_parts(
                budget, lambda candidates: [working_set(shape) for shape in self._shapes(candidates, source)],
                lambda p: working_set(self._even_shape(p, source)), min(scan.num_vertices, _MOST_PARTS))
        assignment = assign_intervals(scan.degree, num_parts, reencode,
                                      lambda candidates: self._candidate_counts([num_parts])[num_parts])
        vertex_specs = {name: (rows.row_shape, rows.dtype) for name, rows in self.vertex_rows.items()}
        sparse = {name: np.bincount(assignment.part_of, rows.row_counts(), num_parts).astype(np.int64)
                  for name, rows in self.vertex_rows.items() if getattr(rows, "sparse", False)}  # CSR: entries
        layout = store.Layout(self.module, scan.num_vertices, assignment.bounds, assignment.edge_counts,
                              vertex_specs, scan.edge_data_spec, sparse)
        record = self._bucket_record()
        self._check_memory_for_chunks(assignment.edge_counts, record, budget)
        self._check_disk_for_store(layout, record)
        buckets = self._bucket_edges(assignment, record)
        self.edges.release()  # the source's scratch files are read for the last time
        self._write_chunks(layout, assignment, buckets, record)
        self._write_vertex_rows(layout, assignment)
        self._write(layout, [layout.order()], {"order": assignment.order})
        spec_entry = lambda spec: {"row_shape": list(spec[0]), "dtype": np.dtype(spec[1]).str}  # noqa: E731
        return {
            "format": store.FORMAT, "format_version": store.FORMAT_VERSION, "backend": self.module.NAME,
            "num_vertices": scan.num_vertices, "num_edges": scan.num_edges, "num_parts": num_parts,
            "reencode": reencode, "bounds": assignment.bounds.tolist(),
            "edge_counts": assignment.edge_counts.tolist(),
            "imbalance": {"before": assignment.imbalance_before, "after": assignment.imbalance_after},
            "index_dtype": store.chunk_index_dtype(scan.num_edges, scan.num_vertices, scan.num_vertices).str,
            "order": layout.order().path,
            "vertex_arrays": {name: store.sparse_entry(*spec, sparse[name]) if name in sparse else spec_entry(spec)
                              for name, spec in vertex_specs.items()},
            "edge_data": None if scan.edge_data_spec is None else spec_entry(scan.edge_data_spec),
            "files": self.files,
        }

    # ---- pass 2: chunk counts ----

    def _candidate_counts(self, parts: list) -> dict:
        """{P: [P x P counts of each candidate assignment]} for the P asked, all counted in one pass."""
        missing = [p for p in parts if p not in self._counts]
        if missing:
            # The narrowest int dtype: a few P's candidates are held at once, O(V) each.
            candidates = {p: [part.astype(np.min_scalar_type(p)) for part in
                              candidate_intervals(self.scan.degree, p, self.reencode)] for p in missing}
            counts = {p: [np.zeros((p, p), np.int64) for _ in candidates[p]] for p in missing}

            def count(endpoints):
                src, dst = endpoints
                return len(src), {p: [count_chunk_edges(part_of, src, dst, p) for part_of in candidates[p]]
                                  for p in missing}

            done = 0
            for size, block_counts in self.work.map(count, self.edges.endpoints(self.work.block_edges)):
                for p in missing:
                    for total, block_count in zip(counts[p], block_counts[p]):
                        total += block_count
                done += size
                self.work.report("count chunk edges", done, self.scan.num_edges)
            self._counts.update(counts)
        return {p: self._counts[p] for p in parts}

    def _shapes(self, parts: list, source: dict) -> list:
        """The store.Shape of the partition into each P of `parts` (their chunks counted in one pass)."""
        counts = self._candidate_counts(parts)
        shapes = []
        for p in parts:
            chosen = choose_intervals(candidate_intervals(self.scan.degree, p, self.reencode), counts[p])
            shapes.append(self._shape(chosen.bounds, chosen.edge_counts, chosen.part_of, source))
        return shapes

    def _even_shape(self, p: int, source: dict):
        """A partition into p that no real one beats: equal intervals, every chunk the mean (a lower bound)."""
        bounds = np.array([self.scan.num_vertices * i // p for i in range(p + 1)], np.int64)
        return self._shape(bounds, np.full((p, p), -(-self.scan.num_edges // (p * p)), np.int64), None, source)

    def _shape(self, bounds, edge_counts, part_of, source: dict):
        p = len(bounds) - 1
        sparse = {name: (np.bincount(part_of, rows.row_counts(), p) if part_of is not None else
                         np.full(p, rows.row_counts().sum() / p))
                  for name, rows in self.vertex_rows.items() if getattr(rows, "sparse", False)}
        return store.Shape(self.directory, self.scan.num_vertices, self.scan.num_edges, bounds, edge_counts,
                           {name: (rows.row_shape, rows.dtype) for name, rows in self.vertex_rows.items()},
                           self.scan.edge_data_spec, sparse, source.get("num_classes"))

    # ---- pass 3: edges to chunk buckets ----

    def _bucket_record(self) -> np.dtype:
        """A bucket's record: local src and dst, user edge id (the narrowest that hold them) and data."""
        index = np.int32 if self.scan.num_vertices <= np.iinfo(np.int32).max else np.int64  # (a chunk's dtype)
        ids = np.uint32 if self.scan.num_edges <= 2**32 else np.int64
        fields = [("src", index), ("dst", index), ("id", ids)]
        if self.scan.edge_data_spec is not None:
            row_shape, dtype = self.scan.edge_data_spec
            fields.append(("data", dtype, row_shape))
        return np.dtype(fields)

    def _bucket_edges(self, assignment, record) -> Buckets:
        num_parts = len(assignment.bounds) - 1
        part_of = assignment.part_of
        local = assignment.position - assignment.bounds[part_of]  # user id -> id within its interval
        local = local.astype(record["src"], copy=False)
        buckets = Buckets(self.work.scratch, "chunk", num_parts * num_parts)

        def to_records(block):
            records = np.empty(len(block.src), record)
            records["src"], records["dst"], records["id"] = local[block.src], local[block.dst], block.ids
            if block.data is not None:
                records["data"] = block.data
            return buckets.group(records, part_of[block.src].astype(np.int64) * num_parts + part_of[block.dst])

        done = 0
        try:
            for grouped in self.work.map(to_records, self.edges.blocks(self.work.block_edges)):
                buckets.write(grouped)
                done += len(grouped[0])
                self.work.report("bucket edges", done, self.scan.num_edges)
        finally:
            buckets.close()
        return buckets

    # ---- pass 4: chunks ----

    def _write_chunks(self, layout, assignment, buckets, record):
        num_parts = len(assignment.bounds) - 1
        sizes = np.diff(assignment.bounds)
        done = 0
        for i in range(num_parts):
            for j in range(num_parts):
                records = buckets.read(i * num_parts + j, record)
                if len(records) != assignment.edge_counts[i, j]:
                    raise RuntimeError(f"chunk ({i}, {j}) got {len(records)} edges, the count pass found "
                                       f"{assignment.edge_counts[i, j]}: the edge source changed between passes")
                records = self._in_user_order_per_pair(records)
                chunk = chunk_from_edges(i, j, records["src"], records["dst"], int(sizes[i]), int(sizes[j]),
                                         records["id"], records["data"] if "data" in record.names else None)
                del records
                adjacency = chunk.adjacency
                arrays = {"csc_indptr": adjacency.csc_indptr, "csc_src": adjacency.csc_src,
                          "csr_indptr": adjacency.csr_indptr, "csr_dst": adjacency.csr_dst,
                          "csr_edge": adjacency.csr_edge, "edge_ids": chunk.edge_ids, "edge_data": chunk.edge_data}
                self._write(layout, layout.chunk(i, j), arrays)
                del chunk, adjacency, arrays
                buckets.remove(i * num_parts + j)
                done += int(assignment.edge_counts[i, j])
                self.work.report("write chunks", done, self.scan.num_edges)

    def _check_memory_for_chunks(self, edge_counts, record, budget) -> None:
        """Warns when the largest chunk of a P given with a budget cannot be built within it (the budget
        also sizes blocks, and tests give tiny ones on purpose: a warning, not a refusal)."""
        largest = int(edge_counts.max(initial=0))
        need = largest * (record.itemsize + _CHUNK_BUILD_BYTES_PER_EDGE)
        if budget is None or need <= budget:
            return
        num_parts = len(edge_counts)
        enough = int(np.ceil(num_parts * np.sqrt(need / budget)))  # (chunks shrink as 1/P^2)
        _note(self.work.progress, f"warning: num_parts (--chunks) {num_parts} makes a chunk of {largest} edges, "
                                  f"whose build needs about {memory.format_bytes(need)}, more than the memory "
                                  f"budget {memory.format_bytes(budget)}: give about {enough} or more parts, or "
                                  f"leave P to the budget")

    def _in_user_order_per_pair(self, records):
        """The records, sorted by user edge id unless every (src, dst) pair's edges already come in that order:
        a source without repeated pairs, or one whose blocks bring the ids in increasing order."""
        if getattr(self.edges, "unique_pairs", False) or np.all(records["id"][1:] > records["id"][:-1]):
            return records
        return records[np.argsort(records["id"], kind="stable")]

    # ---- disk ----

    def _check_disk_for_scan(self) -> None:
        """Before the first pass: the scratch files the scan writes (those of a source of known size)."""
        nbytes = self.edges.scan_scratch_nbytes()
        if nbytes:
            check_disk({self.work.scratch: nbytes}, "the first pass", self.work.progress)

    def _check_disk_for_store(self, layout, record) -> None:
        """Once P is known: the chunk buckets beside the source's scratch, then the store beside the largest
        bucket (a chunk's bucket goes once the chunk is written, and a chunk is larger than its bucket)."""
        edges = self.scan.num_edges
        store_nbytes = sum(int(np.prod(loc.shape, dtype=np.int64)) * np.dtype(loc.dtype).itemsize + 128
                           for loc in layout.all())
        largest_bucket = int(layout.edge_counts.max(initial=0)) * record.itemsize
        check_disk({self.work.scratch: edges * record.itemsize}, "bucketing the edges", self.work.progress)
        phases = {self.work.scratch: largest_bucket, self.directory: store_nbytes}
        check_disk(phases, f"writing the store ({memory.format_bytes(store_nbytes)})", self.work.progress)

    # ---- pass 5: vertex rows ----

    def _write_vertex_rows(self, layout, assignment):
        num_parts = len(assignment.bounds) - 1
        files = layout.files()
        pending = {path: set(keys) for path, keys in files.items()}
        writers = {}
        for name, rows in self.vertex_rows.items():
            located = [layout.vertex_parts(name, part) for part in range(num_parts)]
            for location in (location for locations in located for location in locations):
                if location.path not in writers:
                    final = self._final_path(location.path)
                    specs = {key: (loc.shape, loc.dtype) for key, loc in files[location.path].items()}
                    writers[location.path] = (self.module.RowWriter(integrity.temporary_path(final), specs), final)
            sparse = name in layout.sparse
            append = _CsrAppender(located, writers) if sparse else (
                lambda part, block: writers[located[part][0].path][0].append(located[part][0].key, block))
            block_rows = max(1, self.work.block_bytes // max(rows.row_nbytes, 1))
            start = 0
            for block in rows.blocks(block_rows):
                block = block if sparse else np.asarray(block)
                if block.shape[1:] != rows.row_shape or block.dtype != rows.dtype:
                    raise ValueError(f"{rows.label}: rows {start}.. are {block.dtype}{list(block.shape[1:])}, "
                                     f"expected {rows.dtype}{list(rows.row_shape)}")
                parts = assignment.part_of[start:start + block.shape[0]]
                order = np.argsort(parts, kind="stable")
                starts = np.searchsorted(parts[order], np.arange(num_parts + 1))
                for part in np.flatnonzero(np.diff(starts)):
                    append(part, block[order[starts[part]:starts[part + 1]]])
                start += block.shape[0]
                self.work.report(f"write {name}", start, rows.num_rows)
            if start != rows.num_rows:
                raise ValueError(f"{rows.label} gave {start} rows, expected {rows.num_rows}")
            for location in (location for locations in located for location in locations):
                pending[location.path].discard(location.key)
                if not pending[location.path] and location.path in writers:
                    writer, final = writers.pop(location.path)
                    writer.close()
                    self._commit(final, location.path, files[location.path])

    # ---- files ----

    def _final_path(self, relative: str) -> str:
        final = os.path.join(self.directory, relative)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        return final

    def _commit(self, final: str, relative: str, locations: dict) -> None:
        entry = integrity.commit(integrity.temporary_path(final), final)
        entry["arrays"] = {key: store.array_entry(loc.shape, loc.dtype) for key, loc in locations.items()}
        self.files[relative] = entry

    def _write(self, layout, locations: list, arrays: dict) -> None:
        """Writes the arrays at `locations` (grouped into their files), each file atomically."""
        by_file = {}
        for location in locations:
            by_file.setdefault(location.path, {})[location.key] = location
        for relative, keyed in by_file.items():
            final = self._final_path(relative)
            for key, location in keyed.items():
                array = arrays[key]
                if tuple(array.shape) != tuple(location.shape) or array.dtype != location.dtype:
                    raise RuntimeError(f"{relative}: {key} is {array.dtype}{list(array.shape)}, the layout says "
                                       f"{location.dtype}{list(location.shape)}")
            self.module.write_arrays(integrity.temporary_path(final), {key: arrays[key] for key in keyed})
            self._commit(final, relative, keyed)


class _CsrAppender:
    """Appends blocks of CSR rows to each interval's indptr, indices and values writers (`located`: each
    interval's three Locations), the pointers running on from the interval's entries so far."""

    def __init__(self, located, writers):
        self.located, self.writers = located, writers
        self.entries = [0] * len(located)
        for indptr, _, _ in located:
            writers[indptr.path][0].append(indptr.key, np.zeros(1, np.int64))

    def __call__(self, part, block):
        indptr, indices, values = self.located[part]
        self.writers[indptr.path][0].append(indptr.key, self.entries[part] + block.indptr[1:].astype(np.int64))
        self.writers[indices.path][0].append(indices.key, block.indices.astype(indices.dtype, copy=False))
        self.writers[values.path][0].append(values.key, block.data)
        self.entries[part] += block.nnz


def write_store(directory, graph, num_parts: int, vertex_data: dict | None = None, format: str = "npy",
                reencode: bool = True, progress=None, overwrite: bool = False) -> store.Store:
    """Writes graph.partition(num_parts, reencode) and per-vertex arrays as a store; returns it opened.

    vertex_data maps names to arrays with one row per vertex in the user's
    order ([V, ...]: features, labels, boolean masks; a scipy.sparse matrix is
    stored as CSR); they are stored in interval order. format is "npy" or
    "hdf5". progress(stage, done, total) is called as the conversion advances. A directory that is not empty is
    refused unless overwrite=True (its contents are then replaced).
    """
    rows = {name: row_source(name, array) for name, array in (vertex_data or {}).items()}
    return convert(directory, GraphEdges(graph), rows, num_parts=num_parts, format=format,
                           reencode=reencode, progress=progress, overwrite=overwrite,
                           source={"kind": "in-memory Graph", "graph": repr(graph)})


def read_graph(opened: store.Store):
    """The store's graph in memory (the inverse of write_store): original vertex ids, the user's edge order and
    its edge data (e.g. the GCN weights a conversion computed). Holds every edge: for graphs that fit."""
    P, E = opened.num_parts, opened.num_edges
    src, dst = np.empty(E, np.int64), np.empty(E, np.int64)
    spec = opened.edge_data_spec
    data = None if spec is None else np.empty((E,) + tuple(spec[0]), spec[1])
    for i in range(P):
        for j in range(P):
            if not opened.edge_counts[i, j]:
                continue
            chunk = opened.chunk(i, j)
            adjacency = chunk.adjacency
            local_dst = np.repeat(np.arange(adjacency.num_dst), np.diff(adjacency.csc_indptr))
            src[chunk.edge_ids] = opened.order[opened.bounds[i] + adjacency.csc_src.astype(np.int64)]
            dst[chunk.edge_ids] = opened.order[opened.bounds[j] + local_dst]
            if data is not None:
                data[chunk.edge_ids] = chunk.edge_data
    return Graph.from_edges(src, dst, opened.num_vertices, edge_data=data)
