"""Corrupts copies of a small store at random and reads each through every path (see test_store_fuzz.py).

Each case copies a pristine store, applies one seeded mutation (manifest JSON fields, .npy headers, HDF5
files, chunk index arrays, whole files; checksums recomputed to match for most, so that deeper checks must
catch them), then reads it through open_store, verify(), chunk(i, j), vertex_rows, the compiled reader
(StoreReader ops, a fused gather and its gradient over every chunk) and, in some cases, a store-backed GCN's
forward. Each path must raise a named error (ValueError / OSError / InvalidArgumentError whose message
names the store's manifest or file) or give the pristine store's result.

Usage: python store_fuzz_worker.py FORMATS FIRST_SEED COUNT [MODEL_EVERY]
FORMATS: npy, hdf5 or npy,hdf5; COUNT cases of each; MODEL_EVERY: the GCN forward runs in every
MODEL_EVERY-th case (~10 s each; default never). Prints "case SEED MUTATION" before each case (a crash or
hang is then attributed), "FAIL ..." for each failure and a "summary" line per format; exits 3 if any failed.
"""

import ast
import faulthandler
import json
import pathlib
import shutil
import sys
import tempfile
import traceback

import numpy as np
import tensorflow as tf

from ngra_tf import ops
from ngra_tf.graph import Graph
from ngra_tf.store import integrity, open_store, write_store
from ngra_tf.store.reader import StoreReader
from ngra_tf.store.store import MANIFEST
from store_checks import assert_chunks_equal, small_graphs, vertex_data

NUM_PARTS = 3
tf.get_logger().setLevel("ERROR")  # each case traces the reader anew: no retracing warnings
CASE_SECONDS = 120  # a case that takes longer hangs: the worker dumps its stacks and exits
_MULTI = small_graphs()["multigraph_2d_data"]  # repeated edges, self loops, empty chunks
GRAPH = Graph.from_edges(_MULTI.src, _MULTI.dst, _MULTI.num_vertices,  # scalar edge data: GCN weights
                         edge_data=np.random.default_rng(3).uniform(0.1, 1, _MULTI.num_edges).astype(np.float32))
NAMED_TYPES = (ValueError, OSError, tf.errors.InvalidArgumentError)
ODD_VALUES = [None, True, False, -1, 0, 1, 2**70, 1.5, "x", "3", [], {}, [0], {"a": 1}]


class Outcome(Exception):
    """A path's failure: raised to end the case with a message."""


# ---- the paths and their results ----


def read_chunks(store):
    return [store.chunk(i, j) for i in range(NUM_PARTS) for j in range(NUM_PARTS)]


def read_rows(store):
    return {(name, p): store.vertex_rows(name, p) for name in store.vertex_names for p in range(NUM_PARTS)}


def compiled_reader(store):
    """Every chunk and interval through StoreReader's ops, a fused gather (sum, max) and its gradient."""
    reader = StoreReader(store, ("features",))

    @tf.function
    def run():
        results = []
        for k in range(NUM_PARTS * NUM_PARTS):
            chunk = reader.chunk(tf.constant(k, tf.int64))
            x = tf.reshape(reader.rows("features", tf.constant(k // NUM_PARTS, tf.int64)), [-1, 4])
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = ops.fused_gather(chunk.adjacency, x, reduce="sum")
                largest = ops.fused_gather(chunk.adjacency, x, reduce="max")
                loss = tf.reduce_sum(total * 1.5) + tf.reduce_sum(largest)
            results += [total, largest, tape.gradient(loss, x), chunk.edge_data]
        return results

    return [t.numpy() for t in run()]


def model_forward(store):
    """A store-backed GCN's predictions (weights seeded: equal stores give equal predictions)."""
    import keras  # noqa: PLC0415

    from ngra_tf import recipes  # noqa: PLC0415

    keras.utils.set_random_seed(1)
    model = recipes.build_model("gcn", store, 3, hidden=5, num_features=4)
    return model.predict(store.array("features"), verbose=0)


PATHS = {"verify": lambda store: store.verify(), "chunk": read_chunks, "vertex_rows": read_rows,
         "reader": compiled_reader}


def assert_same(expected, got, where="result"):
    if isinstance(expected, dict):
        assert expected.keys() == got.keys(), where
        for key in expected:
            assert_same(expected[key], got[key], f"{where}[{key}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(got), where
        for k, (want, have) in enumerate(zip(expected, got)):
            assert_same(want, have, f"{where}[{k}]")
    elif hasattr(expected, "adjacency"):  # a Chunk
        assert_chunks_equal(expected, got)
    elif expected is None:
        assert got is None, where
    else:
        expected, got = np.asarray(expected), np.asarray(got)
        assert expected.dtype == got.dtype and expected.shape == got.shape, (
            f"{where}: {got.dtype}{list(got.shape)}, expected {expected.dtype}{list(expected.shape)}")
        np.testing.assert_array_equal(got, expected, err_msg=where)


def attempt(path_name, run, directory, names, expected=None):
    """Runs one path: returns ("named", None), ("ok", result); raises Outcome for anything else.

    A named error's message holds the store's directory and what is wrong in it: the manifest, a chunk,
    or one of the files (`names`)."""
    try:
        result = run()
    except NAMED_TYPES as error:
        message = str(error)
        if str(directory) not in message or not any(name in message for name in names):
            raise Outcome(f"{path_name}: {type(error).__name__} names no file of the store: {message[:600]}")
        return "named", None
    except Exception as error:  # noqa: BLE001  (any other type is a failure to report)
        raise Outcome(f"{path_name}: unexpected {type(error).__name__}: {str(error)[:600]}\n"
                      f"{traceback.format_exc()[-1500:]}") from None
    if expected is not None:
        try:
            assert_same(expected, result, path_name)
        except AssertionError as error:
            raise Outcome(f"{path_name}: silent wrong answer: {str(error)[:600]}") from None
    return "ok", result


# ---- mutations ----


def rewrite_manifest(directory, edit):
    path = directory / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def refresh_entry(directory, relative):
    """Recomputes a file's size and crc32 in the manifest: the integrity check passes, deeper ones must not."""
    full = directory / relative
    rewrite_manifest(directory, lambda m: m["files"][relative].update(bytes=full.stat().st_size,
                                                                       crc32=integrity.crc32_file(full)))


def leaves(value, path=()):
    """Every (path, value) in a JSON tree, containers included."""
    yield path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from leaves(item, path + (key,))


def mutate_manifest(rng, directory):
    if rng.random() < 0.1:  # the JSON text itself: cut short or a byte flipped
        data = bytearray((directory / MANIFEST).read_bytes())
        k = int(rng.integers(len(data)))
        if rng.random() < 0.5:
            data, kind = data[:k], "cut short"
        else:
            data[k] ^= 1 << int(rng.integers(8))
            kind = "a bit flipped"
        (directory / MANIFEST).write_bytes(bytes(data))
        return f"manifest text: {kind} at byte {k}"
    manifest = json.loads((directory / MANIFEST).read_text())
    top = str(rng.choice(sorted(manifest)))
    found = list(leaves(manifest[top], (top,)))
    path, value = found[rng.integers(len(found))]
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    kinds = ["delete", "odd", "swap"] + (["plus", "minus"] if isinstance(value, int) else [])
    kind = str(rng.choice(kinds))
    if kind == "delete":
        del parent[key]
    elif kind == "odd":
        parent[key] = ODD_VALUES[rng.integers(len(ODD_VALUES))]
    elif kind == "swap" and isinstance(value, list) and len(value) > 1:
        a, b = rng.choice(len(value), 2, replace=False)
        value[a], value[b] = value[b], value[a]
    elif kind == "swap":  # another value from elsewhere in the manifest
        kind = "transplant"
        parent[key] = json.loads(json.dumps(found[rng.integers(len(found))][1]))
    else:
        parent[key] = value + (1 if kind == "plus" else -1)
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return f"manifest {'/'.join(map(str, path))}: {kind} (was {json.dumps(value)[:60]})"


def npy_files(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.npy"))


def mutate_npy_header(rng, directory):
    relative = str(rng.choice(npy_files(directory)))
    full = directory / relative
    data = bytearray(full.read_bytes())
    header_len = int.from_bytes(data[8:10], "little")
    header = ast.literal_eval(data[10:10 + header_len].decode("latin1"))
    body = bytes(data[10 + header_len:])
    kind = str(rng.choice(["magic", "version", "length", "descr", "fortran", "shape", "missing key", "text byte",
                           "padding", "header byte"]))
    n = header["shape"][0] if header["shape"] else 1

    def build(fields, version=b"\x01\x00", pad=0):
        text = repr(fields).encode("latin1")
        total = 10 + len(text) + 1 + pad
        text += b" " * (-total % 64 + pad) + b"\n"
        return b"\x93NUMPY" + version + len(text).to_bytes(2, "little") + text

    if kind == "magic":
        data[rng.integers(6)] ^= 1 << int(rng.integers(8))
    elif kind == "version":
        data[6:8] = bytes([int(rng.choice([0, 2, 3, 255])), int(rng.integers(3))])
    elif kind == "length":
        data[8:10] = int(rng.choice([0, 1, header_len - 1, header_len + 1, 65535])).to_bytes(2, "little")
    elif kind == "header byte":
        data[rng.integers(10 + header_len)] ^= 1 << int(rng.integers(8))
    elif kind == "text byte":
        data[10 + rng.integers(header_len)] = int(rng.choice(list(b"{}()[],:'\"0 x\n\x00")))
    else:
        fields = dict(header)
        if kind == "descr":
            fields["descr"] = str(rng.choice(["<f4", "<i8", ">i4", "|O", "<U3", "garbage", "|b1", "<i2", "<f8",
                                              "<c8", "V4"]))
        elif kind == "fortran":
            fields["fortran_order"] = [True, 1, "yes", None][rng.integers(4)]
        elif kind == "shape":
            fields["shape"] = [(n + 1,), (max(n - 1, 0),), (), (n, 1), (-1,), (1, n) + header["shape"][1:],
                               (2**62,), [n], (1.5,)][rng.integers(9)]
        elif kind == "missing key":
            del fields[str(rng.choice(sorted(fields)))]
        data = bytearray(build(fields, pad=64 if kind == "padding" else 0) + body)
    full.write_bytes(bytes(data))
    refresh = rng.random() < 0.8
    if refresh:
        refresh_entry(directory, relative)
    return f"npy header of {relative}: {kind}{'' if refresh else ' (checksum not refreshed)'}"


def mutate_hdf5(rng, directory):
    import h5py  # noqa: PLC0415

    relative = str(rng.choice(sorted(str(p.relative_to(directory)) for p in directory.rglob("*.h5"))))
    full = directory / relative
    kind = str(rng.choice(["truncate", "flip", "flip metadata", "dtype", "shape", "delete", "rename", "group",
                           "extra", "gzip", "chunked"]))
    refresh = True
    if kind == "truncate":
        data = full.read_bytes()
        full.write_bytes(data[:rng.integers(len(data))])
        refresh = rng.random() < 0.7
    elif kind == "flip":  # the checksum must catch a flipped byte
        data = bytearray(full.read_bytes())
        data[rng.integers(len(data))] ^= 1 << int(rng.integers(8))
        full.write_bytes(bytes(data))
        refresh = False
    elif kind == "flip metadata":  # outside the datasets' bytes, checksum refreshed: HDF5 itself must cope
        with h5py.File(full, "r") as file:
            data_bytes = [(file[key].id.get_offset(), file[key].id.get_storage_size()) for key in file
                          if file[key].id.get_offset() is not None]
        data = bytearray(full.read_bytes())
        outside = np.ones(len(data), bool)
        for offset, size in data_bytes:
            outside[offset:offset + size] = False
        k = int(rng.choice(np.flatnonzero(outside)))
        data[k] ^= 1 << int(rng.integers(8))
        full.write_bytes(bytes(data))
        kind += f" at byte {k}"
    else:
        with h5py.File(full, "a") as file:
            key = str(rng.choice(sorted(file)))
            array = file[key][()]
            if kind != "extra":
                del file[key]
            if kind == "dtype":
                other = [np.int16, np.int64, np.float32, np.float64, np.uint8, np.int32]
                file[key] = array.astype(other[rng.integers(len(other))])
            elif kind == "shape":
                file[key] = [array[:-1], np.concatenate([array, array[:1]]), array.reshape((1,) + array.shape),
                             array.reshape(-1)[:1]][rng.integers(4)] if array.size else np.zeros((1,) + array.shape[1:],
                                                                                                 array.dtype)
            elif kind == "rename":
                file[key + "_"] = array
            elif kind == "group":
                file.create_group(key)
            elif kind == "extra":
                file[key + "_extra"] = array
            elif kind in ("gzip", "chunked"):  # the same data, stored another way: must read the same
                if array.size:
                    file.create_dataset(key, data=array, chunks=True, compression="gzip" if kind == "gzip" else None)
                else:
                    file[key] = array
        kind = f"{kind} {key}"
    if refresh:
        refresh_entry(directory, relative)
    return f"hdf5 {relative}: {kind}{'' if refresh else ' (checksum not refreshed)'}"


def mutate_index(rng, directory, store):
    """Writes one of a non-empty chunk's index arrays (or edge ids) back wrong, checksums refreshed."""
    nonempty = np.argwhere(store.edge_counts > 0)
    i, j = (int(v) for v in nonempty[rng.integers(len(nonempty))])
    name = str(rng.choice(["csc_indptr", "csc_src", "csr_indptr", "csr_dst", "csr_edge", "edge_ids"]))
    array = store.chunk_arrays(i, j, (name,))[name].copy()
    bound = {"csc_src": store.bounds[i + 1] - store.bounds[i], "csr_dst": store.bounds[j + 1] - store.bounds[j],
             "csr_edge": len(array), "edge_ids": store.num_edges}.get(name, len(array))
    kind = str(rng.choice(["out of range", "negative", "swap", "shift", "reverse", "duplicate", "length"]))
    k = int(rng.integers(len(array)))
    if name == "edge_ids" and kind in ("swap", "shift", "reverse", "duplicate"):
        # User edge ids have no order but among repeated edges (the user's), and a permutation or a
        # duplicate in range is another valid store (it is a permutation only across all chunks).
        adjacency = store.chunk(i, j).adjacency
        repeated = np.flatnonzero((np.diff(adjacency.csc_src) == 0) & (np.diff(adjacency.dst) == 0))
        kind = "swap" if len(repeated) else "out of range"
        k = int(repeated[rng.integers(len(repeated))]) if len(repeated) else k
    if kind == "out of range":
        array[k] = bound + int(rng.integers(3))
    elif kind == "negative":
        array[k] = -1 - int(rng.integers(3))
    elif kind == "swap" and len(array) > 1:
        k = min(k, len(array) - 2)
        array[k], array[k + 1] = array[k + 1], array[k]
    elif kind == "shift":
        array[k] += 1
    elif kind == "reverse":
        array = array[::-1].copy()
    elif kind == "duplicate" and len(array) > 1:
        array[k] = array[(k + 1) % len(array)]
    elif kind == "length":
        array = array[:-1] if rng.random() < 0.5 else np.concatenate([array, array[-1:]])
    location = next(loc for loc in store._layout.chunk(i, j, (name,)))
    full = directory / location.path
    if store.format == "npy":
        np.save(full, array)
    else:
        import h5py  # noqa: PLC0415

        with h5py.File(full, "a") as file:
            del file[name]
            file[name] = array
    refresh_entry(directory, location.path)
    if kind == "length" and rng.random() < 0.5:  # the manifest's array entry agrees with the new length too
        rewrite_manifest(directory, lambda m: m["files"][location.path]["arrays"][name].update(
            shape=list(array.shape)))
        kind += " (manifest agrees)"
    return f"chunk ({i}, {j}) {name} in {location.path}: {kind} at {k}"


def mutate_file(rng, directory):
    files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    relative = str(rng.choice(files))
    full = directory / relative
    kind = str(rng.choice(["missing", "empty", "directory", "another file", "extra file"]))
    if kind == "missing":
        full.unlink()
    elif kind == "empty":
        full.write_bytes(b"")
    elif kind == "directory":
        full.unlink()
        full.mkdir()
    elif kind == "another file":  # a file of the same kind from elsewhere in the store
        same = [f for f in files if f.endswith(pathlib.Path(relative).suffix) and f != relative]
        shutil.copyfile(directory / same[rng.integers(len(same))], full)
    else:
        (full.parent / "stray.bin").write_bytes(b"\x00" * 10)
    if kind in ("empty", "another file") and rng.random() < 0.7:
        refresh_entry(directory, relative)
        kind += " (checksum refreshed)"
    return f"file {relative}: {kind}"


def mutate(rng, directory, store):
    kinds = ["manifest", "index", "file", "npy header" if store.format == "npy" else "hdf5"]
    kind = kinds[rng.choice(4, p=[0.3, 0.3, 0.1, 0.3])]
    if kind == "manifest":
        return mutate_manifest(rng, directory)
    if kind == "index":
        return mutate_index(rng, directory, store)
    if kind == "file":
        return mutate_file(rng, directory)
    return mutate_npy_header(rng, directory) if kind == "npy header" else mutate_hdf5(rng, directory)


# ---- the cases ----


def main(fmt, first, count, model_every=0):
    root = pathlib.Path(tempfile.mkdtemp(prefix="store_fuzz_"))
    try:
        pristine = write_store(root / "pristine", GRAPH, NUM_PARTS, vertex_data(GRAPH.num_vertices), format=fmt)
        expected = {name: run(pristine) for name, run in PATHS.items()}
        expected_model = model_forward(pristine) if model_every else None
        failures, outcomes = 0, {"named": 0, "ok": 0}
        for seed in range(first, first + count):
            rng = np.random.default_rng([seed, 22])
            directory = root / f"case{seed}"
            shutil.copytree(pristine.path, directory)
            mutation = mutate(rng, directory, pristine)
            print(f"case {seed} {fmt} {mutation}", flush=True)
            faulthandler.dump_traceback_later(CASE_SECONDS, exit=True)
            names = [MANIFEST, "chunk ("] + list(pristine.manifest["files"])
            try:
                status, store = attempt("open_store", lambda: open_store(directory), directory, names)
                results = [status]
                if store is not None:
                    for path_name in rng.permutation(sorted(PATHS)):
                        status, _ = attempt(path_name, lambda: PATHS[path_name](store), directory, names,
                                            expected[path_name])
                        results.append(status)
                    if model_every and seed % model_every == 0:
                        status, _ = attempt("model", lambda: model_forward(store), directory, names, expected_model)
                        results.append(status)
                outcome = "ok" if set(results) == {"ok"} else "named"
                outcomes[outcome] += 1
                print(f"result {seed} {outcome} {' '.join(results)}", flush=True)
            except Outcome as error:
                failures += 1
                print(f"FAIL seed={seed} format={fmt} mutation: {mutation} (again: python {__file__} {fmt} {seed} 1)"
                      f"\n  {error}", flush=True)
            faulthandler.cancel_dump_traceback_later()
            shutil.rmtree(directory)
        print(f"summary format={fmt} cases={count} named={outcomes['named']} ok={outcomes['ok']} "
              f"failures={failures}", flush=True)
        return failures
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    faulthandler.enable()  # a crash prints where it happened; the last "case" line says which case
    formats, first, count = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    failed = [main(fmt, first, count, every) for fmt in formats]
    sys.exit(3 if any(failed) else 0)  # not 1: faulthandler's exit after a hang
