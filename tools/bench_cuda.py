"""GPU propagation benchmark: out = A @ X on one GPU and its two gradients, ngra-tf's kernels against their peers.

Runs where there are nvcc, CuPy and PyTorch but no TensorFlow (the lent GPU
machine): it builds ops/tests/cuda_bench.cu into a shared library (see
tools/build_cuda.py) and calls it through ctypes on CuPy's arrays.

Passes (--passes) and their systems, all on the same device arrays, each checked first.
G is a random upstream gradient d loss / d out; edge e goes from src(e) to dst(e).
  forward   out = A @ X, checked against cuSPARSE
    ngra fused_gather           src_mul_edge + sum over the schedule of the graph's plan, made once
    ngra fused_gather (op)      the TF op's per-call path given the graph's plan (NgraPrepareGraph):
                                host checks of the shapes, then the kernels
    ngra fused_gather (op, no plan)  the same op without a plan: device checks (one sync), a fresh
                                schedule, kernels, on every call
    cuSPARSE SpMM (CuPy)        cupyx.scipy.sparse.csr_matrix @ dense
    torch.sparse.mm             a CUDA CSR tensor @ dense
  dx        d/dX = A^T @ G, checked against cuSPARSE
    ngra fused_gather_grad      the d/dx_src walk over the edges grouped by source, schedule built once
    cuSPARSE SpMM (CuPy)        A^T as a CSR matrix built once (like ngra's schedule) @ G
    torch.sparse.mm             A^T as a CUDA CSR tensor built once @ G
  dweight   d/dweight[e] = G[dst(e)] . X[src(e)] (an SDDMM), checked against float64 numpy on sampled edges
    ngra fused_gather_grad      the d/dweight walk over the forward's schedule
    torch.sparse.sampled_addmm  cuSPARSE's SDDMM on A's pattern
    gather + sum (CuPy)         (G[dst] * X[src]).sum(1); skipped where its E x d rows exceed a quarter
                                of free device memory
  gate      G-GCN's edge gate out[v] = sum over edges u -> v of tanh(a[u] + b[v]) * c[u], checked against
            float64 numpy on sampled destinations; ngra's generic edge code against its own template:
    ngra gate_tanh (template)   fused_gather's compiled gate_tanh program (the pass's baseline)
    ngra edge code (interp.)    the same stage as edge code (ops/kernels/edge_code.h), the program
                                interpreted per edge and feature, over the same schedule
    ngra edge code (generated)  the same edge code as its generated kernel: the program unrolled at
                                compile time into straight-line code (FixedCode,
                                ops/cuda/edge_code_programs.h), over the same schedule
    ngra edge code (NVRTC)      the same generated kernel as the op runs it: compiled at first use by
                                NVRTC from ngra_tf.ops.generated.cuda_module (cached on disk) and
                                loaded from the file; skipped where NVRTC is missing

Workloads:
  (a) NGra §6.1: A is 10,000 x 10,000 at densities 0.01%, 0.1%, 1%, 10%; X is 10,000 x 128 float32;
  (b) a reddit-middle-like power-law graph (233K vertices, 23.2M edges), d = 128 and 602.

Reported per workload and pass: median ms over --repeats (after --warmup runs), each
system's time relative to the pass's cuSPARSE baseline, and effective GB/s against the
device's peak memory bandwidth. The bytes counted are those a kernel without cache
reuse must move (traffic_bytes and its siblings): for the products indptr, per edge its
index, its weight and the gathered row, and the output (d/dX also an edge id per edge:
its walk finds the weights through them); for d/dweight per edge two indices, two
gathered rows and one output. --json writes every result for later scripts.

    python tools/bench_cuda.py                      # everything
    python tools/bench_cuda.py --quick              # reddit at 1/10 scale, fewer repeats
    python tools/bench_cuda.py --passes=dx,dweight  # the gradients only
    python tools/bench_cuda.py --json=bench.json    # also write the results as JSON
    python tools/bench_cuda.py --dry-run            # no GPU: graphs and byte counts only
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import build_cuda  # noqa: E402  (tools/ is not a package)

# ---- Graphs (numpy only; the same constructions as ngra_tf.graph.synthetic) ----


def csr_from_edges(dst, src, num_rows):
    """CSR of A with A[dst, src] = 1 per edge (src < num_rows): rows are destinations, sorted by (dst, src)."""
    dst = np.asarray(dst, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    # Sorting the keys themselves (numpy's vectorised sort) gives what a stable argsort did: equal keys are
    # the same edge twice. 23M edges: 2.7-2.9 s against 4.1-5.1 s (2-core Zen 4).
    keys = np.sort(dst * max(num_rows, 1) + src)
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_rows), out=indptr[1:])
    if indptr[-1] >= 2**31:
        raise ValueError("too many edges for int32 indices")
    return indptr.astype(np.int32), (keys % max(num_rows, 1)).astype(np.int32)


def uniform_graph(n, nnz, seed=0):
    """nnz distinct cells of an n x n matrix, uniformly at random.

    The draws that collide are drawn again, as many as are missing, until none is; the cells found so
    far are sorted once and each top-up is checked against them by binary search (re-sorting them all
    per top-up took 9 s at 10 % density)."""
    if nnz > n * n:
        raise ValueError(f"cannot draw {nnz} distinct cells from a {n} x {n} matrix")
    rng = np.random.default_rng(seed)
    found = np.unique(rng.integers(0, n * n, nnz, dtype=np.int64))  # cell src * n + dst
    extra = np.empty(0, dtype=np.int64)  # sorted, none of them in found
    while found.size + extra.size < nnz:
        more = np.unique(rng.integers(0, n * n, nnz - found.size - extra.size, dtype=np.int64))
        extra = np.union1d(extra, more[~_in_sorted(found, more)])
    cells = np.concatenate([found, extra])
    return csr_from_edges(cells % n, cells // n, n)


def _in_sorted(sorted_values, values):
    """Whether each of values is in sorted_values (sorted ascending)."""
    at = np.minimum(np.searchsorted(sorted_values, values), max(sorted_values.size - 1, 0))
    return sorted_values[at] == values if sorted_values.size else np.zeros(values.shape, dtype=bool)


def power_law_graph(n, nnz, exponent=2.2, seed=0):
    """Chung-Lu: both endpoints drawn with probability ~ rank^(-1/(exponent-1)), ids shuffled."""
    if exponent <= 1:
        raise ValueError(f"exponent must be > 1, got {exponent}")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    cumulative = np.cumsum(weights)
    cumulative /= cumulative[-1]
    relabel = rng.permutation(n)

    def draw():
        return relabel[np.minimum(np.searchsorted(cumulative, rng.random(nnz)), n - 1)]

    src, dst = draw(), draw()
    return csr_from_edges(dst, src, n)


def edge_rows(indptr):
    """The row of each position of a CSR matrix: the destination of each edge here."""
    return np.repeat(np.arange(indptr.size - 1, dtype=np.int32), np.diff(indptr))


def transpose_csr(indptr, indices, num_cols):
    """A^T in CSR (rows are sources): (indptr, indices, positions), int32.

    positions[k] is where A^T's entry k sits in A's data. These are the edge ids
    of ngra's CSR segments (the forward's edge ids are its CSC positions, which are
    A's CSR positions here), and they put A's weights in A^T's order. The sort is
    stable, so each row's destinations stay ascending."""
    positions = np.argsort(indices, kind="stable").astype(np.int32)
    t_indptr = np.zeros(num_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=num_cols), out=t_indptr[1:])
    return t_indptr.astype(np.int32), edge_rows(indptr)[positions], positions


# ---- Accounting ----


def with_total(parts):
    parts["total"] = sum(parts.values())
    return parts


def traffic_bytes(num_rows, nnz, width, value_bytes=4, index_bytes=4):
    """Bytes an SpMM without cache reuse moves, by part, and their total."""
    return with_total({
        "indptr": (num_rows + 1) * index_bytes,
        "indices": nnz * index_bytes,
        "weights": nnz * value_bytes,
        "gathered rows": nnz * width * value_bytes,
        "output": num_rows * width * value_bytes,
    })


def dx_traffic_bytes(num_src, nnz, width, value_bytes=4, index_bytes=4):
    """d/dX = A^T @ G: the SpMM's bytes over the transposed graph, plus the edge id
    through which the walk by source finds each weight."""
    return with_total({
        "indptr": (num_src + 1) * index_bytes,
        "indices": nnz * index_bytes,
        "edge ids": nnz * index_bytes,
        "weights": nnz * value_bytes,
        "gathered rows": nnz * width * value_bytes,
        "output": num_src * width * value_bytes,
    })


def dweight_traffic_bytes(nnz, width, value_bytes=4, index_bytes=4):
    """d/dweight[e] = G[dst(e)] . X[src(e)] (an SDDMM): both ends of each edge, both gathered rows, one output each."""
    return with_total({
        "indices": 2 * nnz * index_bytes,
        "gathered rows": 2 * nnz * width * value_bytes,
        "output": nnz * value_bytes,
    })


def gate_traffic_bytes(num_rows, nnz, width, value_bytes=4, index_bytes=4):
    """G-GCN's gate on a square graph: per edge its index and the gathered [a | c] row (2 x d),
    per destination its b row and its output."""
    return with_total({
        "indptr": (num_rows + 1) * index_bytes,
        "indices": nnz * index_bytes,
        "gathered rows": nnz * 2 * width * value_bytes,
        "destination rows": num_rows * width * value_bytes,
        "output": num_rows * width * value_bytes,
    })


PASSES = {
    "forward": "forward, out = A @ X",
    "dx": "backward, d/dX = A^T @ G",
    "dweight": "backward, d/dweight[e] = G[dst(e)] . X[src(e)]",
    "gate": "forward, G-GCN gate: sum of tanh(a[src] + b[dst]) * c[src], edge code vs template",
}
# Each pass's ratios are against cuSPARSE: its SpMM through CuPy, its SDDMM through torch; the
# gate's against ngra's own compiled template, which the generic edge code is meant to approach.
BASELINES = {"forward": "cuSPARSE SpMM (CuPy)", "dx": "cuSPARSE SpMM (CuPy)", "dweight": "torch.sparse.sampled_addmm",
             "gate": "ngra gate_tanh (template)"}


def pass_bytes(name, num_vertices, nnz, width):
    """The bytes one pass moves on this benchmark's square graphs."""
    if name == "forward":
        return traffic_bytes(num_vertices, nnz, width)["total"]
    if name == "dx":
        return dx_traffic_bytes(num_vertices, nnz, width)["total"]
    if name == "gate":
        return gate_traffic_bytes(num_vertices, nnz, width)["total"]
    return dweight_traffic_bytes(nnz, width)["total"]


def peak_bandwidth_gbs(memory_clock_khz, bus_width_bits):
    """Peak DRAM bandwidth: two transfers per memory clock (DDR/HBM) over the bus."""
    if not memory_clock_khz or not bus_width_bits:
        return None
    return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8) / 1e9


# Fallbacks by device name (GB/s, vendor figures) when the properties lack the clock.
KNOWN_PEAKS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 NVL": 3900.0, "H100 PCIe": 2000.0, "H100": 3350.0,
               "A100-SXM4-80GB": 2039.0, "A100-SXM4-40GB": 1555.0, "A100": 1555.0, "L40S": 864.0}


def device_peak(props, name, override=None):
    """(GB/s, where the figure came from)."""
    if override:
        return float(override), "--peak-gbs"
    peak = peak_bandwidth_gbs(props.get("memoryClockRate"), props.get("memoryBusWidth"))
    if peak:
        return peak, "device properties (memory clock x bus width)"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
        mhz = float(smi.stdout.split()[0])
        peak = peak_bandwidth_gbs(mhz * 1e3, props.get("memoryBusWidth"))
        if peak:
            return peak, "nvidia-smi memory clock x bus width"
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        pass
    for key, value in KNOWN_PEAKS.items():
        if key in name:
            return value, f"vendor figure for {key}"
    return None, "unknown (pass --peak-gbs)"


def relative_error(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))) if want.size else 0.0


def format_row(name, ms, baseline_ms, gbs, peak):
    ratio = f"{baseline_ms / ms:8.2f}x" if baseline_ms and ms else "       -"
    roof = f"{100 * gbs / peak:6.1f}%" if peak else "     -"
    return f"  {name:28s} {ms:10.3f} {ratio} {gbs:10.1f} {roof}"


# ---- GPU side ----


def load_library(archs, out, verbose=False, defines=()):
    path = build_cuda.build_bench_lib(archs, out, verbose=verbose, defines=defines)
    lib = ctypes.CDLL(path)
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.ngra_bench_error.restype = ctypes.c_char_p
    lib.ngra_bench_create.restype = p
    lib.ngra_bench_create.argtypes = [p, ctypes.c_int, i64, i64, i64, p, p, p, p, p, i64, i64]
    lib.ngra_bench_destroy.argtypes = [p]
    for name in ("ngra_bench_spmm", "ngra_bench_spmm_op", "ngra_bench_spmm_op_cold", "ngra_bench_grad_src",
                 "ngra_bench_grad_weight", "ngra_bench_gate", "ngra_bench_gate_code",
                 "ngra_bench_gate_generated"):
        getattr(lib, name).argtypes = [p, p, p, i64, p]
        getattr(lib, name).restype = ctypes.c_int
    lib.ngra_bench_gate_module.argtypes = [p, ctypes.c_char_p, p, p, i64, p]
    lib.ngra_bench_gate_module.restype = ctypes.c_int
    lib.ngra_bench_schedule_counts.argtypes = [p, ctypes.c_int, ctypes.POINTER(i64)]
    return lib


def gate_module(width, arch):
    """The gate's generated kernels for `arch`, compiled by NVRTC as the op compiles them (the same module
    source and cache): the file's path; RuntimeError where NVRTC is missing or fails."""
    import generated_cases  # noqa: PLC0415  (beside this file; loads ngra_tf's TF-free modules)

    generated = generated_cases.generated
    path = generated.cuda_kernels_for(generated_cases.gate(width), "float32", "int32", "sum", arch=arch)
    if not path:  # the bench library has its own GPU kernels: only NVRTC matters here
        raise RuntimeError(generated.nvrtc_status())
    return path


def scratch_bytes(num_rows, nnz, width, chunk):
    """Scratch one op call needs: checks, the schedule, partial rows (see schedule.h).
    On a square graph this also bounds the partial rows of the d/dX walk."""
    return 64 * (num_rows + 1) + 24 * (num_rows + nnz // chunk + 1) + 4 * (nnz // chunk) * width + (64 << 20)


class Case:
    """One graph and width on the device: for each pass, every system as a zero-argument callable
    (systems[pass][name]), and the systems left out, with why (skipped[pass][name])."""

    def __init__(self, cp, lib, indptr, indices, width, chunk, passes, torch=None, seed=0):
        rng = np.random.default_rng(seed)
        n = indptr.size - 1
        nnz = indices.size
        self.cp, self.lib, self.n, self.nnz, self.width = cp, lib, n, nnz, width
        self.indptr = cp.asarray(indptr)
        self.indices = cp.asarray(indices)
        self.edge_dst = cp.asarray(edge_rows(indptr))
        self.csr_indptr, self.csr_dst, self.csr_edge = (cp.asarray(a) for a in transpose_csr(indptr, indices, n))
        self.weight = cp.asarray(rng.random(nnz, dtype=np.float32))
        self.x = cp.asarray(rng.standard_normal((n, width), dtype=np.float32))
        self.grad = cp.asarray(rng.standard_normal((n, width), dtype=np.float32))
        self.out = cp.empty((n, width), dtype=cp.float32)
        self.out_dx = cp.empty((n, width), dtype=cp.float32)
        self.out_dweight = cp.empty(nnz, dtype=cp.float32)
        if "gate" in passes:  # [a | c] per source, b per destination
            self.x2 = cp.asarray(rng.standard_normal((n, 2, width), dtype=np.float32))
            self.xd = cp.asarray(rng.standard_normal((n, width), dtype=np.float32))
            self.out_gate = cp.empty((n, width), dtype=cp.float32)
        stream = cp.cuda.get_current_stream()
        self.handle = lib.ngra_bench_create(stream.ptr, cp.cuda.Device().id, n, n, nnz, self.indptr.data.ptr,
                                            self.indices.data.ptr, self.csr_indptr.data.ptr, self.csr_dst.data.ptr,
                                            self.csr_edge.data.ptr, chunk, scratch_bytes(n, nnz, width, chunk))
        if not self.handle:
            raise RuntimeError(lib.ngra_bench_error().decode())
        import cupyx.scipy.sparse as cusparse

        self.matrix = cusparse.csr_matrix((self.weight, self.indices, self.indptr), shape=(n, n))
        # Built once, as ngra's CSR schedule is: the graph and its weights do not change between calls.
        self.matrix_t = cusparse.csr_matrix((self.weight[self.csr_edge], self.csr_dst, self.csr_indptr), shape=(n, n))
        if torch is not None:
            def as_torch(a):
                return torch.as_tensor(a, device="cuda")

            self.t_matrix = torch.sparse_csr_tensor(as_torch(self.indptr), as_torch(self.indices),
                                                    as_torch(self.weight), size=(n, n))
            self.t_matrix_t = torch.sparse_csr_tensor(as_torch(self.csr_indptr), as_torch(self.csr_dst),
                                                      as_torch(self.matrix_t.data), size=(n, n))
            self.t_x, self.t_grad = as_torch(self.x), as_torch(self.grad)
        builders = {"forward": self._forward_systems, "dx": self._dx_systems, "dweight": self._dweight_systems,
                    "gate": self._gate_systems}
        self.skipped = {name: {} for name in passes}
        self.systems = {name: builders[name](torch) for name in passes}

    def _forward_systems(self, torch):
        systems = {
            "ngra fused_gather": lambda: self._ngra("ngra_bench_spmm", self.x, self.weight, self.out),
            "ngra fused_gather (op)": lambda: self._ngra("ngra_bench_spmm_op", self.x, self.weight, self.out),
            "ngra fused_gather (op, no plan)": lambda: self._ngra("ngra_bench_spmm_op_cold", self.x, self.weight,
                                                                  self.out),
            "cuSPARSE SpMM (CuPy)": lambda: self.matrix @ self.x,
        }
        if torch is not None:
            systems["torch.sparse.mm"] = lambda: torch.sparse.mm(self.t_matrix, self.t_x)
        return systems

    def _dx_systems(self, torch):
        systems = {
            "ngra fused_gather_grad": lambda: self._ngra("ngra_bench_grad_src", self.grad, self.weight, self.out_dx),
            "cuSPARSE SpMM (CuPy)": lambda: self.matrix_t @ self.grad,
        }
        if torch is not None:
            systems["torch.sparse.mm"] = lambda: torch.sparse.mm(self.t_matrix_t, self.t_grad)
        return systems

    def _dweight_systems(self, torch):
        systems = {
            "ngra fused_gather_grad": lambda: self._ngra("ngra_bench_grad_weight", self.x, self.grad,
                                                         self.out_dweight),
        }
        if torch is not None:
            # alpha (G @ X^T) * spy(A) + beta A with beta = 0: G @ X^T at A's entries, in A's order
            # (edge order). X^T is a column-major view, which cuSPARSE takes as it is.
            systems["torch.sparse.sampled_addmm"] = lambda: torch.sparse.sampled_addmm(
                self.t_matrix, self.t_grad, self.t_x.T, beta=0.0, alpha=1.0).values()
        gathered = self.nnz * self.width * 4
        if gathered <= self.free_bytes() / 4:
            systems["gather + sum (CuPy)"] = lambda: (self.grad[self.edge_dst] * self.x[self.indices]).sum(axis=1)
        else:
            self.skipped["dweight"]["gather + sum (CuPy)"] = (
                f"its {gathered / 1e9:.1f} GB of gathered rows exceed a quarter of free device memory")
        return systems

    def _gate_systems(self, torch):
        systems = {
            "ngra gate_tanh (template)": lambda: self._ngra("ngra_bench_gate", self.x2, self.xd, self.out_gate),
            "ngra edge code (interp.)": lambda: self._ngra("ngra_bench_gate_code", self.x2, self.xd, self.out_gate),
            "ngra edge code (generated)": lambda: self._ngra("ngra_bench_gate_generated", self.x2, self.xd,
                                                             self.out_gate),
        }
        try:
            path = gate_module(self.width, f"sm_{self.cp.cuda.Device().compute_capability}").encode()
        except RuntimeError as error:
            self.skipped["gate"]["ngra edge code (NVRTC)"] = str(error)
            return systems

        def module():
            status = self.lib.ngra_bench_gate_module(self.handle, path, self.x2.data.ptr, self.xd.data.ptr, self.width,
                                                     self.out_gate.data.ptr)
            if status != 0:
                raise RuntimeError(self.lib.ngra_bench_error().decode())
            return self.out_gate

        systems["ngra edge code (NVRTC)"] = module
        return systems

    def free_bytes(self):
        """Device memory free to allocate: the driver's, and what CuPy's pool holds unused."""
        return self.cp.cuda.runtime.memGetInfo()[0] + self.cp.get_default_memory_pool().free_bytes()

    def _ngra(self, entry, first, second, out):
        status = getattr(self.lib, entry)(self.handle, first.data.ptr, second.data.ptr, self.width, out.data.ptr)
        if status != 0:
            raise RuntimeError(self.lib.ngra_bench_error().decode())
        return out

    def check(self, tolerance=1e-4):
        """Every system of every pass against its pass's reference, before anything is timed."""
        for name, systems in self.systems.items():
            want, at, reference = self._reference(name)
            for system, fn in systems.items():
                got = fn()
                got = got.cpu().numpy() if hasattr(got, "cpu") else self.cp.asnumpy(got)
                error = relative_error(got[at], want)
                if error > tolerance:
                    raise AssertionError(f"{PASSES[name]}: {system} disagrees with {reference}: "
                                         f"relative error {error:.2e}")

    def _reference(self, name):
        """(the expected values, where in a result they are, what computed them)."""
        if name == "forward":
            return self.cp.asnumpy(self.matrix @ self.x), slice(None), "cuSPARSE"
        if name == "dx":
            return self.cp.asnumpy(self.matrix_t @ self.grad), slice(None), "cuSPARSE"
        if name == "gate":
            return self._gate_reference()
        edges = self._sample_edges()
        at = self.cp.asarray(edges)
        g = self.cp.asnumpy(self.grad[self.edge_dst[at]]).astype(np.float64)
        x = self.cp.asnumpy(self.x[self.indices[at]]).astype(np.float64)
        return np.einsum("ij,ij->i", g, x), edges, "float64 numpy"

    def _gate_reference(self, size=512):
        """The gate in float64 numpy at a random sample of destinations."""
        rows = np.sort(np.random.default_rng(2).choice(self.n, size=min(size, self.n), replace=False))
        indptr, indices = self.cp.asnumpy(self.indptr), self.cp.asnumpy(self.indices)
        x2, xd = self.cp.asnumpy(self.x2).astype(np.float64), self.cp.asnumpy(self.xd).astype(np.float64)
        want = np.zeros((rows.size, self.width))
        for i, v in enumerate(rows):
            src = indices[indptr[v]:indptr[v + 1]]
            want[i] = (np.tanh(x2[src, 0] + xd[v]) * x2[src, 1]).sum(axis=0)
        return want, rows, "float64 numpy"

    def _sample_edges(self, size=4096):
        """A random sample of edges for the d/dweight reference (float64 dot products of all of them
        would take minutes on the host)."""
        rng = np.random.default_rng(1)
        return np.sort(rng.choice(self.nnz, size=min(size, self.nnz), replace=False))

    def schedule_counts(self, csr=False):
        counts = (ctypes.c_int64 * 3)()
        self.lib.ngra_bench_schedule_counts(self.handle, int(csr), counts)
        return list(counts)

    def close(self):
        if self.handle:
            self.lib.ngra_bench_destroy(self.handle)
            self.handle = None


def time_ms(cp, fn, repeats, warmup, torch=None):
    """Median of per-call device times, each bracketed by events on the current stream."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def time_pass(case, name, bytes_moved, args, env):
    """Times and prints one pass: {"baseline", "systems": {system: median_ms, gbs, ratio}, "skipped"}.
    ratio is the baseline's median ms over the system's: above 1, faster than cuSPARSE."""
    cp, torch, peak = env["cp"], env["torch"], env["peak"]
    for system, why in case.skipped[name].items():
        print(f"    {system}: skipped, {why}")
    times = {system: time_ms(cp, fn, args.repeats, args.warmup, torch if system.startswith("torch") else None)
             for system, fn in case.systems[name].items()}
    baseline = times.get(BASELINES[name])
    print(f"    {'system':28s} {'median ms':>10s} {'cuSPARSE/':>9s} {'eff. GB/s':>10s} {'of peak':>7s}")
    systems = {}
    for system, ms in times.items():
        gbs = bytes_moved / (ms / 1e3) / 1e9
        print("  " + format_row(system, ms, baseline, gbs, peak))
        systems[system] = {"median_ms": ms, "gbs": gbs, "ratio": baseline / ms if baseline and ms else None}
    return {"baseline": BASELINES[name], "systems": systems, "skipped": case.skipped[name]}


def run_case(label, graph, width, args, env):
    """Checks, times and prints the passes of one workload; returns its results (without env, only byte counts)."""
    indptr, indices = graph
    n, nnz = indptr.size - 1, indices.size
    print(f"\n{label}: {n} x {n}, {nnz} edges, d = {width}")
    workload = {"vertices": n, "edges": nnz, "width": width, "passes": {}}
    case = None
    if env is not None:
        case = Case(env["cp"], env["lib"], indptr, indices, width, args.chunk, args.passes, torch=env["torch"],
                    seed=args.seed)
    try:
        if case is not None:
            case.check()
            # d/dweight walks the destinations again in finer chunks (PerEdgeWalk in ops/cuda/api.h).
            for csr, walk in ((False, "by destination (forward)"), (True, "by source (d/dX)")):
                items, split, partial_rows = case.schedule_counts(csr)
                print(f"  schedule {walk}: {items} work items, {split} split segments, {partial_rows} partial rows "
                      f"(chunk {args.chunk})")
        for name in args.passes:
            bytes_moved = pass_bytes(name, n, nnz, width)
            print(f"  {PASSES[name]}: {bytes_moved / 1e9:.3f} GB moved without reuse")
            workload["passes"][name] = {"bytes": bytes_moved}
            if case is not None:
                workload["passes"][name].update(time_pass(case, name, bytes_moved, args, env))
        return workload
    finally:
        if case is not None:
            case.close()


def gpu_environment(args):
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # no CuPy, or no driver or device (a CUDARuntimeError)
        sys.exit(f"bench_cuda.py needs CuPy and a CUDA GPU ({type(error).__name__}: {error}); "
                 "--dry-run generates the graphs and counts bytes without one")
    try:
        import torch

        if not torch.cuda.is_available() or args.skip_torch:
            torch = None
    except ImportError:
        torch = None
    device = cp.cuda.Device(0)
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    peak, source = device_peak(props, name, args.peak_gbs)
    archs = args.arch or [device.compute_capability]
    print(f"device: {name}, compute capability {device.compute_capability}; peak memory bandwidth "
          f"{peak or float('nan'):.0f} GB/s ({source}); CuPy {cp.__version__}"
          + (f", torch {torch.__version__}" if torch is not None else ", torch not used"))
    start = time.perf_counter()
    lib = load_library(archs, args.build_dir, verbose=args.verbose, defines=args.define)
    print(f"built/loaded the benchmark library for sm_{'/'.join(archs)} in {time.perf_counter() - start:.0f} s"
          + (f" with {' '.join(args.define)}" if args.define else ""))
    about = {"name": name, "compute_capability": device.compute_capability, "peak_gbs": peak, "peak_source": source,
             "cupy": cp.__version__, "torch": torch.__version__ if torch is not None else None}
    return {"cp": cp, "torch": torch, "lib": lib, "peak": peak, "device": about}


def write_json(path, args, env, workloads):
    """Everything measured, for scripts that make tables: per workload (by label), pass and system."""
    report = {
        "device": env["device"] if env is not None else None,
        "settings": {"repeats": args.repeats, "warmup": args.warmup, "chunk": args.chunk, "seed": args.seed},
        "workloads": workloads,
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"\nwrote {path}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--densities", default="0.0001,0.001,0.01,0.1",
                        help="densities of the 10K x 10K matrix, comma-separated")
    parser.add_argument("--no-uniform", dest="uniform", action="store_false", help="skip workload (a)")
    parser.add_argument("--no-reddit", dest="reddit", action="store_false", help="skip workload (b)")
    parser.add_argument("--vertices", type=int, default=233_000)
    parser.add_argument("--edges", type=int, default=23_200_000)
    parser.add_argument("--widths", default="128,602", help="feature widths of workload (b)")
    parser.add_argument("--passes", default=",".join(PASSES), help=f"comma-separated, of {', '.join(PASSES)}")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=1024, help="edges per work item before a segment is split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peak-gbs", type=float, default=None, help="override the peak memory bandwidth")
    parser.add_argument("--arch", action="append", help="compute capability to build for (default: the device's)")
    parser.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                        help="a kernel tuning macro, e.g. NGRA_GPU_EDGE_UNROLL=8 (repeatable)")
    parser.add_argument("--build-dir", default=os.path.join(build_cuda.ROOT, "build", "cuda"))
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--quick", action="store_true", help="reddit at 1/10 scale, 5 repeats")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: generate the graphs and count bytes")
    parser.add_argument("--json", metavar="PATH", help="also write every result to PATH as JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        args.densities = [float(d) for d in args.densities.split(",") if d.strip()]
        args.widths = [int(w) for w in args.widths.split(",") if w.strip()]
    except ValueError as error:
        parser.error(f"--densities and --widths take comma-separated numbers: {error}")
    if any(not 0 < d <= 1 for d in args.densities):
        parser.error("densities must be in (0, 1]")
    if any(w < 1 for w in args.widths) or args.chunk < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--widths, --chunk and --repeats must be positive, --warmup non-negative")
    passes = {p.strip() for p in args.passes.split(",") if p.strip()}
    if not passes or not passes <= set(PASSES):
        parser.error(f"--passes takes some of {', '.join(PASSES)}, got {args.passes!r}")
    args.passes = [p for p in PASSES if p in passes]  # tables in a fixed order
    if args.quick:
        args.vertices //= 10
        args.edges //= 10
        args.repeats = min(args.repeats, 5)
    return args


def main(argv=None):
    args = parse_args(argv)
    env = None if args.dry_run else gpu_environment(args)
    workloads = {}
    if args.uniform:
        for density in args.densities:
            n = 10_000
            graph = uniform_graph(n, int(round(density * n * n)), seed=args.seed)
            label = f"A @ X, density {density * 100:g}%"
            workloads[label] = run_case(label, graph, 128, args, env)
    if args.reddit:
        start = time.perf_counter()
        graph = power_law_graph(args.vertices, args.edges, seed=args.seed)
        print(f"\n(generated the power-law graph in {time.perf_counter() - start:.1f} s)")
        for width in args.widths:
            label = f"reddit-middle-like, d = {width}"
            workloads[label] = run_case(label, graph, width, args, env)
    if args.json:
        write_json(args.json, args, env, workloads)
    return workloads


if __name__ == "__main__":
    main()
