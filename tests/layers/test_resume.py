"""A run interrupted at any moment resumes from its last finished epoch with the losses of an uninterrupted run.

In-process: ngra_tf.callbacks.BackupAndRestore over an interrupted fit (and over what a kill can leave
behind). On the command line (test-slow): examples/train.py --backup_dir killed with SIGKILL and run
again, in memory and from a store. tests/parallel/test_cluster.py kills a worker instead.
"""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import layer_checks as lc
import ngra_tf
from ngra_tf import recipes
from ngra_tf.graph import datasets

EPOCHS = 6


class Interrupt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt  # as Ctrl-C would, between two epochs' backups


def _fit(callbacks=(), epochs=EPOCHS, hidden=16):
    """GCN on Cora with dropout (so a resumed run must also draw the same masks); returns the History."""
    dataset = datasets.cora()
    keras.utils.set_random_seed(0)
    model = recipes.build_model("gcn", recipes.prepare_graph("gcn", dataset.graph), dataset.num_classes,
                                hidden=hidden)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
    x = dataset.dense_features(normalize=True)
    model.build(x.shape)
    train, _, _ = lc.node_masks(dataset)
    return model.fit(x, dataset.labels, sample_weight=train, epochs=epochs, verbose=0, callbacks=list(callbacks))


def test_an_interrupted_fit_resumes_with_the_losses_of_an_uninterrupted_one(tmp_path):
    expected = _fit().history["loss"]
    backup = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        _fit([ngra_tf.callbacks.BackupAndRestore(backup), Interrupt(3)])
    assert sorted(os.listdir(backup)) == ["latest"]
    # What a kill while Keras was writing the next backup leaves: a half-written staging directory.
    (backup / "staging").mkdir()
    (backup / "staging" / "latest.weights.h5").write_bytes(b"\x89HDF\r\n half")
    (backup / "staging" / "training_metadata.json").write_text('{"epoch": 5, "batch": 0}')
    with pytest.raises(ngra_tf.callbacks.BackupError, match=f"the backup in {backup} does not fit this model"):
        _fit([ngra_tf.callbacks.BackupAndRestore(backup)], hidden=8)  # another model's backup: refused, kept
    history = _fit([ngra_tf.callbacks.BackupAndRestore(backup)])
    assert history.epoch == list(range(3, EPOCHS))
    np.testing.assert_allclose(history.history["loss"], expected[3:], rtol=1e-6)
    assert not backup.exists()  # removed once training ends


@pytest.mark.slow
def test_a_kill_between_the_two_renames_resumes_from_the_previous_backup(tmp_path):
    expected = _fit().history["loss"]
    backup = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        _fit([ngra_tf.callbacks.BackupAndRestore(backup), Interrupt(2)])
    os.replace(backup / "latest", backup / "previous")  # latest renamed away, staging not yet in its place
    history = _fit([ngra_tf.callbacks.BackupAndRestore(backup)])
    assert history.epoch == list(range(2, EPOCHS))
    np.testing.assert_allclose(history.history["loss"], expected[2:], rtol=1e-6)


# ---- examples/train.py killed with SIGKILL (test-slow) ----

def _train(*flags):
    return [sys.executable, str(lc.ROOT / "examples" / "train.py"), "--patience=0", *flags]


def _kill_once_backed_up(command, backup, timeout=300):
    """Starts command, kills it (SIGKILL) once it has backed up an epoch; returns the epoch it had reached."""
    proc = subprocess.Popen(command, env=lc.subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, cwd=lc.ROOT)
    deadline = time.monotonic() + timeout
    try:
        while not (backup / "latest").is_dir():
            assert proc.poll() is None, f"train.py ended before its first backup: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no backup within the timeout"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stderr.close()
    return json.loads((backup / "latest" / "training_metadata.json").read_text())["epoch"]


@pytest.fixture(scope="module")
def cora_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "cora.store"
    done = subprocess.run([sys.executable, str(lc.ROOT / "tools" / "partition_graph.py"), "--preset=cora",
                           "--prepare=gcn", "--chunks=2", f"--output={path}", "--noprogress"],
                          capture_output=True, text=True, timeout=600, env=lc.subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return path


@pytest.mark.slow  # (a fit interrupted in memory: test_an_interrupted_fit_resumes_with_the_losses_...)
def test_train_py_killed_resumes_with_the_losses_of_an_uninterrupted_run(tmp_path, cora_store):
    flags = [f"--store={cora_store}", "--model=gcn", "--epochs=40"]
    full = tmp_path / "full.json"
    done = subprocess.run(_train(*flags, f"--history_json={full}"), capture_output=True, text=True, timeout=600,
                          env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    backup, part = tmp_path / "backup", tmp_path / "part.json"
    command = _train(*flags, f"--backup_dir={backup}", f"--history_json={part}")
    reached = _kill_once_backed_up(command, backup)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=lc.subprocess_env(),
                          cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got, expected = json.loads(part.read_text()), json.loads(full.read_text())
    first = got["epoch"][0]
    assert first >= reached > 0 and f"resumed from the backup in {backup} after epoch {first}" in done.stdout
    assert got["epoch"] == list(range(first, 40))
    for name, values in expected["history"].items():
        np.testing.assert_allclose(got["history"][name], values[first:], rtol=1e-5, atol=1e-6, err_msg=name)
    assert not backup.exists()
