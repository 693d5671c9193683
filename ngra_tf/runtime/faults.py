"""Faults that end a store-backed run, as errors that name the file or directory and say what to do.

A disk host tier needs room: `check_spill_space` compares the plan's spill
bytes with the spill directory's free space before any step runs. What
still fails arrives from inside a traced step as a tf.errors.OpError, whose
message buries the op's one line in a trace; `translate` turns one that
names a spill file (a write that failed: a full disk, a file size limit, an
I/O error) or a store file (changed since it was verified: converted again
or replaced) into a TrainingFault with a one-line message.
"""

from __future__ import annotations

import os
import re
import shutil

from ngra_tf.runtime.resident import format_bytes


class TrainingFault(RuntimeError):
    """A fault that ends training; the message is one line naming the file or directory and what to do."""

    # Keras rewrites an error raised inside a layer's call into a new one whose message adds the call's arguments
    # on more lines, unless it carries this mark (its sign that the info is already in).
    _keras_call_info_injected = True


class SpillSpaceError(TrainingFault):
    """The spill directory has less free space than the disk host tier needs."""


class SpillDirectoryError(TrainingFault):
    """The spill directory cannot hold the host tier: it is a file, or a directory cannot be made in it."""


class SpillWriteError(TrainingFault):
    """A spill file of the host tier could not be written (or read back)."""


class StoreChangedError(TrainingFault):
    """A store file changed (or vanished) after it was verified: the store was converted again or a file replaced."""


def free_bytes(directory) -> int:
    """Free bytes on the file system of `directory` (or of its nearest existing parent, if it is not made yet)."""
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return shutil.disk_usage(existing).free


def check_spill_space(directory, needed: int):
    free = free_bytes(directory)
    if needed > free:
        raise SpillSpaceError(
            f"spill directory {directory} has {format_bytes(free)} ({free} bytes) free; the host tier needs "
            f"{format_bytes(needed)} ({needed} bytes) there: free space, pass a spill directory on a disk with more "
            "room (spill_dir=, train.py --spill_dir), or without one a memory budget large enough to keep the host "
            "tier in memory")


# The op's own line, without TensorFlow's prefixes ("(0) FAILED_PRECONDITION: ", "{{function_node f}} ").
_PREFIX = re.compile(r"^\s*(\(\d+\)\s*)?([A-Z][A-Za-z_ ]*:\s+)?(\{\{function_node [^}]*\}\}\s*)?")


def translate(error, spill_files, spill_directory, store) -> TrainingFault | None:
    """The fault for a failed step's tf.errors.OpError whose message names one of spill_files or a file of
    store (a Store or None); None for any other error."""
    lines = [_PREFIX.sub("", line).strip() for line in str(getattr(error, "message", error)).splitlines()]
    for line in lines:
        if any(path in line for path in spill_files):
            return SpillWriteError(
                f"the host tier failed in spill directory {spill_directory} "
                f"({format_bytes(free_bytes(spill_directory))} free): {line}. Free space there (or raise the file "
                "size limit, ulimit -f), or pass a spill directory on a disk with more room (spill_dir=, train.py "
                "--spill_dir)")
    root = os.path.join(store.path, "") if store is not None else None
    for line in lines:
        if root is None or root not in line:
            continue
        if not any(sign in line for sign in _CHANGED):  # (every file was verified: the disk failed)
            return TrainingFault(f"store {store.path} could not be read while training: {line}")
        return StoreChangedError(
            f"store {store.path} changed while training: {line}. It was converted again or a file replaced, so "
            "training stopped rather than mix old and new data; train again on the store as it is now (convert "
            "into a new directory to leave a running trainer's store alone)")
    return None


# What the read ops say of a file changed since it was verified (replaced, rewritten, truncated or removed).
_CHANGED = ("changed since it was verified", "truncated or replaced", "No such file or directory", "needs bytes")


__all__ = ["SpillSpaceError", "SpillWriteError", "StoreChangedError", "TrainingFault", "check_spill_space",
           "free_bytes", "translate"]
