"""Bad stores fail cleanly: a clear error naming the file and the chunk or interval, never a wrong result."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.store import integrity, open_store, write_store
from ngra_tf.store.store import MANIFEST
from store_checks import small_graphs, vertex_data

ROOT = pathlib.Path(__file__).resolve().parents[2]
GRAPH = small_graphs()["power_law_scalar_data"]
FORMATS = ["npy", "hdf5"]


def make_store(tmp_path, fmt="npy"):
    return write_store(tmp_path / "store", GRAPH, 3, vertex_data(GRAPH.num_vertices), format=fmt)


def chunk_file(store, i, j, name="csc_src"):
    location = next(loc for loc in store._layout.chunk(i, j) if loc.key == name)
    return pathlib.Path(store.path) / location.path


def interval_file(store, name, part):
    return pathlib.Path(store.path) / store._layout.vertex(name, part).path


def flip_byte(path, offset=-1):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def rewrite_manifest(store, edit):
    path = pathlib.Path(store.path) / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def read_in_graph(store, i, j):
    @tf.function
    def read():
        return store.chunk_arrays_op(i, j)["csc_src"]

    return read()


def test_a_killed_conversion_leaves_no_store(tmp_path):
    # The conversion kills its own process (SIGKILL: nothing runs after) once two chunks are written.
    script = f"""
import os, signal
import numpy as np
from ngra_tf.graph import Graph
from ngra_tf.store import write_store
rng = np.random.default_rng(0)
graph = Graph.from_edges(rng.integers(0, 50, 400), rng.integers(0, 50, 400), 50)
written = []
def progress(stage, done, total):
    written.extend([done] if stage == "write chunks" else [])
    if len(written) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
write_store({str(tmp_path / "store")!r}, graph, 3, {{"x": np.zeros((50, 2))}}, progress=progress)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == -9, done.stderr[-2000:]
    written = list((tmp_path / "store").rglob("*.npy"))
    assert written, "the conversion was killed before writing any chunk"
    with pytest.raises(ValueError, match=r"incomplete store: no manifest \(manifest.json\) in .*store"):
        open_store(tmp_path / "store")
    # The leftovers are marked as an unfinished conversion: converting again replaces them.
    assert (tmp_path / "store" / "CONVERTING").exists()
    assert write_store(tmp_path / "store", GRAPH, 2).num_parts == 2
    assert not (tmp_path / "store" / "CONVERTING").exists()
    # Other files in a directory need overwrite.
    os.remove(tmp_path / "store" / "manifest.json")
    with pytest.raises(ValueError, match="not empty and holds no store manifest.*overwrite=True"):
        write_store(tmp_path / "store", GRAPH, 2)
    assert write_store(tmp_path / "store", GRAPH, 2, overwrite=True).num_parts == 2
    assert not [p for p in (tmp_path / "store").rglob("*") if integrity.TEMPORARY_MARK in p.name]


def test_writes_are_atomic_and_refuse_to_clobber(tmp_path):
    store = make_store(tmp_path)
    names = [p.name for p in pathlib.Path(store.path).rglob("*")]
    assert not [name for name in names if integrity.TEMPORARY_MARK in name or name.startswith(".scratch")]
    with pytest.raises(ValueError, match="holds a store: pass overwrite=True"):
        make_store(tmp_path)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no store manifest"):
        write_store(other, GRAPH, 2)
    assert (other / "keep.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        write_store(tmp_path / "file", GRAPH, 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_flipped_byte(tmp_path, fmt):
    store = make_store(tmp_path, fmt)
    flip_byte(chunk_file(store, 1, 2))
    name = chunk_file(store, 1, 2).relative_to(store.path)
    message = rf"file {name} \(chunk \(1, 2\)\) fails its checksum .*corrupted"
    with pytest.raises(ValueError, match=message):
        store.chunk(1, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        read_in_graph(store, 1, 2)
    store.chunk(2, 1)  # other files are fine
    flip_byte(interval_file(store, "features", 2), offset=-3)
    with pytest.raises(ValueError, match=r"\(interval 2 of vertex arrays? [^)]*'features'[^)]*\) fails its checksum"):
        store.vertex_rows("features", 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_file(tmp_path, fmt):
    store = make_store(tmp_path, fmt)
    path = interval_file(store, "features", 1)
    path.write_bytes(path.read_bytes()[:-100])
    message = r"\(interval 1 of vertex arrays? [^)]*'features'[^)]*\) has \d+ bytes, the manifest says \d+: .*truncated"
    with pytest.raises(ValueError, match=message):
        store.vertex_rows("features", 1)

    @tf.function
    def read():
        return store.vertex_rows_op("features", 1)

    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        read()


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_file(tmp_path, fmt):
    store = make_store(tmp_path, fmt)
    chunk_file(store, 0, 2).unlink()
    with pytest.raises(ValueError, match=r"\(chunk \(0, 2\)\) is missing"):
        store.chunk(0, 2)
    with pytest.raises(ValueError, match=r"\(chunk \(0, 2\)\) is missing"):
        store.verify()


def test_file_that_disagrees_with_the_manifest(tmp_path):
    store = make_store(tmp_path)
    path = chunk_file(store, 0, 1)
    # A well-formed file of another dtype, with the manifest's size and checksum updated to match it:
    # only the array description can tell.
    np.save(path, store.chunk(0, 1).adjacency.csc_src.astype(np.int16))
    relative = str(path.relative_to(store.path))

    def fix_size_and_crc(manifest):
        manifest["files"][relative].update(bytes=path.stat().st_size, crc32=integrity.crc32_file(path))

    rewrite_manifest(store, fix_size_and_crc)
    with pytest.raises(ValueError, match=rf"file {relative} \(chunk \(0, 1\)\) holds 'csc_src' as int16\[\d+\], "
                                         r"the manifest says int32\[\d+\]"):
        open_store(store.path).chunk(0, 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_index_arrays_written_wrong_with_matching_checksums(tmp_path, fmt):
    # Checksums only say a file is what was written; a chunk's arrays are checked for being a valid CSC/CSR.
    store = make_store(tmp_path, fmt)
    path = chunk_file(store, 0, 1)
    relative = str(path.relative_to(store.path))
    csc_src = store.chunk(0, 1).adjacency.csc_src.copy()
    csc_src[0] = store.bounds[1]  # one past interval 0's last vertex
    if fmt == "npy":
        np.save(path, csc_src)
    else:
        import h5py  # noqa: PLC0415

        with h5py.File(path, "a") as file:
            file["csc_src"][...] = csc_src
    rewrite_manifest(store, lambda m: m["files"][relative].update(bytes=path.stat().st_size,
                                                                   crc32=integrity.crc32_file(path)))
    message = rf"chunk \(0, 1\) \([^)]*{relative}[^)]*\): csc_src holds ids outside 0..\d+; .*--overwrite"
    with pytest.raises(ValueError, match=message):
        open_store(store.path).chunk(0, 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        read_in_graph(open_store(store.path), 0, 1)


def test_npy_header_whose_length_moves_the_data(tmp_path):
    store = make_store(tmp_path)
    path = interval_file(store, "features", 1)
    data = bytearray(path.read_bytes())
    data[8] -= 1  # numpy still parses the header without its last '\n': the rows would be read a byte early
    path.write_bytes(bytes(data))
    relative = str(path.relative_to(store.path))
    rewrite_manifest(store, lambda m: m["files"][relative].update(crc32=integrity.crc32_file(path)))
    with pytest.raises(ValueError, match=rf"file {relative} .* cannot be read: its header puts float32\[\d+, 4\] "
                                         r"at bytes \d+..\d+, but the file has \d+"):
        open_store(store.path).vertex_rows("features", 1)


def test_manifest_that_disagrees_with_itself(tmp_path):
    store = make_store(tmp_path)
    relative = str(chunk_file(store, 2, 0).relative_to(store.path))

    def wrong_shape(manifest):
        manifest["files"][relative]["arrays"]["csc_src"]["shape"] = [1]

    rewrite_manifest(store, wrong_shape)
    with pytest.raises(ValueError, match=rf"{relative} \(chunk \(2, 0\)\) lists 'csc_src' as .*header implies"):
        open_store(store.path)

    store = write_store(tmp_path / "second", GRAPH, 2)
    rewrite_manifest(store, lambda manifest: manifest["files"].pop(relative.replace("00002-00000", "00001-00000")))
    with pytest.raises(ValueError, match=r"does not list chunks/00001-00000/csc_src.npy \(chunk \(1, 0\)\)"):
        open_store(store.path)


def test_wrong_format_version_and_not_a_store(tmp_path):
    store = make_store(tmp_path)
    rewrite_manifest(store, lambda manifest: manifest.update(format_version=2))
    with pytest.raises(ValueError, match="format version 2; this ngra_tf reads version 1"):
        open_store(store.path)
    (pathlib.Path(store.path) / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match="cannot read manifest.json"):
        open_store(store.path)
    with pytest.raises(ValueError, match="no store at .*: not a directory"):
        open_store(tmp_path / "nowhere")


def test_verify_checks_every_file_and_reads_check_each_file_once(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    store.verify()
    calls = []
    real = integrity.crc32_file
    monkeypatch.setattr(integrity, "crc32_file", lambda path: calls.append(path) or real(path))
    store.chunk(1, 1)
    store.chunk(1, 1)
    store.vertex_rows("labels", 0)
    assert calls == []  # verified once in this process (by verify): not again
    flip_byte(interval_file(store, "labels", 2))  # changes the file's identity: checked again
    with pytest.raises(ValueError, match=r"interval 2 of vertex array 'labels'\) fails its checksum"):
        store.verify()
    assert calls


def test_json_that_cannot_be_written_leaves_nothing_behind(tmp_path):
    from ngra_tf.store import integrity  # noqa: PLC0415

    path = tmp_path / "history.json"
    with pytest.raises(TypeError):
        integrity.write_json_atomically(path, {"not json": object()})
    assert list(tmp_path.iterdir()) == []
    integrity.write_json_atomically(path, {"loss": [0.5]})
    assert path.read_text().startswith("{") and [p.name for p in tmp_path.iterdir()] == ["history.json"]
