"""The spill directory: where a disk host tier's files live, from the first traced step to the end of a run.

A disk array (ngra_tf.runtime.blocks, home "disk") is one file, named here:
every traced call (a stage's forward, its backward) gets a name prefix of its
own, and each array it makes a file under it, so no other array rewrites a
file while an earlier reader of it may still run (reads are ordered only
after the writes whose tokens they take). A call traced once per signature
takes its prefix as an argument, so every layer's call writes its own files. The files live in a
directory of this executor's own (`ngra-spill-XXXX`) inside `spill_dir`, or
the system's temporary directory, so two trainers or two models given one
spill_dir never share a file.

    check_space()  before a traced call runs: its files not yet on disk must fit (faults.SpillSpaceError)
    open()         before a run: remakes the directory close() removed (traced steps write into it)
    close()        after a run (GraphModel: when fit / evaluate / predict returns or fails): removes the files
                   and the directories made for them (never a user's other files); also at exit
    fault(error)   a failed step's error as a one-line faults.TrainingFault, when it names one of the files
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import weakref

from ngra_tf.runtime import faults


class SpillDirectory:
    """The files of one executor's disk host tier (see the module doc). `spill_dir` None: the temporary
    directory."""

    def __init__(self, spill_dir=None):
        self.spill_dir = spill_dir
        self._own = None  # this executor's directory inside the parent
        self._serial = 0
        # The files (path -> bytes) and the directories made for them, as (directory, None) for its own (removed
        # whole) or (spill_dir, the outermost directory made with it) (removed once empty): only these are removed,
        # by close() and, should a process exit without it, at exit.
        self._files, self._made = {}, []
        weakref.finalize(self, _remove, self._files, self._made)

    @property
    def parent(self) -> str:
        """Where this executor's directory is made: spill_dir, or the system's temporary directory."""
        return os.path.abspath(self.spill_dir) if self.spill_dir is not None else tempfile.gettempdir()

    @property
    def files(self) -> dict:
        return self._files

    def prefix(self, name: str) -> str:
        """A new name prefix for the files of one traced call (called `name`): files are prefix + their name."""
        self._serial += 1
        return os.path.join(self._directory(), f"{self._serial:05d}_{file_name(name)}_")

    def expect(self, path: str, nbytes: int):
        """Counts a file a traced call will write (for check_space, close and fault)."""
        self._files[path] = int(nbytes)

    def file(self, name: str, nbytes: int) -> str:
        """A new file for an array called `name` of `nbytes` bytes."""
        path = self.prefix(name) + ".bin"
        self.expect(path, nbytes)
        return path

    def check_space(self):
        """The files named so far that are not on disk yet must fit in the directory's free space."""
        needed = sum(nbytes for path, nbytes in self._files.items() if not os.path.exists(path))
        if needed:
            faults.check_spill_space(self.parent, needed)

    def _directory(self):
        parent = self.parent
        try:
            if self._own is None:
                if os.path.exists(parent) and not os.path.isdir(parent):
                    raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a directory")
                if not os.path.isdir(parent):
                    made = parent  # the outermost missing directory: close() removes it, if nothing else is there
                    while not os.path.exists(os.path.dirname(made)):
                        made = os.path.dirname(made)
                    self._made.append((parent, made))
                    os.makedirs(parent, mode=0o700, exist_ok=True)
                self._own = tempfile.mkdtemp(prefix="ngra-spill-", dir=parent)
                self._made.append((self._own, None))
            os.makedirs(self._own, mode=0o700, exist_ok=True)
        except OSError as error:
            raise faults.SpillDirectoryError(
                f"spill directory {parent}: cannot make the host tier's directory in it "
                f"({error.strerror or error}): pass a directory you can write (spill_dir=, train.py --spill_dir)"
                + ("" if self.spill_dir is None else f", or none to use {tempfile.gettempdir()}")) from None
        return self._own

    def open(self):
        """Before a run: remakes the directory close() removed, which traced steps write into."""
        if self._files:
            self._directory()

    def close(self):
        """Removes the files and the directories made for them; open() before the next run."""
        _remove(self._files, self._made)

    def fault(self, error, store=None):
        """A TrainingFault for `error` (a failed run's tf.errors.OpError) when it names one of these files or a
        file of `store`, else None."""
        return faults.translate(error, self._files, self.parent, store)


def file_name(name: str) -> str:
    """`name` with what a file name should not have replaced by _."""
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


def _remove(files, made):
    """Deletes the files and the directories made for them: this executor's own whole, the spill_dir made for it
    (and the missing parents made with it) only once empty, since another executor may have put its own there."""
    for path in files:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
    for directory, root in reversed(made):  # (its own directory first: it is inside the one made for it)
        if root is None:
            shutil.rmtree(directory, ignore_errors=True)
            continue
        while True:
            try:
                os.rmdir(directory)
            except OSError:  # not empty (another executor's), or gone
                break
            if directory == root:
                break
            directory = os.path.dirname(directory)


__all__ = ["SpillDirectory", "file_name"]
