"""Store-backed (streamed) training equals in-memory training, and fails cleanly on bad input."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf import recipes
from ngra_tf.ops import copy_stats
from ngra_tf.runtime.plan.budget import CACHE_FACTOR
from ngra_tf.store import open_store, write_store

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "layers"))
from test_training import example, usage_error  # noqa: E402,F401  (train.py in-process; `example` is a fixture)
NUM_VERTICES, NUM_EDGES, WIDTH, CLASSES = 90, 500, 6, 3
# (P, format, spill policy, host tier): every model runs each.
CASES = [(1, "npy", "recompute", "memory"), (3, "npy", "spill", "disk"), (4, "npy", "recompute", "disk"),
         (3, "hdf5", "recompute", "memory"), (4, "hdf5", "spill", "memory")]


def _problem(model, seed=0):
    rng = np.random.default_rng(seed)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, NUM_VERTICES, NUM_EDGES), rng.integers(0, NUM_VERTICES, NUM_EDGES),
                                     NUM_VERTICES)
    arrays = {"features": rng.normal(size=(NUM_VERTICES, WIDTH)).astype(np.float32),
              "labels": rng.integers(0, CLASSES, NUM_VERTICES),
              "train_mask": rng.random(NUM_VERTICES) < 0.6,
              "val_mask": rng.random(NUM_VERTICES) < 0.3}
    return recipes.prepare_graph(model, graph), arrays


def _model(model, graph, dropout=0.0, **options):
    recipe = dataclasses.replace(recipes.RECIPES[model], dropout=dropout)
    keras.utils.set_random_seed(1)
    built = recipes.build_model(model, graph, CLASSES, hidden=5, recipe=recipe, num_features=WIDTH, **options)
    built.compile(optimizer=keras.optimizers.Adam(0.05), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    return built


def _pair(tmp_path, model, num_parts, fmt="npy", dropout=0.0, **options):
    """An in-memory model and a store-backed one over the same graph, with the same initial weights."""
    graph, arrays = _problem(model)
    memory = _model(model, graph, dropout, chunks=num_parts)
    memory.build(arrays["features"].shape)
    store = write_store(tmp_path / "store", graph, num_parts, arrays, format=fmt)
    streamed = _model(model, store, dropout, **options)
    streamed.build(store.array("features").shape)
    streamed.set_weights(memory.get_weights())
    return memory, streamed, store, arrays


def _fit_both(memory, streamed, store, arrays, epochs=3):
    expected = memory.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"], epochs=epochs,
                          verbose=0).history
    got = streamed.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"),
                       epochs=epochs, verbose=0).history
    return expected, got


def _assert_same_training(memory, streamed, expected, got):
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for want, have in zip(memory.get_weights(), streamed.get_weights()):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=2e-5)


# Every model with one of the cases, rotating so that each case meets two or three kinds of model (all 60 took
# 25 minutes of a 2-core CI machine, two a model 10); gcn with the host tier on disk stays in make test. The
# functional models (appnp, resgcn, jknet) stream from stores in test_functional_models.
FUNCTIONAL = ("appnp", "resgcn", "jknet")
STREAM_PAIRS = [(model, *CASES[(i + 2) % len(CASES)]) for i, model in enumerate(recipes.RECIPES)
                if model not in FUNCTIONAL]


@pytest.mark.parametrize("model,num_parts,fmt,spill,host", STREAM_PAIRS)
def test_streamed_training_equals_in_memory(tmp_path, model, num_parts, fmt, spill, host):
    options = {"spill": spill, "spill_dir": str(tmp_path / "spill") if host == "disk" else None}
    memory, streamed, store, arrays = _pair(tmp_path, model, num_parts, fmt, **options)
    executor = streamed.executor()
    executor.tile_bytes = 100  # several row tiles per interval: per-vertex work runs tile by tile
    assert executor.host == host
    expected, got = _fit_both(memory, streamed, store, arrays)
    _assert_same_training(memory, streamed, expected, got)
    np.testing.assert_allclose(streamed.predict(store.array("features"), verbose=0),
                               memory.predict(arrays["features"], verbose=0), rtol=1e-4, atol=1e-4)
    if host == "disk":
        assert not (tmp_path / "spill").exists()  # every spilled block is dropped once used, and the directory made


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_dropout_draws_are_replayed_in_backward(tmp_path, model):
    # At P = 1 a streamed layer sees the rows in the user's order, so its dropout draws are the in-memory
    # model's; backward recomputes with the same draws only if it replays each step's seed state.
    memory, streamed, store, arrays = _pair(tmp_path, model, 1, dropout=0.5)
    assert store.partition().identity_order
    expected, got = _fit_both(memory, streamed, store, arrays)
    _assert_same_training(memory, streamed, expected, got)


@pytest.mark.parametrize("model", ["gcn", "mpgcn"])  # a sum and a max model (ggcn and ggnn: 40 s more in CI)
def test_selective_scheduling_gives_the_same_result(tmp_path, model):
    # selective=1: every chunk that leaves any source row unused copies only the rows it uses.
    memory, streamed, store, arrays = _pair(tmp_path, model, 4, selective=1.0)
    expected, got = _fit_both(memory, streamed, store, arrays, epochs=2)
    _assert_same_training(memory, streamed, expected, got)
    assert streamed.executor().selective_rows_saved > 0


@pytest.mark.parametrize("schedule,model,spill", [("stage", "mpgcn", "recompute"), ("stage", "gat", "spill"),
                                                   ("dest-order", "gcn", "recompute"),
                                                   ("dest-order", "gat", "recompute")])
def test_every_schedule_streams_like_in_memory(tmp_path, schedule, model, spill):
    # schedule= orders a store's chunk steps too: stage keeps each A[j] in the host tier until every chunk is
    # done, dest-order loads and stores it around every chunk step.
    memory, streamed, store, arrays = _pair(tmp_path, model, 3, schedule=schedule, spill=spill)
    assert streamed.executor().schedule == schedule
    expected, got = _fit_both(memory, streamed, store, arrays, epochs=2)
    _assert_same_training(memory, streamed, expected, got)


def test_without_overlap_steps_run_one_at_a_time_and_train_alike(tmp_path):
    memory, streamed, store, arrays = _pair(tmp_path, "gcn", 3, overlap=False)
    assert streamed.executor().parallel == 1  # every loop's parallel_iterations: no read-ahead
    expected, got = _fit_both(memory, streamed, store, arrays, epochs=2)
    _assert_same_training(memory, streamed, expected, got)


def test_spill_and_recompute_give_the_same_result(tmp_path):
    results = []
    for spill in ("spill", "recompute"):
        _, streamed, store, _ = _pair(tmp_path / spill, "mpgcn", 4, spill=spill)  # max chains: spilled inits
        streamed.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"),
                     epochs=2, verbose=0)
        results.append(streamed.get_weights())
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_evaluate_predict_and_labels_in_user_order(tmp_path):
    memory, streamed, store, arrays = _pair(tmp_path, "gcn", 3)
    mask = arrays["val_mask"]
    expected = memory.evaluate(arrays["features"], arrays["labels"], sample_weight=mask, verbose=0, return_dict=True)
    # Labels and masks may be numpy arrays in the user's order, like an in-memory model's.
    got = streamed.evaluate(store.array("features"), arrays["labels"], sample_weight=mask, verbose=0,
                            return_dict=True)
    for name in expected:
        assert got[name] == pytest.approx(expected[name], rel=1e-5)


def test_a_host_device_copies_nothing(tmp_path):
    """Without a GPU the device is the host: a store-backed step's reads land where the kernels read them, so
    no copy_h2d or copy_d2h runs (over several devices, logical or not, every move is a counted copy:
    test_stream_ring)."""
    _, streamed, store, _ = _pair(tmp_path, "gcn", 3)
    copy_stats(reset=True)
    streamed.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"), epochs=1,
                 verbose=0)
    assert copy_stats() == {}


def test_callbacks_and_save_load_refer_to_the_store(tmp_path):
    _, streamed, store, arrays = _pair(tmp_path, "gcn", 3)
    path = str(tmp_path / "model.keras")
    history = streamed.fit(
        store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"), epochs=4,
        validation_data=(store.array("features"), store.array("labels"), store.array("val_mask")), verbose=0,
        callbacks=[keras.callbacks.EarlyStopping("val_loss", patience=10, restore_best_weights=True),
                   keras.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=False),
                   keras.callbacks.TensorBoard(str(tmp_path / "tb"))])
    assert len(history.history["val_loss"]) == 4
    assert os.listdir(tmp_path / "tb")
    streamed.save(path)
    assert os.path.getsize(path) < 200_000  # weights and the store's path, not its data
    loaded = keras.models.load_model(path)
    assert loaded.store.path == store.path
    np.testing.assert_allclose(loaded.predict(loaded.store.array("features"), verbose=0),
                               streamed.predict(store.array("features"), verbose=0), rtol=1e-6, atol=1e-6)
    loaded.fit(loaded.store.array("features"), loaded.store.array("labels"),
               sample_weight=loaded.store.array("train_mask"), epochs=1, verbose=0)


def test_budget_too_small_fails_at_once(tmp_path):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    model = _model("gcn", store, memory_budget="1MB")
    with pytest.raises(ValueError, match=r"memory budget .* is too small .* the smallest budget that works is"):
        model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"), epochs=1,
                  verbose=0)
    assert model.optimizer.iterations.numpy() == 0


def test_budget_picks_the_host_tier(tmp_path):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    roomy = _model("gcn", store, memory_budget="4GB")
    roomy.build(store.array("features").shape)
    assert roomy.executor().host == "memory"
    plan = roomy.memory_plan()
    tight = _model("gcn", store, memory_budget=plan.working_set + plan.kept // 2)
    tight.build(store.array("features").shape)
    assert tight.executor().host == "disk"
    text = tight.explain(print_fn=None)
    assert "working set (estimate)" in text and "spill directory on disk" in text


@pytest.mark.parametrize("model,spill", [("gat", "spill")])  # (mpgcn with recompute: 93 s more in CI)
def test_the_chunk_cache_reads_the_least_the_schedule_needs(tmp_path, model, spill):
    """Under a budget the chunk cache keeps the chunks and feature tiles a training step reads again (Belady's
    plan): with room for all of them, no epoch after the first reads a byte; with room for some, every epoch
    reads exactly what the plan says, the least its schedule needs there; with none, every pass reads again.
    Training equals training in memory either way (and evaluation, which only looks chunks up)."""
    from ngra_tf.ops import cache_stats, file_stats  # noqa: PLC0415

    graph, arrays = _problem(model)
    probe_store = write_store(tmp_path / "probe", graph, 3, arrays)
    probe = _model(model, probe_store, spill=spill)
    probe.build(probe_store.array("features").shape)
    smallest = probe.memory_plan().working_set + probe.memory_plan().kept
    everything = sum(probe.memory_plan().chunk_bytes.values()) + NUM_VERTICES * WIDTH * 4  # chunks + features
    for room in (0, everything // 2, everything):
        memory, streamed, store, _ = _pair(tmp_path / f"{room}", model, 3, spill=spill,
                                           memory_budget=smallest + CACHE_FACTOR * room)  # (what room costs)
        plan = streamed.memory_plan().cache
        assert plan is not None and plan.capacity == room and plan.cached_bytes <= room
        if room == 0:
            assert plan.reads_steady == plan.reads_first > 0
        elif room == everything:
            assert plan.reads_steady == 0 and plan.reads_first == everything
        else:
            assert 0 < plan.reads_steady < plan.reads_first
        expected = memory.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"], epochs=3,
                              verbose=0).history
        got, reads = {}, []
        for _ in range(3):
            file_stats(reset=True)
            history = streamed.fit(store.array("features"), store.array("labels"),
                                   sample_weight=store.array("train_mask"), epochs=1, verbose=0).history
            reads.append(file_stats()["read"])
            got = {name: got.get(name, []) + history[name] for name in history}
        assert reads == [plan.reads_first, plan.reads_steady, plan.reads_steady], (room, reads)
        _assert_same_training(memory, streamed, expected, got)
        np.testing.assert_allclose(streamed.predict(store.array("features"), verbose=0),
                                   memory.predict(arrays["features"], verbose=0), rtol=1e-4, atol=1e-4)
        assert (cache_stats(streamed.executor().residency.cache)["hits"] > 0) == (room > 0)


@pytest.mark.parametrize("options,message", [
    ({"memory_budget": "1GB"}, "memory_budget applies to a store-backed model"),
    ({"spill": "sometimes"}, "spill must be one of"),
])
def test_bad_options_for_in_memory_graphs(options, message):
    graph, _ = _problem("gcn")
    with pytest.raises(ValueError, match=message):
        ngra_tf.GraphModel(graph, [ngra_tf.layers.GCN(2)], **options)


def test_bad_inputs_for_a_store_backed_model(tmp_path):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    with pytest.raises(ValueError, match="partitioned into 2"):
        ngra_tf.GraphModel(store, [ngra_tf.layers.GCN(2)], chunks=3)
    model = _model("gcn", store)
    with pytest.raises(ValueError, match=r"pass store.array\(name\)"):
        model.fit(arrays["features"], arrays["labels"], epochs=1, verbose=0)
    with pytest.raises(ValueError, match="labels must lie in"):
        model.fit(store.array("features"), arrays["labels"] + 5, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="one entry per vertex"):
        model.fit(store.array("features"), arrays["labels"][:-1], epochs=1, verbose=0)
    other = write_store(tmp_path / "other", graph, 2, arrays)
    with pytest.raises(ValueError, match="reads its features from its store"):
        model.predict(other.array("features"))


def test_a_corrupted_store_fails_with_the_file_named(tmp_path):
    graph, arrays = _problem("gcn")
    write_store(tmp_path / "store", graph, 2, arrays)
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    victim = next(path for path in manifest["files"] if "csc_src" in path or "chunk" in path)
    with open(tmp_path / "store" / victim, "r+b") as stream:
        stream.seek(-1, os.SEEK_END)
        byte = stream.read(1)
        stream.seek(-1, os.SEEK_END)
        stream.write(bytes([byte[0] ^ 0xFF]))
    store = open_store(tmp_path / "store")
    model = _model("gcn", store)
    with pytest.raises(ValueError, match="fails its checksum"):
        model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"), epochs=1,
                  verbose=0)


def _train(*flags, timeout=600):
    return subprocess.run([sys.executable, os.path.join(REPO, "examples", "train.py"), *flags], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def preset_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("preset") / "rs.store")
    done = subprocess.run([sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=reddit-small",
                           "--scale=0.1", "--prepare=gcn", "--chunks=4", f"--output={path}", "--noprogress"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize("model", [["--model=gcn"]], ids=["gcn"])  # (resgcn and appnp: 2 minutes more in CI)
def test_train_py_stays_within_the_smallest_budget_it_accepts(tmp_path, preset_store, model):
    """Too small a budget fails before any work, naming the smallest that works; training under exactly that
    one (the host tier then spills to disk) peaks within it + 10% over 20 epochs (a long run must hold it too:
    tools/soak.py): for a stack and for functional models, whose kept values (residual inputs, APPNP's h) and
    their summed gradients the budget must count."""
    done = _train(*model, f"--store={preset_store}", "--memory_budget=2MB", "--epochs=1", "--hidden=32")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    smallest = re.search(r"the smallest budget that works is [^(]*\((\d+) bytes\)", done.stderr)
    assert smallest, done.stderr[-3000:]
    budget = int(smallest.group(1))
    record = tmp_path / "history.json"
    done = _train(*model, f"--store={preset_store}", f"--memory_budget={budget}", "--epochs=20",
                  "--hidden=32", f"--history_json={record}", "--explain")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in a spill directory on disk" in done.stdout
    result = json.loads(record.read_text())
    assert len(result["history"]["loss"]) == 20
    assert 0 < result["peak_memory_bytes"] <= 1.1 * budget, (result["peak_memory_bytes"], budget)


def test_train_py_reports_what_each_epoch_read_against_the_plans_least(tmp_path, preset_store):
    """Without validation (--validation_freq=0), a store-backed epoch reads what the chunk cache's plan says a
    training step reads, and spill files what was written to them (each read back once here): train.py
    prints both and records them per epoch."""
    record = tmp_path / "history.json"
    done = _train("--model=gcn", f"--store={preset_store}", "--memory_budget=1GB", "--epochs=3",
                  "--validation_freq=0", f"--history_json={record}")
    assert done.returncode == 0, done.stderr[-3000:]
    line = re.search(r"read from the store and spill files: first epoch .*; then .*/epoch, median of 2; a "
                     r"training step's least at this budget .* \(the store's .* by the chunk cache's plan", done.stdout)
    assert line, done.stdout
    result = json.loads(record.read_text())
    assert "val_loss" not in result["history"] and len(result["store_read_bytes"]) == 3
    store = open_store(preset_store)
    model = recipes.build_model("gcn", store, num_classes=store.num_classes(), memory_budget="1GB")
    model.build(store.array("features").shape)
    plan = model.memory_plan()
    assert plan.cache is not None and plan.host == "memory"  # (1 GB: the cache holds the store)
    assert result["store_read_bytes"] == [plan.cache.reads_first, plan.cache.reads_steady, plan.cache.reads_steady]
    assert result["spill_written_bytes"] == [0, 0, 0]


@pytest.mark.parametrize("flags,message", [
    (["--memory_budget=256MB"], "--memory_budget applies to training from a store"),
    (["--store=/nonexistent/store", "--memory_budget=lots"], "cannot read 'lots' as a memory size"),
    (["--store=/nonexistent/store", "--dataset=cora"], "--dataset and --store both name the data"),
    (["--model=ggnn", "--store=/nonexistent/store"], "ggnn needs edge types"),
])
def test_train_py_store_flags(example, flags, message):
    # Checked before the store is opened (tests/layers/test_training.py runs one usage error on the command line).
    assert message in usage_error(example, *flags)


def test_train_py_names_a_missing_store(example):
    from absl import app  # noqa: PLC0415

    example.FLAGS(["train.py", "--store=/nonexistent/store"])
    example.validate_flags()  # the store is opened with the data, after TensorFlow starts
    with pytest.raises(app.UsageError, match="--store: .*no store at"):
        example.load_store("/nonexistent/store")


def test_the_device_tier_is_the_default_device(tmp_path):
    # A GPU machine runs the same code on /GPU:0 and reads its peak from TensorFlow; here it is the CPU.
    from ngra_tf.runtime import resident

    assert resident.device_tier() == "/CPU:0"
    assert resident.device_peak_bytes("/CPU:0") is None
    _, streamed, store, _ = _pair(tmp_path, "gcn", 2)
    logits = streamed(tf.constant(["features"]))
    assert "CPU:0" in logits.device


@pytest.mark.parametrize("fmt", ["npy"])  # (the edge ids' HDF5 reads: test_store)
def test_attention_dropout_trains_alike_from_a_store_and_in_memory_whatever_the_chunking(tmp_path, fmt):
    """GAT's attention dropout draws at the user's edge ids: a P = 3 store (ids read from its files) and a whole
    graph in memory drop the same weights, so they train alike; fused, with no other dropout."""
    graph, arrays = _problem("gat")
    options = dict(attention_dropout=0.6)
    memory = _model("gat", graph, chunks=1, **options)
    memory.build(arrays["features"].shape)
    store = write_store(tmp_path / "store", graph, 3, arrays, format=fmt)
    streamed = _model("gat", store, spill="recompute", **options)
    streamed.build(store.array("features").shape)
    streamed.set_weights(memory.get_weights())
    expected, got = _fit_both(memory, streamed, store, arrays)
    _assert_same_training(memory, streamed, expected, got)
    assert "attention (online softmax)" in streamed.explain()
    no_dropout = _model("gat", graph, chunks=1, attention_dropout=0.0)
    no_dropout.build(arrays["features"].shape)
    no_dropout.set_weights(memory.get_weights()[:len(no_dropout.get_weights())])
    assert not np.allclose(no_dropout.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"],
                                          epochs=3, verbose=0).history["loss"], expected["loss"])
