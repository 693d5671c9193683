"""Faults around store-backed training: a full or failing spill directory, signals, a store changed under a
running trainer, two trainers on one store. Each ends in a named error (one line from examples/train.py) and
leaves no spill file behind."""

import collections
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.runtime import faults
from ngra_tf.store import open_store, write_store

from test_stream import _model, _problem  # (tests/runtime is on sys.path under pytest)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "examples", "train.py")
CONVERT = [sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=pubmed", "--scale=0.01",
           "--prepare=gcn", "--chunks=2", "--noprogress"]


def _fit(model, store, epochs=1, callbacks=()):
    return model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"),
                     epochs=epochs, verbose=0, callbacks=list(callbacks))


def _store(tmp_path, fmt="npy"):
    graph, arrays = _problem("gcn")
    return write_store(tmp_path / "store", graph, 2, arrays, format=fmt)


# ---- the host tier on disk, in process ----


def test_a_spill_directory_we_made_goes_whole(tmp_path):
    # (A user's own spill directory keeps its other files: the train.py tests below.)
    store = _store(tmp_path)
    made = tmp_path / "made" / "spill"  # neither exists
    seen = []
    spilled = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda *_: seen.append([name for _, _, names in os.walk(made) for name in names]))
    model = _model("gcn", store, spill_dir=made)
    for _ in range(2):  # the second run's traced steps write into it again: it is made again for the run
        _fit(model, store, callbacks=[spilled])
        assert seen[-1] and all(name.endswith(".bin") for name in seen[-1])
        assert not (tmp_path / "made").exists()


def test_a_spill_directory_made_for_one_model_stays_while_another_uses_it(tmp_path):
    store = _store(tmp_path)
    shared = tmp_path / "made" / "spill"
    first = _model("gcn", store, spill_dir=shared)  # makes it
    _fit(first, store)
    second = _model("gcn", store, spill_dir=shared)
    # The first one's cleanup (its finalizer's too, whenever it runs) removes its own files, and the directories
    # made for it only once they are empty: not while the second one's run writes inside.
    cleanup = keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: first.executor().close())
    _fit(second, store, epochs=2, callbacks=[cleanup])
    assert second.optimizer.iterations.numpy() == 2
    assert not (tmp_path / "made").exists()  # (then the second's own cleanup: empty, removed)


def test_a_spill_directory_without_room_fails_before_training(tmp_path, monkeypatch):
    store = _store(tmp_path)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    model = _model("gcn", store, spill_dir=tmp_path / "spill")
    with pytest.raises(faults.SpillSpaceError) as raised:
        _fit(model, store)
    message = str(raised.value)
    assert f"spill directory {tmp_path / 'spill'} has 1000 B (1000 bytes) free" in message
    needed = re.search(r"the host tier needs [^(]+\((\d+) bytes\) there", message)
    assert needed and int(needed.group(1)) > 1000, message  # the bytes its traced steps' files take
    assert model.optimizer.iterations.numpy() == 0
    assert not (tmp_path / "spill").exists()


@pytest.mark.parametrize("where", ["the file", "below the file"])
def test_a_spill_directory_that_cannot_be_made_fails_in_one_line(tmp_path, where):
    store = _store(tmp_path)
    user_file = tmp_path / "notes.txt"
    user_file.write_text("the user's")
    spill = user_file if where == "the file" else user_file / "spill"
    model = _model("gcn", store, spill_dir=spill)
    with pytest.raises(faults.SpillDirectoryError) as raised:
        _fit(model, store)
    message = str(raised.value)
    assert message.startswith(f"spill directory {spill}: cannot make the host tier's directory in it ("), message
    assert "\n" not in message and "pass a directory you can write" in message, message
    assert model.optimizer.iterations.numpy() == 0
    assert user_file.read_text() == "the user's"


# ---- a store changed under a running trainer, in process ----


def _replace_keeping_size_and_mtime(path):
    """A new file with the same bytes, size and mtime at `path` (what a fast re-conversion may leave)."""
    before = os.stat(path)
    time.sleep(0.02)
    shutil.copyfile(path, f"{path}.new")
    os.utime(f"{path}.new", ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(f"{path}.new", path)
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


@pytest.mark.parametrize("fmt", [pytest.param("npy", marks=pytest.mark.slow), "hdf5"])  # (npy: test_fileio too)
def test_a_store_file_replaced_while_training_stops_it(tmp_path, fmt):
    store = _store(tmp_path, fmt)
    victim = next(path for path in json.loads((tmp_path / "store" / "manifest.json").read_text())["files"]
                  if path.startswith("chunks/"))
    model = _model("gcn", store)
    weights = []

    def replace(epoch, logs):
        if epoch == 0:
            weights.extend(model.get_weights())
            _replace_keeping_size_and_mtime(tmp_path / "store" / victim)

    with pytest.raises(faults.StoreChangedError) as raised:
        _fit(model, store, epochs=3, callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=replace)])
    message = str(raised.value)
    assert "\n" not in message and f"store {store.path} changed while training" in message
    assert os.path.join(store.path, victim) in message and "changed since it was verified" in message
    for want, got in zip(weights, model.get_weights()):  # epoch 2 stopped at its first read of the file
        np.testing.assert_array_equal(got, want)


# ---- examples/train.py in a subprocess ----


@pytest.fixture(scope="module")
def pubmed_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("faults") / "pubmed.store")
    done = subprocess.run([*CONVERT, f"--output={path}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return path


def _start(*flags, preexec_fn=None):
    return subprocess.Popen([sys.executable, TRAIN, "--hidden=16", *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=preexec_fn)


def _wait_for_spill_files(process, directory, keep=()):
    """Until the run has written spill files into directory (then it is training)."""
    deadline = time.monotonic() + 240
    while not set(os.listdir(directory) if os.path.isdir(directory) else ()) - set(keep):
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no spill file appeared"
        time.sleep(0.1)


def _one_line_exit(process, timeout=120):
    """stderr's last line, after checking the run failed with it and no traceback."""
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode not in (0, None) and "Traceback" not in stderr, stderr[-3000:]
    assert "Fatal Python error" not in stderr, stderr[-3000:]  # (a crash's last line names no cause)
    return stderr.strip().splitlines()[-1]


def _limit_file_size():
    # Writes past 64 KiB fail with EFBIG (SIGXFSZ ignored), like a disk filling up, root or not.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))


def test_train_py_names_a_spill_write_that_fails(tmp_path, pubmed_store):
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "notes.txt").write_text("the user's")
    process = _start(f"--store={pubmed_store}", f"--spill_dir={spill}", "--epochs=2", "--hidden=256",
                     preexec_fn=_limit_file_size)
    line = _one_line_exit(process)
    assert line.startswith(f"train.py: the host tier failed in spill directory {spill} ("), line
    assert "cannot write" in line and "bytes at offset 0 of" in line and "File too large" in line, line
    assert "written" in line and "--spill_dir" in line, line
    assert os.listdir(spill) == ["notes.txt"]


@pytest.mark.slow
def test_train_py_says_in_one_line_that_the_spill_directory_is_too_small(tmp_path, pubmed_store):
    # train.py run with shutil.disk_usage saying 1000 bytes are free.
    fake = ("import collections, runpy, shutil, sys; usage = collections.namedtuple('usage', 'total used free'); "
            "shutil.disk_usage = lambda path: usage(10**6, 10**6 - 1000, 1000); sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    spill = tmp_path / "spill"
    done = subprocess.run([sys.executable, "-c", fake, TRAIN, f"--store={pubmed_store}", f"--spill_dir={spill}",
                           "--epochs=2"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"train.py: spill directory {spill} has 1000 B (1000 bytes) free; the host tier "
                           "needs "), line
    assert not spill.exists()


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                    pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow)])
def test_train_py_stopped_by_a_signal_removes_its_spill_files(tmp_path, pubmed_store, signum):
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "notes.bin").write_text("the user's")
    process = _start(f"--store={pubmed_store}", f"--spill_dir={spill}", "--epochs=100000")
    _wait_for_spill_files(process, spill, keep=["notes.bin"])
    time.sleep(0.5)  # well into training
    process.send_signal(signum)
    line = _one_line_exit(process)
    assert line.startswith("train.py: stopped by " + ("SIGTERM" if signum == signal.SIGTERM else "Ctrl-C")), line
    assert os.listdir(spill) == ["notes.bin"]


@pytest.mark.slow
def test_train_py_stops_when_its_store_is_converted_again(tmp_path, pubmed_store):
    store = tmp_path / "store"
    shutil.copytree(pubmed_store, store)
    spill = tmp_path / "spill"  # made by the run: removed whole
    process = _start(f"--store={store}", f"--spill_dir={spill}", "--epochs=100000")
    _wait_for_spill_files(process, spill)
    done = subprocess.run([*CONVERT, f"--output={store}", "--overwrite"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = _one_line_exit(process)
    assert line.startswith(f"train.py: store {store} changed while training: "), line
    assert "convert into a new directory" in line
    assert not spill.exists()
    open_store(store).verify()  # the conversion itself finished


def test_train_py_names_a_damaged_store_file_in_one_line(tmp_path, pubmed_store):
    # The labels are read lazily, in fit: a damaged file used to end in the store's ValueError and a traceback.
    store = tmp_path / "store"
    shutil.copytree(pubmed_store, store)
    damaged = sorted((store / "vertex" / "labels").iterdir())[-1]
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF
    damaged.write_bytes(bytes(data))
    line = _one_line_exit(_start(f"--store={store}", "--epochs=2"))
    relative = damaged.relative_to(store)
    assert line.startswith(f"train.py: store {store}: file {relative} (interval "), line
    assert "fails its checksum" in line and "corrupted" in line, line


def test_train_py_refuses_chunks_other_than_the_stores_in_one_line(pubmed_store):
    line = _one_line_exit(_start(f"--store={pubmed_store}", "--chunks=3"))
    assert line == (f"--chunks=3, but {pubmed_store} is partitioned into 2 x 2 chunks: leave --chunks out, or "
                    "convert the graph again with --chunks=3"), line


@pytest.mark.slow
def test_two_trainers_read_one_store_at_once(tmp_path, pubmed_store):
    def history(process, record):
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        return json.loads(record.read_text())["history"]

    # Both also spill into one directory (each run into a directory of its own inside it: when their files
    # shared names, concurrent runs overwrote each other's and their losses differed by up to 0.025).
    spill = tmp_path / "spill"
    spill.mkdir()
    flags = [f"--store={pubmed_store}", "--epochs=20", f"--spill_dir={spill}"]
    alone = history(_start(*flags, f"--history_json={tmp_path / 'alone.json'}"), tmp_path / "alone.json")
    both = [_start(*flags, f"--history_json={tmp_path / f'{k}.json'}") for k in range(2)]
    for k, process in enumerate(both):
        got = history(process, tmp_path / f"{k}.json")
        for name in alone:
            np.testing.assert_allclose(got[name], alone[name], rtol=1e-6, err_msg=name)
    assert os.listdir(spill) == []


def test_op_errors_become_one_line_faults():
    class Store:
        path = "/data/s.store"

    def fault(message, files=(), store=Store()):
        return faults.translate(tf.errors.UnknownError(None, None, message), list(files), "/spill", store)

    trace = "Graph execution error:\n\nDetected at node x defined at (most recent call last):\n  File \"a.py\"\n\n"
    got = fault(trace + "  (0) RESOURCE_EXHAUSTED: {{function_node f}} cannot write 8 bytes at offset 16 of "
                "/spill/00001_h.bin (4 written); No space left on device\n\t [[{{node w}}]]", ["/spill/00001_h.bin"])
    assert isinstance(got, faults.SpillWriteError) and "\n" not in str(got)
    assert str(got).startswith("the host tier failed in spill directory /spill (")
    assert "free): cannot write 8 bytes at offset 16 of /spill/00001_h.bin (4 written); No space left" in str(got)
    got = fault(trace + "/data/s.store/chunks/00000-00001.h5 changed since it was verified: its inode ...")
    assert isinstance(got, faults.StoreChangedError)
    assert str(got).startswith("store /data/s.store changed while training: /data/s.store/chunks/00000-00001.h5 "
                               "changed since it was verified")
    got = fault(trace + "cannot read /data/s.store/order.npy at byte 8; Input/output error")
    assert type(got) is faults.TrainingFault and "could not be read while training" in str(got)
    assert fault(trace + "/data/other.store/x.npy changed since it was verified") is None
    assert fault(trace + "/data/s.store/x.npy changed", store=None) is None
