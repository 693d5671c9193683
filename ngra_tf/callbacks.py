"""Keras callbacks for long runs."""

from __future__ import annotations

import os
import shutil

import keras
import numpy as np

from ngra_tf.ops.fileio import file_stats

RANDOM_STATE = "random_state.npz"


class BackupError(ValueError):
    """A backup that cannot be restored into this model (another model's, or damaged)."""


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras's BackupAndRestore, with a backup that changes all at once.

    Keras writes a backup's weights, then the epoch they belong to, over the
    last backup: a process killed between the two would resume with one
    epoch's updates applied twice, and one killed while writing the weights
    leaves a file that does not load. Here Keras writes into
    `backup_dir/staging`, which is renamed to `backup_dir/latest` once
    complete, so a run killed at any moment resumes from its last finished
    epoch. The backup also holds the model's random generators (dropout's
    seeds), which Keras's weights leave out: a resumed run draws the masks an
    uninterrupted one would, so its losses are the same. The directory is
    removed when training ends.
    """

    def __init__(self, backup_dir):
        self.directory = os.fspath(backup_dir)
        super().__init__(os.path.join(self.directory, "staging"))
        self._latest = os.path.join(self.directory, "latest")
        self._previous = os.path.join(self.directory, "previous")

    def on_train_begin(self, logs=None):
        if not os.path.isdir(self._latest) and os.path.isdir(self._previous):  # killed between the two renames
            os.replace(self._previous, self._latest)
        shutil.rmtree(self._previous, ignore_errors=True)
        shutil.rmtree(self.backup_dir, ignore_errors=True)  # a backup that a kill left half-written
        if os.path.isdir(self._latest):
            shutil.copytree(self._latest, self.backup_dir)  # Keras restores from the directory it writes
        try:
            super().on_train_begin(logs)
            saved = os.path.join(self.backup_dir, RANDOM_STATE)
            values = []
            if os.path.exists(saved):
                with np.load(saved) as arrays:
                    values = [arrays[f"state_{k}"] for k in range(len(arrays.files))]
        except Exception as error:  # Keras's (and h5py's) many ways of saying the weights do not fit
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise BackupError(f"the backup in {self.directory} does not fit this model ({reason[:200]}): it was "
                              "written by another model or other settings, or is damaged; remove it, or give "
                              "another directory") from None
        states = self._random_states()  # in model order (their names carry process-wide counters)
        if values and [v.shape for v in values] != [tuple(v.shape) for v in states]:
            raise BackupError(f"the backup in {self.directory} was written by another model ({len(values)} "
                              f"random states, this one has {len(states)}): remove it, or give another directory")
        for variable, value in zip(states, values):
            variable.assign(value)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)  # the weights and the epoch, into staging
        np.savez(os.path.join(self.backup_dir, RANDOM_STATE),
                 **{f"state_{k}": np.asarray(v.numpy()) for k, v in enumerate(self._random_states())})
        if os.path.isdir(self._latest):
            os.replace(self._latest, self._previous)
        os.replace(self.backup_dir, self._latest)
        shutil.rmtree(self._previous, ignore_errors=True)

    def _random_states(self):
        """The model's variables that are not weights: its random generators' states."""
        weights = {id(v) for v in self.model.weights}
        return [v for v in self.model.variables if id(v) not in weights]

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        shutil.rmtree(self._latest, ignore_errors=True)
        try:
            os.rmdir(self.directory)
        except OSError:  # the user's own files are in it, or it is gone
            pass


__all__ = ["BackupAndRestore", "BackupError"]


class StoreTraffic(keras.callbacks.Callback):
    """Bytes a store-backed model's epochs read from files and write to spill files (the store reader's and the
    spill files' ops count them: ngra_tf.ops.file_stats), per epoch: `read` and `written`, lists of bytes.
    Validation epochs' reads count too (a forward pass over every chunk)."""

    def __init__(self):
        super().__init__()
        self.read, self.written = [], []

    def on_epoch_begin(self, epoch, logs=None):
        file_stats(reset=True)

    def on_epoch_end(self, epoch, logs=None):
        stats = file_stats()
        self.read.append(stats["read"])
        self.written.append(stats["written"])
