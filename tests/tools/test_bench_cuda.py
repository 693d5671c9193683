"""tools/bench_cuda.py runs on a GPU machine without TensorFlow; everything it
does apart from the GPU is checked here: argument parsing, graph generation,
byte accounting, the peak-bandwidth lookup, the benchmark library's C
interface (built and loaded, not run), and the orchestration of one case
against a numpy stand-in for CuPy and the library."""

import ctypes
import json
import pathlib
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import bench_cuda  # noqa: E402
import build_cuda  # noqa: E402
from ngra_tf.ops import generated  # noqa: E402


def check_csr(indptr, indices, n):
    assert indptr.dtype == np.int32 and indices.dtype == np.int32
    assert indptr[0] == 0 and indptr[-1] == indices.size and np.all(np.diff(indptr) >= 0)
    assert indices.size == 0 or (indices.min() >= 0 and indices.max() < n)
    for row in range(min(n, 200)):  # sorted within rows, as the CPU kernels expect
        assert np.all(np.diff(indices[indptr[row]:indptr[row + 1]]) >= 0)


def test_arguments():
    args = bench_cuda.parse_args([])
    assert args.densities == [0.0001, 0.001, 0.01, 0.1] and args.widths == [128, 602]
    assert (args.vertices, args.edges, args.chunk) == (233_000, 23_200_000, 1024)
    quick = bench_cuda.parse_args(["--quick", "--repeats=9"])
    assert (quick.vertices, quick.edges, quick.repeats) == (23_300, 2_320_000, 5)
    assert bench_cuda.parse_args(["--densities=0.5", "--widths=7"]).widths == [7]
    assert args.passes == ["forward", "dx", "dweight", "gate"]
    assert bench_cuda.parse_args(["--passes=dweight, forward"]).passes == ["forward", "dweight"]
    for bad in (["--densities=2"], ["--densities=x"], ["--widths=0"], ["--chunk=0"], ["--passes=dy"], ["--passes=,"]):
        with pytest.raises(SystemExit):
            bench_cuda.parse_args(bad)


def test_uniform_graph():
    indptr, indices = bench_cuda.uniform_graph(1000, 5000, seed=1)
    check_csr(indptr, indices, 1000)
    cells = np.repeat(np.arange(1000), np.diff(indptr)) * 1000 + indices
    assert np.unique(cells).size == 5000  # distinct cells
    with pytest.raises(ValueError):
        bench_cuda.uniform_graph(10, 101)


@pytest.mark.parametrize("n, nnz, seed", [(300, 40_000, 1), (300, 40_000, 7), (50, 2_400, 0), (1000, 5000, 3)])
def test_uniform_graph_is_the_graph_of_its_draws(n, nnz, seed):
    """The top-ups checked by binary search keep the cells the plain method keeps (unique, top up, unique
    again), so a seed names the same graph as in the runs recorded before: dense cases need many top-ups."""
    rng = np.random.default_rng(seed)
    found = np.unique(rng.integers(0, n * n, nnz, dtype=np.int64))
    while found.size < nnz:
        found = np.unique(np.concatenate([found, rng.integers(0, n * n, nnz - found.size, dtype=np.int64)]))
    src, dst = np.divmod(found, n)
    want = sp.csr_matrix((np.ones(nnz), (dst, src)), shape=(n, n))
    indptr, indices = bench_cuda.uniform_graph(n, nnz, seed=seed)
    check_csr(indptr, indices, n)
    assert np.array_equal(indptr, want.indptr) and np.array_equal(indices, want.indices)


def test_without_cupy_main_says_what_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(SystemExit, match="needs CuPy and a CUDA GPU.*--dry-run"):
        bench_cuda.main(["--no-reddit", "--densities=0.001"])


def test_power_law_graph_is_skewed():
    indptr, indices = bench_cuda.power_law_graph(5000, 100_000, seed=2)
    check_csr(indptr, indices, 5000)
    degrees = np.diff(indptr)
    assert degrees.max() > 20 * degrees.mean() and (degrees == 0).any()
    with pytest.raises(ValueError):
        bench_cuda.power_law_graph(10, 10, exponent=1.0)


def test_csr_matches_scipy():
    rng = np.random.default_rng(3)
    dst, src = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    indptr, indices = bench_cuda.csr_from_edges(dst, src, 50)
    w = rng.random(400)
    x = rng.standard_normal((50, 4))
    order = np.lexsort((src, dst))
    ours = sp.csr_matrix((w[order], indices, indptr), shape=(50, 50))
    theirs = sp.csr_matrix((w, (dst, src)), shape=(50, 50))
    np.testing.assert_allclose(ours @ x, theirs @ x, rtol=1e-12)


def test_transpose_matches_scipy():
    indptr, indices = bench_cuda.uniform_graph(60, 900, seed=5)
    t_indptr, t_indices, positions = bench_cuda.transpose_csr(indptr, indices, 60)
    check_csr(t_indptr, t_indices, 60)
    assert positions.dtype == np.int32 and np.array_equal(np.sort(positions), np.arange(900))
    w = np.random.default_rng(5).random(900)
    a = sp.csr_matrix((w, indices, indptr), shape=(60, 60))
    a_t = sp.csr_matrix((w[positions], t_indices, t_indptr), shape=(60, 60))
    assert (a_t != a.T).nnz == 0
    # Entry k of A^T is the edge positions[k] of A: its source is A's column there.
    assert np.array_equal(indices[positions], np.repeat(np.arange(60), np.diff(t_indptr)))


def test_traffic_bytes():
    parts = bench_cuda.traffic_bytes(num_rows=10, nnz=100, width=8)
    assert parts == {"indptr": 44, "indices": 400, "weights": 400, "gathered rows": 3200, "output": 320,
                     "total": 4364}
    dx = bench_cuda.dx_traffic_bytes(num_src=10, nnz=100, width=8)
    assert dx["edge ids"] == 400 and dx["total"] == 4364 + 400
    assert bench_cuda.dweight_traffic_bytes(nnz=100, width=8) == {"indices": 800, "gathered rows": 6400,
                                                                  "output": 400, "total": 7600}
    assert bench_cuda.pass_bytes("dx", 10, 100, 8) == dx["total"]
    gate = bench_cuda.gate_traffic_bytes(num_rows=10, nnz=100, width=8)
    assert gate == {"indptr": 44, "indices": 400, "gathered rows": 6400, "destination rows": 320, "output": 320,
                    "total": 7484}
    assert bench_cuda.pass_bytes("gate", 10, 100, 8) == gate["total"]


def test_peak_bandwidth(monkeypatch):
    # H100 SXM: 2619 MHz HBM3 on a 5120-bit bus.
    assert bench_cuda.peak_bandwidth_gbs(2_619_000, 5120) == pytest.approx(3352.3, rel=1e-3)
    assert bench_cuda.peak_bandwidth_gbs(None, 5120) is None
    assert bench_cuda.device_peak({}, "x", override=123)[0] == 123
    assert bench_cuda.device_peak({"memoryClockRate": 2_619_000, "memoryBusWidth": 5120}, "x")[0] > 3000

    def no_smi(*args, **kwargs):
        raise OSError("no nvidia-smi")

    monkeypatch.setattr(bench_cuda.subprocess, "run", no_smi)
    assert bench_cuda.device_peak({}, "NVIDIA H100 80GB HBM3")[0] == 3350.0
    assert bench_cuda.device_peak({}, "NVIDIA H200")[0] == 4800.0
    assert bench_cuda.device_peak({}, "mystery")[0] is None


def test_scratch_covers_partial_rows():
    n, nnz, width, chunk = 1000, 10**6, 602, 256
    assert bench_cuda.scratch_bytes(n, nnz, width, chunk) > 4 * (nnz // chunk) * width


def test_dry_run_prints_every_case(capsys):
    bench_cuda.main(["--dry-run", "--densities=0.0001,0.001", "--vertices=3000", "--edges=30000", "--widths=16,32"])
    out = capsys.readouterr().out
    assert out.count("moved without reuse") == 4 * 4 and "density 0.01%" in out and "d = 32" in out
    bench_cuda.main(["--dry-run", "--no-reddit", "--densities=0.001", "--passes=dweight"])
    assert capsys.readouterr().out.count("moved without reuse") == 1


def test_dry_run_writes_json(tmp_path):
    path = tmp_path / "bench.json"
    bench_cuda.main(["--dry-run", "--no-reddit", "--densities=0.001", "--passes=forward,dx", f"--json={path}"])
    report = json.loads(path.read_text())
    assert report["device"] is None and report["settings"]["repeats"] == 20
    workload = report["workloads"]["A @ X, density 0.1%"]
    assert workload["edges"] == 100_000 and set(workload["passes"]) == {"forward", "dx"}
    assert workload["passes"]["dx"]["bytes"] == bench_cuda.dx_traffic_bytes(10_000, 100_000, 128)["total"]


def test_row_formatting():
    row = bench_cuda.format_row("x", 2.0, 1.0, 500.0, 1000.0)
    assert "0.50x" in row and "50.0%" in row
    assert "-" in bench_cuda.format_row("x", 2.0, None, 500.0, None)


@pytest.mark.skipif(build_cuda.find_nvcc() is None, reason="nvcc not installed")
def test_library_builds_and_loads(tmp_path):
    lib = bench_cuda.load_library(build_cuda.check_archs(), str(ROOT / "build" / "cuda"))
    assert lib.ngra_bench_create.restype is ctypes.c_void_p
    # Without a GPU (or driver) creating a handle fails with a CUDA message, not a crash.
    handle = lib.ngra_bench_create(None, 0, 1, 1, 0, None, None, None, None, None, 256, 1 << 20)
    if handle is None:
        assert "CUDA" in lib.ngra_bench_error().decode() or "cuda" in lib.ngra_bench_error().decode()
    else:
        lib.ngra_bench_destroy(handle)


# ---- One case end to end against numpy stand-ins ----


class FakeDevice:
    """Just enough of CuPy, on numpy arrays; pointers are keys into a table."""

    def __init__(self, free_bytes=1 << 34):
        self.arrays = {}
        self.float32 = np.float32
        device = self

        class Array(np.ndarray):
            @property
            def data(self):
                return types.SimpleNamespace(ptr=device.register(self))

        self.Array = Array

        class Event:
            def record(self):
                pass

            def synchronize(self):
                pass

        self.cuda = types.SimpleNamespace(
            get_current_stream=lambda: types.SimpleNamespace(ptr=0), Device=lambda *a: types.SimpleNamespace(id=0, compute_capability="90"),
            Event=Event, get_elapsed_time=lambda a, b: 1.5,
            runtime=types.SimpleNamespace(memGetInfo=lambda: (free_bytes, 2 * free_bytes)))
        self.get_default_memory_pool = lambda: types.SimpleNamespace(free_bytes=lambda: 0)

    def register(self, array):
        key = id(array)
        self.arrays[key] = array
        return key

    def asarray(self, a):
        return np.array(a).view(self.Array)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype).view(self.Array)

    def asnumpy(self, a):
        return np.asarray(a)


class FakeLibrary:
    """The C interface of cuda_bench.cu, computed with scipy from the CSC arrays alone,
    so that the checks also test the CSR arrays and A^T the benchmark builds."""

    def __init__(self, device):
        self.device = device
        self.handles = {}

    def ngra_bench_error(self):
        return b"fake error"

    def ngra_bench_create(self, stream, dev, n_dst, n_src, nnz, indptr, indices, csr_indptr, csr_dst, csr_edge,
                          chunk, scratch):
        assert scratch >= bench_cuda.scratch_bytes(n_dst, nnz, 1, chunk)
        assert self.device.arrays[csr_indptr].size == n_src + 1 and self.device.arrays[csr_edge].size == nnz
        key = len(self.handles) + 1
        self.handles[key] = (self.device.arrays[indptr], self.device.arrays[indices], n_dst, n_src)
        return key

    def _matrix(self, handle, weight):
        indptr, indices, n_dst, n_src = self.handles[handle]
        return sp.csr_matrix((weight, indices, indptr), shape=(n_dst, n_src))

    def _spmm(self, handle, x, w, width, out):
        self.device.arrays[out][:] = self._matrix(handle, self.device.arrays[w]) @ self.device.arrays[x]
        return 0

    ngra_bench_spmm = ngra_bench_spmm_op = ngra_bench_spmm_op_cold = _spmm

    def ngra_bench_grad_src(self, handle, grad, w, width, out):
        self.device.arrays[out][:] = self._matrix(handle, self.device.arrays[w]).T @ self.device.arrays[grad]
        return 0

    def ngra_bench_grad_weight(self, handle, x, grad, width, out):
        indptr, indices, _, _ = self.handles[handle]
        dst = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        self.device.arrays[out][:] = (self.device.arrays[grad][dst] * self.device.arrays[x][indices]).sum(axis=1)
        return 0

    def ngra_bench_gate(self, handle, x2, xd, width, out):
        indptr, indices, _, _ = self.handles[handle]
        x2, xd = self.device.arrays[x2], self.device.arrays[xd]
        dst = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        messages = np.tanh(x2[indices, 0] + xd[dst]) * x2[indices, 1]
        out_array = self.device.arrays[out]
        out_array[:] = 0
        np.add.at(out_array, dst, messages)
        return 0

    ngra_bench_gate_code = ngra_bench_gate_generated = ngra_bench_gate

    def ngra_bench_gate_module(self, handle, path, x2, xd, width, out):
        with open(path, "rb") as f:  # NVRTC's CUBIN for sm_90, as the op would load it
            assert f.read(4) == b"\x7fELF"
        return self.ngra_bench_gate(handle, x2, xd, width, out)

    def ngra_bench_schedule_counts(self, handle, csr, counts):
        counts[0], counts[1], counts[2] = (8, 0, 0) if csr else (7, 1, 2)
        return 0

    def ngra_bench_destroy(self, handle):
        del self.handles[handle]


@pytest.fixture
def fake_cupyx(monkeypatch):
    sparse = types.ModuleType("cupyx.scipy.sparse")
    sparse.csr_matrix = lambda args, shape: sp.csr_matrix(tuple(np.asarray(a) for a in args), shape=shape)
    for name, module in {"cupyx": types.ModuleType("cupyx"), "cupyx.scipy": types.ModuleType("cupyx.scipy"),
                         "cupyx.scipy.sparse": sparse}.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_case_orchestration(fake_cupyx, capsys):
    device = FakeDevice()
    lib = FakeLibrary(device)
    args = bench_cuda.parse_args(["--repeats=2", "--warmup=1"])
    env = {"cp": device, "lib": lib, "torch": None, "peak": 1000.0}
    workload = bench_cuda.run_case("tiny", bench_cuda.power_law_graph(300, 3000, seed=4), 16, args, env)
    passes = workload["passes"]
    assert set(passes["forward"]["systems"]) == {"ngra fused_gather", "ngra fused_gather (op)",
                                                 "ngra fused_gather (op, no plan)", "cuSPARSE SpMM (CuPy)"}
    assert set(passes["dx"]["systems"]) == {"ngra fused_gather_grad", "cuSPARSE SpMM (CuPy)"}
    assert set(passes["dweight"]["systems"]) == {"ngra fused_gather_grad", "gather + sum (CuPy)"}
    nvrtc = "ngra edge code (NVRTC)"
    gate = {"ngra gate_tanh (template)", "ngra edge code (interp.)", "ngra edge code (generated)"}
    if isinstance(generated.nvrtc(), str):
        assert set(passes["gate"]["systems"]) == gate and nvrtc in passes["gate"]["skipped"]
    else:  # the gate compiled by NVRTC here (no GPU needed), the CUBIN handed to the library
        assert set(passes["gate"]["systems"]) == gate | {nvrtc}
    assert passes["gate"]["baseline"] == "ngra gate_tanh (template)"
    assert passes["gate"]["systems"]["ngra edge code (interp.)"]["ratio"] == 1.0
    assert passes["gate"]["bytes"] == bench_cuda.gate_traffic_bytes(300, 3000, 16)["total"]
    assert passes["dx"]["systems"]["ngra fused_gather_grad"]["ratio"] == 1.0
    assert passes["dweight"]["systems"]["ngra fused_gather_grad"]["ratio"] is None  # no torch: no SDDMM baseline
    assert passes["dweight"]["bytes"] == bench_cuda.dweight_traffic_bytes(3000, 16)["total"]
    assert lib.handles == {}  # closed
    out = capsys.readouterr().out
    assert "7 work items, 1 split segments, 2 partial rows" in out and "8 work items" in out and "1.00x" in out
    assert out.count("median ms") == 4


def test_case_skips_a_gather_that_does_not_fit(fake_cupyx, capsys):
    device = FakeDevice(free_bytes=4 * 3000 * 16 * 4 - 1)
    args = bench_cuda.parse_args(["--repeats=1", "--warmup=0", "--passes=dweight"])
    env = {"cp": device, "lib": FakeLibrary(device), "torch": None, "peak": None}
    workload = bench_cuda.run_case("tiny", bench_cuda.uniform_graph(300, 3000, seed=4), 16, args, env)
    assert set(workload["passes"]) == {"dweight"}
    assert set(workload["passes"]["dweight"]["skipped"]) == {"gather + sum (CuPy)"}
    assert "gather + sum (CuPy): skipped" in capsys.readouterr().out


@pytest.mark.parametrize("entry, passes, match", [
    ("ngra_bench_grad_weight", "dweight", "d/dweight.*ngra fused_gather_grad"),
    ("ngra_bench_gate_code", "gate", r"G-GCN gate.*ngra edge code \(interp\.\)"),
    ("ngra_bench_gate_generated", "gate", r"G-GCN gate.*ngra edge code \(generated\)"),
])
def test_case_check_catches_a_wrong_result(fake_cupyx, monkeypatch, entry, passes, match):
    def no_nvrtc(width, arch):  # the gate's NVRTC module takes ~18 s to compile and is not what this checks
        raise RuntimeError("not compiled in this test")

    monkeypatch.setattr(bench_cuda, "gate_module", no_nvrtc)
    device = FakeDevice()
    lib = FakeLibrary(device)
    setattr(lib, entry, lambda handle, first, second, width, out: device.arrays[out].fill(0) or 0)
    args = bench_cuda.parse_args(["--repeats=1", "--warmup=0", f"--passes={passes}"])
    env = {"cp": device, "lib": lib, "torch": None, "peak": None}
    with pytest.raises(AssertionError, match=match):
        bench_cuda.run_case("tiny", bench_cuda.uniform_graph(300, 3000, seed=4), 16, args, env)
    assert lib.handles == {}
