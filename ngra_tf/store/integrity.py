"""Atomic file writes and checksums for stores.

Every store file is written under a temporary name in its final directory
and renamed into place once complete, so a reader never sees half a file.
Its size and zlib crc32 (computed from the bytes on disk, streamed) go into
the store's manifest, which is written last the same way. A file is
verified against its manifest entry the first time a process reads it;
`VerifiedFiles` remembers that per file identity (device, inode, size,
modification time), so a file replaced later is verified again.
"""

from __future__ import annotations

import json
import os
import threading
import zlib

_READ_BLOCK = 1 << 22
TEMPORARY_MARK = ".tmp-"


def crc32_file(path, block: int = _READ_BLOCK) -> int:
    """zlib.crc32 of a file's bytes, read in blocks."""
    crc = 0
    with open(path, "rb") as stream:
        while True:
            data = stream.read(block)
            if not data:
                return crc
            crc = zlib.crc32(data, crc)


def temporary_path(final_path) -> str:
    """Where a file is written before it is renamed to final_path (same directory: rename is atomic)."""
    final_path = os.fspath(final_path)
    head, tail = os.path.split(final_path)
    return os.path.join(head, f".{tail}{TEMPORARY_MARK}{os.getpid()}")


def commit(temporary, final_path) -> dict:
    """Renames a complete temporary file into place; returns its manifest entry (bytes, crc32)."""
    entry = {"bytes": os.path.getsize(temporary), "crc32": crc32_file(temporary)}
    os.replace(temporary, final_path)
    return entry


def write_json_atomically(path, value) -> None:
    """Writes JSON to path through a temporary file, flushed to disk before the rename."""
    temporary = temporary_path(path)
    try:
        with open(temporary, "w") as stream:
            json.dump(value, stream, indent=1)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:  # a value that is not JSON leaves nothing behind
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def file_identity(path):
    """(device, inode, size, mtime_ns) of a file: what a verification is valid for."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class VerifiedFiles:
    """The files (by identity) this process has already checked against a manifest. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._verified = set()

    def __contains__(self, identity) -> bool:
        with self._lock:
            return identity in self._verified

    def add(self, identity) -> None:
        with self._lock:
            self._verified.add(identity)


VERIFIED = VerifiedFiles()
