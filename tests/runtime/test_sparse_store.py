"""A store's CSR feature array (bag-of-words rows): written, checked and read as CSR, and trained from as
tf.SparseTensor tiles, never densified, with the results of the same features stored dense."""

import dataclasses
import json
import pathlib
import re

import keras
import numpy as np
import pytest
import scipy.sparse as sp
import tensorflow as tf

import ngra_tf
from ngra_tf import recipes
from ngra_tf.parallel import Topology
from ngra_tf.runtime.plan import budget
from ngra_tf.store import integrity, open_store, write_store
from ngra_tf.store.store import MANIFEST, StoreError
from store_checks import assert_store_matches
from test_stream import REPO, _train

NUM_VERTICES, NUM_EDGES, WIDTH, CLASSES = 120, 700, 40, 3


def _features(seed=0, num_vertices=NUM_VERTICES):
    """Bag-of-words-like rows, 10 % non-zero, one row with no entry at all."""
    rows = sp.random(num_vertices, WIDTH, density=0.1, format="lil", dtype=np.float32,
                     random_state=np.random.default_rng(seed))
    rows[7] = 0
    return sp.csr_matrix(rows)


def _problem(model, seed=0):
    rng = np.random.default_rng(seed)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, NUM_VERTICES, NUM_EDGES), rng.integers(0, NUM_VERTICES, NUM_EDGES),
                                     NUM_VERTICES)
    arrays = {"features": _features(seed), "labels": rng.integers(0, CLASSES, NUM_VERTICES),
              "train_mask": rng.random(NUM_VERTICES) < 0.6}
    return recipes.prepare_graph(model, graph), arrays


def _stores(tmp_path, model, num_parts, fmt="npy"):
    """The same graph and features as two stores: features CSR, and dense."""
    graph, arrays = _problem(model)
    sparse = write_store(tmp_path / "csr", graph, num_parts, arrays, format=fmt)
    dense = write_store(tmp_path / "dense", graph, num_parts, {**arrays, "features": arrays["features"].toarray()},
                        format=fmt)
    assert sparse.is_sparse("features") and not dense.is_sparse("features")
    return sparse, dense


def _model(model, store, dropout=None, tile_bytes=None, **options):
    recipe = recipes.RECIPES[model]
    recipe = recipe if dropout is None else dataclasses.replace(recipe, dropout=dropout)
    keras.utils.set_random_seed(1)
    built = recipes.build_model(model, store, CLASSES, hidden=6, recipe=recipe, sparse=store.is_sparse("features"),
                                attention_dropout=0.0 if model == "gat" else None, **options)
    built.compile(optimizer=keras.optimizers.Adam(0.05), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    built.build(store.array("features").shape)
    if tile_bytes is not None:
        built.executor().tile_bytes = tile_bytes
    return built


def _fit(model, store, epochs=3):
    history = model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"),
                        epochs=epochs, verbose=0).history
    return history, model.predict(store.array("features"), verbose=0)


# ---- the format ----

@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
@pytest.mark.parametrize("num_parts", [1, 3])
def test_csr_features_are_stored_and_read_as_csr(tmp_path, fmt, num_parts):
    graph, arrays = _problem("gcn")
    canonical = arrays["features"]
    # Each entry as two halves, each row's columns in falling order: stored canonical (summed, sorted).
    coo = canonical.tocoo()
    order = np.lexsort((-coo.col, coo.row)).repeat(2)
    counts = 2 * np.diff(canonical.indptr)
    messy = sp.csr_matrix((coo.data[order] / 2, coo.col[order], np.concatenate([[0], np.cumsum(counts)])),
                          shape=canonical.shape)
    assert not messy.has_canonical_format
    given = messy.indices.copy()
    store = write_store(tmp_path / "store", graph, num_parts, {**arrays, "features": messy}, format=fmt)
    np.testing.assert_array_equal(messy.indices, given)  # (the caller's matrix is left as it was)
    assert_store_matches(store, graph, num_parts, vertex_data={**arrays, "features": canonical})
    entry = store.manifest["vertex_arrays"]["features"]
    assert entry["format"] == "csr" and sum(entry["nnz"]) == canonical.nnz == store.nnz("features").sum()
    with pytest.raises(ValueError, match="'labels' is dense"):
        store.nnz("labels")
    read = store.array("features").read()
    assert sp.isspmatrix_csr(read) and (read != canonical).nnz == 0
    np.testing.assert_array_equal(store.array("features").read("interval").toarray(),
                                  canonical.toarray()[store.order])
    part = num_parts - 1
    ids = store.partition().vertices(part)
    np.testing.assert_array_equal(store.vertex_rows("features", part, 3, 11).toarray(), canonical[ids[3:11]].toarray())
    read_op = tf.function(lambda: tf.sparse.to_dense(store.vertex_rows_op("features", part, 3, 11)))
    np.testing.assert_array_equal(read_op().numpy(), canonical[ids[3:11]].toarray())
    dense_row = WIDTH * 4
    assert 8 < store.row_nbytes("features") < dense_row
    assert store.vertex_nbytes("features", part) == 8 * (len(ids) + 1) + 8 * int(entry["nnz"][part])
    assert "CSR" in repr(store.array("features"))
    store.verify()


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_several_csr_arrays_beside_dense_ones(tmp_path, fmt):
    graph, arrays = _problem("gcn")
    other = sp.random(NUM_VERTICES, 5, density=0.5, format="csr", dtype=np.float64, random_state=3)
    store = write_store(tmp_path / "store", graph, 3, {**arrays, "words": other, "dense": np.ones((NUM_VERTICES, 2))},
                        format=fmt)
    store.verify()
    reopened = open_store(store.path)  # (an HDF5 interval file holds parts of both CSR arrays: each checked)
    for name, want in (("features", arrays["features"]), ("words", other)):
        got = reopened.array(name).read()
        assert got.dtype == want.dtype and (got != want).nnz == 0, name
    np.testing.assert_array_equal(reopened.array("dense").read(), np.ones((NUM_VERTICES, 2)))


def _rewrite_manifest(store, edit):
    path = pathlib.Path(store.path) / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_csr_columns_written_wrong_are_named(tmp_path, fmt):
    # The files match their checksums, so only the CSR check can tell: a column past the row's width.
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays, format=fmt)
    location = store._layout.vertex_parts("features", 1)[1]
    path = pathlib.Path(store.path) / location.path
    indices = store.vertex_rows("features", 1).indices.copy()
    indices[-1] = WIDTH
    if fmt == "npy":
        np.save(path, indices)
    else:
        import h5py  # noqa: PLC0415

        with h5py.File(path, "a") as file:
            file[location.key][...] = indices
    _rewrite_manifest(store, lambda m: m["files"][location.path].update(bytes=path.stat().st_size,
                                                                         crc32=integrity.crc32_file(path)))
    message = (rf"interval 1 of vertex array 'features' \([^)]*{re.escape(location.path)}[^)]*\): indices holds "
               rf"columns outside 0..{WIDTH - 1}; .*--overwrite")
    with pytest.raises(StoreError, match=message):
        open_store(store.path).vertex_rows("features", 1)
    with pytest.raises(StoreError, match=message):
        open_store(store.path).verify()
    reopened = open_store(store.path)
    with pytest.raises(StoreError, match=message):  # a model checks every file it may read before training
        _fit(_model("gcn", reopened), reopened)


@pytest.mark.parametrize("edit,message", [
    (lambda entry: entry.update(format="coo"), r"vertex array 'features' has format 'coo'; a store knows"),
    (lambda entry: entry.update(nnz=entry["nnz"][:1]), r"needs nnz, one entry count per interval \(2\)"),
    (lambda entry: entry.update(nnz=[entry["nnz"][0] + 1, entry["nnz"][1]]),
     r"lists 'features.indices' as .* but the store's header implies"),
    (lambda entry: entry.update(dtype="<i4"), r"must have rows of one axis and a float dtype"),
])
def test_csr_manifest_entries_are_checked(tmp_path, edit, message):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    _rewrite_manifest(store, lambda manifest: edit(manifest["vertex_arrays"]["features"]))
    with pytest.raises(StoreError, match=message):
        open_store(store.path)


# ---- training ----

@pytest.mark.parametrize("model", ["gcn", "gat"])  # (sage, gin and appnp on CSR rows: test_sparse_features)
def test_training_from_csr_equals_the_dense_store(tmp_path, model):
    """The recipe's dropout on: sparse dropout draws what Keras's draws on the dense rows, tile for tile (here a
    tile is an interval in both stores), so the two train alike to the last bit but the matmul's sums."""
    sparse, dense = _stores(tmp_path, model, 3)
    history, predicted = {}, {}
    for name, store in (("sparse", sparse), ("dense", dense)):
        built = _model(model, store, tile_bytes=1 << 40)
        history[name], predicted[name] = _fit(built, store)
        if name == "sparse":
            weights = built.get_weights()
    for key in history["dense"]:
        np.testing.assert_allclose(history["sparse"][key], history["dense"][key], rtol=1e-5, err_msg=key)
    for got, want in zip(weights, built.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(predicted["sparse"], predicted["dense"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model,num_parts,fmt,spill", [("gcn", 1, "hdf5", "spill")])
def test_csr_rows_in_many_tiles_train_like_the_dense_store(tmp_path, model, num_parts, fmt, spill):
    """Several row tiles per interval (a few rows each, so sized by the entries, not the width), spilled to disk
    or recomputed: without dropout (whose draws follow the tiles) the result is the dense store's."""
    sparse, dense = _stores(tmp_path, model, num_parts, fmt)
    results = [_fit(_model(model, store, dropout=0.0, tile_bytes=300, spill=spill, spill_dir=str(tmp_path / "spill")),
                    store) for store in (sparse, dense)]
    for key in results[1][0]:
        np.testing.assert_allclose(results[0][0][key], results[1][0][key], rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-4, atol=1e-5)


def test_csr_store_over_several_devices(tmp_path):
    sparse, dense = _stores(tmp_path, "gcn", 4)
    topology = Topology.sample("paper-8gpu")
    results = [_fit(_model("gcn", store, tile_bytes=1 << 40, devices=2, placement="ring", topology=topology), store)
               for store in (sparse, dense)]
    np.testing.assert_allclose(results[0][0]["loss"], results[1][0]["loss"], rtol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-4, atol=1e-5)


def test_the_budget_counts_csr_entries_not_the_width(tmp_path):
    sparse, dense = _stores(tmp_path, "gcn", 3)
    plans = {name: _model("gcn", store, memory_budget="1GB").memory_plan()
             for name, store in (("sparse", sparse), ("dense", dense))}
    hoist = {name: dict(plan.steps)["stage 0 hoist"] for name, plan in plans.items()}
    assert hoist["sparse"] < hoist["dense"], hoist
    assert plans["sparse"].runtime == plans["dense"].runtime + budget.RUNTIME_SPARSE_INPUT
    described = "\n".join(plans["sparse"].describe())
    assert "the feature tiles' 0 B" in described  # (CSR tiles are read uncached)
    entries = int(sparse.nnz("features").sum())
    assert entries == sparse.array("features").read().nnz
    assert f"features 'features': CSR, {entries} entries" in described


def test_a_functional_model_must_take_what_the_store_holds(tmp_path):
    sparse, dense = _stores(tmp_path, "appnp", 2)
    for store, held, wanted in ((sparse, "CSR", r"keras.Input\(..., sparse=True\)"), (dense, "dense", "dense")):
        keras.utils.set_random_seed(0)
        model = recipes.build_model("appnp", store, CLASSES, hidden=6, sparse=not store.is_sparse("features"))
        model.compile(optimizer="adam", loss=ngra_tf.masked_loss())
        with pytest.raises(ValueError, match=rf"holds 'features' as {held} rows, .*{wanted}"):
            model.fit(store.array("features"), store.array("labels"), epochs=1, verbose=0)


# ---- the tools ----

def test_partition_graph_stores_scipy_npz_features_as_csr(tmp_path):
    graph, arrays = _problem("gcn")
    np.savez(tmp_path / "edges.npz", src=graph.src, dst=graph.dst, num_vertices=graph.num_vertices)
    sp.save_npz(tmp_path / "x.npz", arrays["features"])
    done = _tool("tools/partition_graph.py", f"--edges={tmp_path / 'edges.npz'}", f"--features={tmp_path / 'x.npz'}",
                 f"--output={tmp_path / 'store'}", "--chunks=3", "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(tmp_path / "store")
    assert store.is_sparse("features")
    assert (store.array("features").read() != arrays["features"]).nnz == 0


def test_train_py_trains_from_cora_with_csr_features(tmp_path):
    done = _tool("tools/partition_graph.py", "--preset=cora", "--chunks=2", f"--output={tmp_path / 'cora'}",
                 "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert open_store(tmp_path / "cora").is_sparse("features")
    done = _train("--model=appnp", f"--store={tmp_path / 'cora'}", "--memory_budget=1GB", "--epochs=3", "--explain")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"test accuracy 0\.\d+ after 3 epochs", done.stdout), done.stdout[-3000:]


@pytest.mark.slow
def test_train_py_from_csr_features_stays_within_the_smallest_budget(tmp_path):
    """As test_stream's budget test, for CSR features (whose estimate counts entries, not the width)."""
    done = _tool("tools/partition_graph.py", "--preset=cora", "--chunks=4", f"--output={tmp_path / 'cora'}",
                 "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    done = _train("--model=gcn", f"--store={tmp_path / 'cora'}", "--memory_budget=2MB", "--epochs=1")
    smallest = re.search(r"the smallest budget that works is [^(]*\((\d+) bytes\)", done.stderr)
    assert done.returncode != 0 and smallest, done.stderr[-3000:]
    record = tmp_path / "history.json"
    done = _train("--model=gcn", f"--store={tmp_path / 'cora'}", f"--memory_budget={smallest.group(1)}",
                  "--epochs=20", f"--history_json={record}")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(record.read_text())
    assert 0 < result["peak_memory_bytes"] <= 1.1 * int(smallest.group(1)), (result, smallest.group(1))


def _tool(script, *flags):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    return subprocess.run([sys.executable, str(pathlib.Path(REPO) / script), *flags], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
