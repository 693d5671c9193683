"""Reading and writing a byte range of a file as TensorFlow ops.

A training loop compiled into a tf.function / tf.while_loop reads the chunks
of a graph stored as .npy files, and spills and reloads activation blocks,
with these ops: no Python runs per read, and TensorFlow's executor overlaps
the reads with compute.

read_file is stateless: in a tf.while_loop with parallel_iterations >= 2, the
next iteration's read runs while this one computes. Both take `after`, a
tensor the op waits for and ignores: pass the results of the writes a read or
a write must follow (write_file returns its byte count). That data dependency
is the only ordering: TensorFlow drops control dependencies on tensors
captured into loop bodies and conditionals, and does not keep stateful ops in
program order around a loop that uses a resource variable.

Both run on the host (the ops have CPU kernels only). Without the compiled
library they fall back to a pure-TF reference: reads with tf.io.read_file
(the whole file, then the range), after a tf.py_function that makes the same
checks; writes with a tf.py_function. It gives the same values, and fails for
the same files with the same messages, though most of its errors arrive as
tf.errors.UnknownError (how tf.py_function passes errors on).
"""

import errno
import math
import operator
import os
import stat

import numpy as np
import tensorflow as tf

from ngra_tf.ops._loader import library

# The plain numeric types: a value's bytes are its value (little-endian).
DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16, tf.int32, tf.int64,
          tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.bool)

# tf.io.decode_raw has no bool, uint32 or uint64: decode as these and convert.
_RAW_DTYPES = {tf.bool: tf.uint8, tf.uint32: tf.int32, tf.uint64: tf.int64}


def read_file(path, offset, shape, dtype, expected_size=-1, expected_mtime_ns=-1, after=None, expected_inode=-1,
              expected_ctime_ns=-1, cache=-1, key=0, keep=False):
    """Reads a tensor of `shape` and `dtype` from the file at `path`, `offset` bytes in.

    For a range of an .npy file's data, `offset` is the header's length plus
    the range's first element times the item size (numpy.lib.format gives the
    header); for a spilled block, where write_file put it. Exactly
    prod(shape) * dtype.size bytes are read; a zero-element read still checks
    the file.

    expected_size, expected_mtime_ns, expected_inode and expected_ctime_ns
    (-1: unchecked) must equal the file's os.stat st_size, st_mtime_ns,
    st_ino and st_ctime_ns, to catch a file truncated or replaced since it
    was verified (inode and ctime: also one of the same size whose mtime was
    kept, by a copy that preserves it or a rewrite within one clock tick).

    The op is stateless, so a tf.while_loop with parallel_iterations >= 2
    overlaps the next iteration's read with this one's compute. To read what a
    write_file wrote, pass its result (or a sum of several) as `after`: the
    read then runs once it is computed. (A control dependency does the same
    in one graph, but not on a tensor captured into a loop body, whose
    control dependencies TensorFlow moves to the loop as a whole.)

    With a `cache` (ngra_tf.ops.cache.new_cache), the range is first looked
    up there under `key`; found, it is returned without reading (the cached
    tensor itself, checked against its file when it was read); read, it is
    cached under `key` when `keep`.

    Every argument may be a tensor (inside a tf.function or a loop they are);
    Python values are checked here, with a ValueError naming the argument.
    Errors found when the op runs (missing file, wrong size or mtime, range
    past the end) are tf.errors.OpError subclasses whose message names the
    file.
    """
    dtype = _dtype(dtype, "dtype")
    path = _path(path)
    offset = _int64(offset, "offset", minimum=0)
    shape = _shape(shape)
    expected_size = _int64(expected_size, "expected_size", minimum=-1)
    expected_mtime_ns = _int64(expected_mtime_ns, "expected_mtime_ns", minimum=-1)
    expected_inode = _int64(expected_inode, "expected_inode", minimum=-1)
    expected_ctime_ns = _int64(expected_ctime_ns, "expected_ctime_ns", minimum=-1)
    after = tf.constant(0, tf.int64) if after is None else tf.cast(after, tf.int64)
    lib = library()
    if lib is None:  # (no cache without the library: every range is read)
        return _reference_read(path, offset, shape, dtype, expected_size, expected_mtime_ns, expected_inode,
                               expected_ctime_ns, after)
    return lib.ngra_read_file(path, offset, shape, expected_size, expected_mtime_ns, expected_inode, expected_ctime_ns,
                              after, tf.cast(cache, tf.int64), tf.cast(key, tf.int64), tf.cast(keep, tf.bool),
                              dtype=dtype)


def write_file(path, offset, value, after=None):
    """Writes `value`'s bytes into the file at `path`, `offset` bytes in; returns the byte count.

    Creates the file (mode 0644) if absent and never truncates it, so the
    blocks of one file (spilled activations, say) can be written at different
    offsets by different steps, in any order. read_file(path, offset,
    value.shape, value.dtype) reads the value back.

    The op is stateful, so it runs even when `written` is unused, but that
    does not order it: pass the results of earlier writes it must follow as
    `after` (a tensor it waits for and ignores), and pass `written`, the
    returned int64 scalar, as the `after` of a read of what it wrote. (In a
    conditional inside a loop that also updates a variable, a write ordered
    only by a control dependency overtook the file's initial fill.)
    """
    path = _path(path)
    offset = _int64(offset, "offset", minimum=0)
    value = tf.convert_to_tensor(value)
    _dtype(value.dtype, "value")
    after = tf.constant(0, tf.int64) if after is None else tf.cast(after, tf.int64)
    lib = library()
    if lib is None:
        return _reference_write(path, offset, value, after)
    return lib.ngra_write_file(path, offset, value, after)


def file_stats(reset=False) -> dict:
    """Bytes read_file has read and write_file has written in this process since the last reset, as
    {"read": bytes, "written": bytes} (reset: zero them). Without the compiled library, zeros."""
    lib = library()
    if lib is None:
        return {"read": 0, "written": 0}
    with tf.device("/cpu:0"):
        read, written = lib.ngra_file_stats(tf.constant(bool(reset)))
    return {"read": int(read), "written": int(written)}


# ---- argument checks: Python values here, tensors when the op runs ----


def _dtype(dtype, name):
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError as error:
        raise ValueError(f"{name} must be a numeric dtype, got {dtype!r}") from error
    if dtype not in DTYPES:
        raise ValueError(f"{name} must have one of the dtypes {', '.join(d.name for d in DTYPES)}; "
                         f"got {dtype.name}")
    return dtype


def _path(path):
    if tf.is_tensor(path):
        if path.dtype != tf.string:
            raise ValueError(f"path must be a string tensor, got dtype {path.dtype.name}")
        return path
    try:
        path = os.fspath(path)
    except TypeError as error:
        raise ValueError(f"path must be a str, bytes, os.PathLike or string tensor, got {path!r}") from error
    if not path:
        raise ValueError("path must not be empty")
    return tf.constant(path, tf.string)


def _is_int(value):
    """A Python or numpy integer, not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _int64(value, name, minimum):
    if tf.is_tensor(value):
        if not value.dtype.is_integer:
            raise ValueError(f"{name} must be an integer tensor, got dtype {value.dtype.name}")
        return tf.cast(value, tf.int64)
    if not _is_int(value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if operator.index(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return tf.constant(operator.index(value), tf.int64)


def _shape(shape):
    if tf.is_tensor(shape):
        if not shape.dtype.is_integer:
            raise ValueError(f"shape must be an integer tensor, got dtype {shape.dtype.name}")
        return tf.cast(shape, tf.int64)
    if isinstance(shape, tf.TensorShape):
        if not shape.is_fully_defined():
            raise ValueError(f"shape must be fully defined, got {shape}")
        shape = shape.as_list()
    try:
        dims = list(shape)
    except TypeError as error:
        raise ValueError(f"shape must be a sequence of sizes or a tensor, got {shape!r}") from error
    for i, dim in enumerate(dims):
        if tf.is_tensor(dim):
            continue
        if not _is_int(dim) or operator.index(dim) < 0:
            raise ValueError(f"shape[{i}] must be a non-negative integer, got {dim!r}")
    if any(tf.is_tensor(dim) for dim in dims):
        return tf.stack([tf.cast(dim, tf.int64) for dim in dims])
    return tf.constant([operator.index(dim) for dim in dims], tf.int64, shape=[len(dims)])


# ---- the pure-TF reference, used when the library is not loaded ----

# errno -> the error TensorFlow's own file system code raises for it.
_ERRNO_ERRORS = {
    errno.ENOENT: tf.errors.NotFoundError,
    errno.ENOTDIR: tf.errors.NotFoundError,
    errno.EACCES: tf.errors.PermissionDeniedError,
    errno.EPERM: tf.errors.PermissionDeniedError,
    errno.ENOSPC: tf.errors.ResourceExhaustedError,
    errno.EDQUOT: tf.errors.ResourceExhaustedError,
    errno.EFBIG: tf.errors.ResourceExhaustedError,  # (the kernel's code for it: not OUT_OF_RANGE, see file_ops.cc)
    errno.EISDIR: tf.errors.FailedPreconditionError,
    errno.EINVAL: tf.errors.InvalidArgumentError,
}


def _os_error(context, error):
    cls = _ERRNO_ERRORS.get(error.errno, tf.errors.UnknownError)
    return cls(None, None, f"{context}; {os.strerror(error.errno)}")


def _check_read(path, offset, shape, expected_size, expected_mtime_ns, expected_inode, expected_ctime_ns, itemsize):
    """The native kernel's checks, in Python: returns the path, or raises as it would."""
    path = os.fsdecode(path.numpy())
    offset, expected_size, expected_mtime_ns = int(offset), int(expected_size), int(expected_mtime_ns)
    expected_inode, expected_ctime_ns = int(expected_inode), int(expected_ctime_ns)
    if offset < 0:
        raise tf.errors.InvalidArgumentError(None, None, f"offset must be >= 0, got {offset} (file {path})")
    for i, dim in enumerate(shape.numpy().tolist()):
        if dim < 0:
            raise tf.errors.InvalidArgumentError(None, None, f"shape[{i}] = {dim} is negative (file {path})")
    nbytes = math.prod(shape.numpy().tolist()) * itemsize
    try:
        info = os.stat(path)
    except OSError as error:
        raise _os_error(f"cannot open {path} for reading", error) from None
    if stat.S_ISDIR(info.st_mode):
        raise tf.errors.FailedPreconditionError(None, None, f"{path} is a directory, not a file")
    if expected_size >= 0 and info.st_size != expected_size:
        raise tf.errors.DataLossError(None, None, f"{path}: the file has {info.st_size} bytes, expected "
                                      f"{expected_size}: it was truncated or replaced")
    if expected_mtime_ns >= 0 and info.st_mtime_ns != expected_mtime_ns:
        raise tf.errors.FailedPreconditionError(None, None, f"{path} changed since it was verified: its mtime is "
                                                f"{info.st_mtime_ns} ns, expected {expected_mtime_ns}")
    if (expected_inode >= 0 and info.st_ino != expected_inode) or (expected_ctime_ns >= 0
                                                                   and info.st_ctime_ns != expected_ctime_ns):
        raise tf.errors.FailedPreconditionError(None, None, f"{path} changed since it was verified: its inode and "
                                                f"change time are {info.st_ino} and {info.st_ctime_ns} ns, expected "
                                                f"{expected_inode} and {expected_ctime_ns}")
    if offset + nbytes > info.st_size:
        raise tf.errors.DataLossError(None, None, f"reading {path} needs bytes [{offset}, {offset + nbytes}), "
                                      f"the file has {info.st_size}")
    return path


def _reference_read(path, offset, shape, dtype, expected_size, expected_mtime_ns, expected_inode, expected_ctime_ns,
                    after):
    # The checks run as a py_function ahead of the read. Being stateful, it
    # also keeps the read from being constant-folded when the path is a
    # constant (the folded read would return the file as it was when the
    # graph was optimised).
    checked = tf.py_function(lambda *args: _check_read(*args[:7], itemsize=dtype.size),
                             [path, offset, shape, expected_size, expected_mtime_ns, expected_inode, expected_ctime_ns,
                              after], tf.string)
    checked.set_shape([])
    nbytes = tf.reduce_prod(shape) * dtype.size
    data = tf.strings.substr(tf.io.read_file(checked), offset, nbytes)
    raw = _RAW_DTYPES.get(dtype, dtype)
    values = tf.io.decode_raw(data, raw, little_endian=True)
    if dtype == tf.bool:
        values = tf.cast(values, tf.bool)
    elif raw != dtype:
        values = tf.bitcast(values, dtype)
    return tf.reshape(values, shape)


def _pwrite(path, offset, value):
    path, offset = os.fsdecode(path.numpy()), int(offset)
    data = memoryview(np.ascontiguousarray(value.numpy()).tobytes())
    what = f"{len(data)} bytes at offset {offset} of {path}"
    if offset < 0:
        raise tf.errors.InvalidArgumentError(None, None, f"offset must be >= 0, got {offset} (file {path})")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)  # never O_TRUNC
    except OSError as error:
        raise _os_error(f"cannot open {path} to write {what}", error) from None
    done = 0
    try:
        while done < len(data):  # os.pwrite retries EINTR itself
            n = os.pwrite(fd, data[done:], offset + done)
            if n == 0:  # no progress: as the kernel, report it as a full device
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError as error:
        os.close(fd)
        raise _os_error(f"cannot write {what} ({done} written)", error) from None
    try:
        os.close(fd)
    except OSError as error:
        raise _os_error(f"cannot close {path} after writing {what}", error) from None
    return np.int64(len(data))


def _reference_write(path, offset, value, after):
    written = tf.py_function(lambda path, offset, value, after: _pwrite(path, offset, value),
                             [path, offset, value, after], tf.int64)
    written.set_shape([])
    return written
