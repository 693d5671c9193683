"""read_file / write_file: byte ranges of .npy files and spilled blocks, read and
written inside graphs, bit-exactly, with errors that name the file; and the
pure-TF reference they fall back to without the op library."""

import os
import time

import numpy as np
import pytest
import tensorflow as tf

from ngra_tf.ops import fileio, read_file, write_file
from ngra_testlib import lib

DTYPES = [d.name for d in fileio.DTYPES]


@pytest.fixture(params=["native", "reference"])
def backend(request, monkeypatch):
    """Runs a test against the kernels, then against the pure-TF reference."""
    if request.param == "native":
        assert lib() is not None, "the op library did not load"
    else:
        monkeypatch.setattr(fileio, "library", lambda: None)
    return request.param


@pytest.fixture
def reference(monkeypatch):
    monkeypatch.setattr(fileio, "library", lambda: None)


def sample(dtype, shape, seed=0):
    """Random bytes as `dtype` (NaN payloads, infinities, extreme ints); bools are 0 or 1."""
    np_dtype = np.dtype(tf.as_dtype(dtype).as_numpy_dtype)
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if np_dtype == np.bool_:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    return rng.integers(0, 256, n * np_dtype.itemsize, dtype=np.uint8).view(np_dtype).reshape(shape)


def save_npy(path, array, version=None):
    """np.save's file (bfloat16, which .npy has no code for, saved as its uint16 bits); returns
    where its data starts, found as a reader would: the header's length."""
    if array.dtype == tf.bfloat16.as_numpy_dtype:
        array = array.view(np.uint16)
    with open(path, "wb") as f:
        np.lib.format.write_array(f, array, version=version)
    with open(path, "rb") as f:
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}[np.lib.format.read_magic(f)]
        shape, _, _ = read_header(f)
        assert shape == array.shape
        return f.tell()


def assert_bits_equal(got, want):
    got = got.numpy() if tf.is_tensor(got) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.tobytes() == want.tobytes()


def error_text(error):
    return str(error.value)


# ---- values ----


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_npy_ranges_round_trip(backend, dtype, version, tmp_path):
    path = str(tmp_path / "x.npy")
    array = sample(dtype, (7, 3))
    start = save_npy(path, array, version)
    row = 3 * array.itemsize
    size = os.path.getsize(path)
    # Rows in the middle, checked against the file's size and mtime.
    mtime = os.stat(path).st_mtime_ns
    assert_bits_equal(read_file(path, start + 2 * row, [3, 3], dtype, size, mtime), array[2:5])
    # The whole array, and reshaped.
    assert_bits_equal(read_file(path, start, [7, 3], dtype), array)
    assert_bits_equal(read_file(path, start, (3, 7), dtype), array.reshape(3, 7))
    # No rows: at the end of the data, and in the middle.
    assert_bits_equal(read_file(path, start + 7 * row, [0, 3], dtype), array[7:])
    assert_bits_equal(read_file(path, start + row, [0, 3], dtype), array[1:1])
    # One element, as a scalar; the last row.
    assert_bits_equal(read_file(path, start + 4 * array.itemsize, [], dtype), array.reshape(-1)[4])
    assert_bits_equal(read_file(path, start + 6 * row, [1, 3], dtype), array[6:])


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "bfloat16"])
def test_multidimensional_and_tensor_arguments(backend, dtype, tmp_path):
    path = str(tmp_path / "x.npy")
    array = sample(dtype, (4, 3, 2, 5))
    start = save_npy(path, array)
    block = 3 * 2 * 5 * array.itemsize
    got = read_file(tf.constant(path), tf.constant(start + block, tf.int32), tf.constant([2, 3, 2, 5], tf.int32),
                    dtype, tf.constant(os.path.getsize(path)), tf.constant(-1))
    assert_bits_equal(got, array[1:3])
    # A shape mixing sizes and tensors.
    assert_bits_equal(read_file(path, start, [tf.constant(4), 30], dtype), array.reshape(4, 30))


def test_nonzero_bytes_read_as_true(backend, tmp_path):
    path = tmp_path / "b.bin"
    path.write_bytes(bytes([0, 1, 2, 255]))
    np.testing.assert_array_equal(read_file(str(path), 0, [4], tf.bool).numpy(), [False, True, True, True])


def test_static_shape(tmp_path):
    path = str(tmp_path / "x.bin")
    sample("float32", (6,)).tofile(path)
    seen = {}

    @tf.function
    def f(n):
        seen["const"] = read_file(path, 0, [2, 3], tf.float32).shape
        seen["partial"] = read_file(path, 0, tf.stack([n, 3]), tf.float32).shape
        return tf.constant(0)

    f(tf.constant(2))
    assert seen["const"].as_list() == [2, 3]
    assert seen["partial"].rank == 2


def test_while_loop_reads_a_range_per_iteration(backend, tmp_path):
    arrays = [sample("float32", (10, 4), seed) for seed in range(2)]
    paths, starts = [], []
    for i, array in enumerate(arrays):
        paths.append(str(tmp_path / f"part{i}.npy"))
        starts.append(save_npy(paths[-1], array))
    # Steps: (file, first row) of 2-row blocks, in no particular order.
    steps = [(0, 0), (1, 8), (0, 4), (1, 2), (0, 8), (1, 0)]
    step_paths = tf.constant([paths[f] for f, _ in steps])
    step_offsets = tf.constant([starts[f] + r * 4 * 4 for f, r in steps], tf.int64)

    @tf.function
    def run():
        def body(i, acc):
            block = read_file(tf.gather(step_paths, i), tf.gather(step_offsets, i), [2, 4], tf.float32)
            return i + 1, acc.write(i, block * 2.0)

        n = tf.shape(step_paths)[0]
        _, acc = tf.while_loop(lambda i, _: i < n, body, [tf.constant(0), tf.TensorArray(tf.float32, n)],
                               parallel_iterations=4)
        return acc.stack()

    want = np.stack([arrays[f][r:r + 2] * 2.0 for f, r in steps])
    np.testing.assert_array_equal(run().numpy(), want)
    if backend == "native":
        # Nothing in the body is stateful: iterations may overlap.
        ops = [op.type for op in run.get_concrete_function().graph.get_operations()]
        assert "StatelessWhile" in ops and "While" not in ops, ops


def test_write_blocks_out_of_order_and_read_back(backend, tmp_path):
    path = str(tmp_path / "spill.bin")
    blocks = [sample("float64", (5, 3), seed) for seed in range(4)]
    nbytes = blocks[0].nbytes
    for i in (2, 0, 3, 1):
        assert int(write_file(path, i * nbytes, blocks[i])) == nbytes
    assert os.path.getsize(path) == 4 * nbytes
    for i in (3, 1, 0, 2):
        assert_bits_equal(read_file(path, i * nbytes, [5, 3], tf.float64), blocks[i])
    # A later, smaller write does not truncate the file.
    small = sample("int32", (4,), 9)
    assert int(write_file(tf.constant(path), tf.constant(nbytes + 8), small)) == small.nbytes
    assert os.path.getsize(path) == 4 * nbytes
    assert_bits_equal(read_file(path, nbytes + 8, [4], tf.int32), small)
    assert_bits_equal(read_file(path, 0, [5, 3], tf.float64), blocks[0])
    assert_bits_equal(read_file(path, 2 * nbytes, [10, 3], tf.float64), np.concatenate(blocks[2:]))
    # An empty value creates the file, writing nothing.
    empty = str(tmp_path / "empty.bin")
    assert int(write_file(empty, 0, np.zeros((0, 3), np.float32))) == 0
    assert os.path.getsize(empty) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_read_every_dtype(backend, dtype, tmp_path):
    path = str(tmp_path / "x.bin")
    value = sample(dtype, (2, 3), 5)
    assert int(write_file(path, 7, value)) == value.nbytes  # an unaligned offset
    assert_bits_equal(read_file(path, 7, [2, 3], dtype), value)


def test_read_ordered_after_write_in_one_function(backend, tmp_path):
    path = str(tmp_path / "x.bin")
    sample("float32", (8,)).tofile(path)

    @tf.function
    def spill_and_reload(x, offset):
        written = write_file(path, offset, x)
        with tf.control_dependencies([written]):
            return read_file(path, offset, [4], tf.float32)

    for seed, offset in [(1, 0), (2, 16), (3, 0)]:
        x = sample("float32", (4,), seed)
        assert_bits_equal(spill_and_reload(tf.constant(x), tf.constant(offset, tf.int64)), x)


def test_constant_read_is_not_folded(backend, tmp_path):
    # All inputs constant: constant folding would read the file once, when the
    # function is optimised, and return that on every call.
    path = str(tmp_path / "x.bin")
    reload = tf.function(lambda: read_file(path, 4, [2], tf.int32))
    for seed in range(3):
        x = sample("int32", (3,), seed)
        x.tofile(path)
        assert_bits_equal(reload(), x[1:])


def test_read_is_stateless_and_write_is_stateful(tmp_path):
    assert lib() is not None
    path = str(tmp_path / "x.bin")

    @tf.function
    def f():
        written = write_file(path, 0, tf.zeros([2]))
        with tf.control_dependencies([written]):
            return read_file(path, 0, [2], tf.float32)

    ops = {op.type: op for op in f.get_concrete_function().graph.get_operations()}
    assert ops["NgraReadFile"].op_def.is_stateful is False
    assert ops["NgraWriteFile"].op_def.is_stateful is True


def test_bytes_read_and_written_are_counted(tmp_path):
    assert lib() is not None
    path = str(tmp_path / "x.bin")
    fileio.file_stats(reset=True)
    write_file(path, 0, tf.zeros([3, 4]))
    read_file(path, 8, [2], tf.float32)
    assert fileio.file_stats() == {"read": 8, "written": 48}
    assert fileio.file_stats(reset=True) == {"read": 8, "written": 48}
    assert fileio.file_stats() == {"read": 0, "written": 0}


# ---- errors ----


def short_file(tmp_path, nbytes=10):
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(range(nbytes)))
    return str(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.npy")
    for shape in ([3], [0, 4]):  # a zero-element read still opens the file
        with pytest.raises(tf.errors.NotFoundError) as error:
            read_file(path, 0, shape, tf.float32)
        assert path in error_text(error) and "No such file or directory" in error_text(error)


def test_wrong_size(tmp_path):
    path = short_file(tmp_path)
    with pytest.raises(tf.errors.DataLossError) as error:
        read_file(path, 0, [2], tf.int8, expected_size=12)
    assert path in error_text(error)
    assert "the file has 10 bytes, expected 12: it was truncated or replaced" in error_text(error)


def test_wrong_mtime(tmp_path):
    path = short_file(tmp_path)
    mtime = os.stat(path).st_mtime_ns
    np.testing.assert_array_equal(read_file(path, 0, [2], tf.int8, 10, mtime).numpy(), [0, 1])
    with pytest.raises(tf.errors.FailedPreconditionError) as error:
        read_file(path, 0, [2], tf.int8, expected_mtime_ns=mtime + 1)
    assert path in error_text(error) and "changed since it was verified" in error_text(error)


@pytest.mark.parametrize("how", ["replaced", "rewritten_in_place"])
def test_a_change_that_kept_size_and_mtime(backend, how, tmp_path):
    # cp -p, or a rewrite within one clock tick, keeps size and mtime: the inode (a replacement) or the
    # change time (a rewrite in place, which no one can set back) tells.
    path = short_file(tmp_path)
    before = os.stat(path)
    identity = dict(expected_size=10, expected_mtime_ns=before.st_mtime_ns, expected_inode=before.st_ino,
                    expected_ctime_ns=before.st_ctime_ns)
    np.testing.assert_array_equal(read_file(path, 0, [2], tf.int8, **identity).numpy(), [0, 1])
    time.sleep(0.02)  # past the file system's clock tick
    if how == "replaced":
        new = tmp_path / "new.bin"
        new.write_bytes(bytes(10))
        os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(new, path)
    else:
        with open(path, "r+b") as stream:
            stream.write(bytes(10))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (10, before.st_mtime_ns)
    with pytest.raises(tf.errors.OpError) as error:
        read_file(path, 0, [2], tf.int8, **identity).numpy()
    assert path in error_text(error) and "changed since it was verified: its inode and change time" in error_text(error)


@pytest.mark.parametrize("offset, shape, needs", [(0, [3], "[0, 12)"), (8, [1], "[8, 12)"), (10, [0, 2], None),
                                                   (20, [0], "[20, 20)")])
def test_range_past_the_end(offset, shape, needs, tmp_path):
    path = short_file(tmp_path)
    if needs is None:  # ends inside the file
        assert read_file(path, offset, shape, tf.int32).shape == shape
        return
    with pytest.raises(tf.errors.DataLossError) as error:
        read_file(path, offset, shape, tf.int32)
    assert path in error_text(error) and f"needs bytes {needs}, the file has 10" in error_text(error)


def test_huge_shapes_are_not_allocated(tmp_path):
    path = short_file(tmp_path)
    with pytest.raises(tf.errors.DataLossError) as error:
        read_file(path, 0, [2**40], tf.float32)
    assert path in error_text(error) and f"needs bytes [0, {2**42}), the file has 10" in error_text(error)
    for shape, problem in [([2**60, 2], "too many bytes"), ([2**61, 8], "more than 2**63 - 1 elements")]:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            read_file(path, 0, shape, tf.float64)
        assert path in error_text(error) and problem in error_text(error)


def test_negative_offset_and_dimension(tmp_path):
    path = short_file(tmp_path)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        read_file(path, tf.constant(-4), [1], tf.int8)
    assert path in error_text(error) and "offset must be >= 0, got -4" in error_text(error)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        read_file(path, 0, tf.constant([2, -1]), tf.int8)
    assert path in error_text(error) and "shape[1] = -1 is negative" in error_text(error)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        write_file(path, tf.constant(-1), np.ones(2))
    assert path in error_text(error) and "offset must be >= 0, got -1" in error_text(error)


def test_directory(tmp_path):
    with pytest.raises(tf.errors.FailedPreconditionError) as error:
        read_file(str(tmp_path), 0, [1], tf.int8)
    assert str(tmp_path) in error_text(error) and "is a directory" in error_text(error)


def test_write_to_a_full_device():
    with pytest.raises(tf.errors.ResourceExhaustedError) as error:
        write_file("/dev/full", 16, np.ones(3, np.float32))
    assert "/dev/full" in error_text(error) and "12 bytes at offset 16" in error_text(error)
    assert "No space left on device" in error_text(error)


def test_write_into_a_missing_directory(tmp_path):
    path = str(tmp_path / "no" / "such" / "x.bin")
    with pytest.raises(tf.errors.NotFoundError) as error:
        write_file(path, 0, np.ones(3, np.int64))
    assert path in error_text(error) and "24 bytes at offset 0" in error_text(error)
    assert "No such file or directory" in error_text(error)


@pytest.mark.parametrize("call, argument", [
    (lambda p: read_file(p, -1, [1], tf.int8), "offset"),
    (lambda p: read_file(p, 1.5, [1], tf.int8), "offset"),
    (lambda p: read_file(p, 0, [2, -1], tf.int8), r"shape\[1\]"),
    (lambda p: read_file(p, 0, [None], tf.int8), r"shape\[0\]"),
    (lambda p: read_file(p, 0, 3, tf.int8), "shape"),
    (lambda p: read_file(p, 0, [1], tf.string), "dtype"),
    (lambda p: read_file(p, 0, [1], "complex64"), "dtype"),
    (lambda p: read_file(p, 0, [1], tf.int8, expected_size=-2), "expected_size"),
    (lambda p: read_file(p, 0, [1], tf.int8, expected_mtime_ns=True), "expected_mtime_ns"),
    (lambda p: read_file("", 0, [1], tf.int8), "path"),
    (lambda p: read_file(tf.constant(1), 0, [1], tf.int8), "path"),
    (lambda p: write_file(p, -8, np.ones(2)), "offset"),
    (lambda p: write_file(p, 0, np.array(["a"])), "value"),
    (lambda p: write_file(None, 0, np.ones(2)), "path"),
])
def test_python_arguments_are_checked(call, argument, tmp_path):
    with pytest.raises(ValueError, match=argument):
        call(short_file(tmp_path))


# ---- the reference, without the library ----


def test_reference_errors(reference, tmp_path):
    path = short_file(tmp_path)
    with pytest.raises(tf.errors.OpError) as error:
        read_file(path, 4, [2], tf.int32)
    assert path in error_text(error) and "needs bytes [4, 12), the file has 10" in error_text(error)
    with pytest.raises(tf.errors.OpError) as error:
        read_file(path, 0, [1], tf.int8, expected_size=11)
    assert path in error_text(error) and "expected 11" in error_text(error)
    with pytest.raises(tf.errors.OpError) as error:
        read_file(str(tmp_path / "absent"), 0, [0], tf.int8)
    assert "absent" in error_text(error) and "No such file or directory" in error_text(error)
    with pytest.raises(tf.errors.OpError) as error:
        write_file("/dev/full", 0, np.ones(3, np.float32))
    assert "/dev/full" in error_text(error) and "No space left on device" in error_text(error)
