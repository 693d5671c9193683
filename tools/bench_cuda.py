"""GPU propagation benchmark: out = A @ X on one GPU, ngra-tf's kernel against its peers.

Runs where there are nvcc, CuPy and PyTorch but no TensorFlow (the lent GPU
machine): it builds ops/tests/cuda_bench.cu into a shared library (see
tools/build_cuda.py) and calls it through ctypes on CuPy's arrays.

Systems, all on the same device arrays, checked against cuSPARSE first:
  ngra fused_gather        src_mul_edge + sum over a schedule built once per graph
  ngra fused_gather (op)   the TF op's per-call path: device checks (one sync), schedule, kernels
  cuSPARSE SpMM (CuPy)     cupyx.scipy.sparse.csr_matrix @ dense
  torch.sparse.mm          a CUDA CSR tensor @ dense

Workloads:
  (a) NGra §6.1: A is 10,000 x 10,000 at densities 0.01%, 0.1%, 1%, 10%; X is 10,000 x 128 float32;
  (b) a reddit-middle-like power-law graph (233K vertices, 23.2M edges), d = 128 and 602.

Reported: median ms over --repeats (after --warmup runs), each system's time relative to
cuSPARSE, and effective GB/s against the device's peak memory bandwidth. The bytes
counted are those a kernel without cache reuse must move: indptr, per edge its index,
its weight and the gathered row of X, and the output.

    python tools/bench_cuda.py                      # everything
    python tools/bench_cuda.py --quick              # reddit at 1/10 scale, fewer repeats
    python tools/bench_cuda.py --dry-run            # no GPU: graphs and byte counts only
"""

from __future__ import annotations

import argparse
import ctypes
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
    """CSR of A with A[dst, src] = 1 per edge: rows are destinations, sorted by (dst, src)."""
    dst = np.asarray(dst, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    order = np.argsort(dst * max(num_rows, 1) + src, kind="stable")
    indices = src[order].astype(np.int32)
    counts = np.bincount(dst, minlength=num_rows)
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    if indptr[-1] >= 2**31:
        raise ValueError("too many edges for int32 indices")
    return indptr.astype(np.int32), indices


def uniform_graph(n, nnz, seed=0):
    """nnz distinct cells of an n x n matrix, uniformly at random."""
    if nnz > n * n:
        raise ValueError(f"cannot draw {nnz} distinct cells from a {n} x {n} matrix")
    rng = np.random.default_rng(seed)
    found = np.unique(rng.integers(0, n * n, nnz, dtype=np.int64))
    while found.size < nnz:  # top up after collisions
        found = np.unique(np.concatenate([found, rng.integers(0, n * n, nnz - found.size, dtype=np.int64)]))
    src, dst = np.divmod(rng.permutation(found)[:nnz], n)
    return csr_from_edges(dst, src, n)


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


# ---- Accounting ----


def traffic_bytes(num_rows, nnz, width, value_bytes=4, index_bytes=4):
    """Bytes an SpMM without cache reuse moves, by part, and their total."""
    parts = {
        "indptr": (num_rows + 1) * index_bytes,
        "indices": nnz * index_bytes,
        "weights": nnz * value_bytes,
        "gathered rows": nnz * width * value_bytes,
        "output": num_rows * width * value_bytes,
    }
    parts["total"] = sum(parts.values())
    return parts


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


def load_library(archs, out, verbose=False):
    path = build_cuda.build_bench_lib(archs, out, verbose=verbose)
    lib = ctypes.CDLL(path)
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.ngra_bench_error.restype = ctypes.c_char_p
    lib.ngra_bench_create.restype = p
    lib.ngra_bench_create.argtypes = [p, ctypes.c_int, i64, i64, i64, p, p, i64, i64]
    lib.ngra_bench_destroy.argtypes = [p]
    for name in ("ngra_bench_spmm", "ngra_bench_spmm_op"):
        getattr(lib, name).argtypes = [p, p, p, i64, p]
        getattr(lib, name).restype = ctypes.c_int
    lib.ngra_bench_schedule_counts.argtypes = [p, ctypes.POINTER(i64)]
    return lib


def scratch_bytes(num_rows, nnz, width, chunk):
    """Scratch one op call needs: checks, the schedule, partial rows (see schedule.h)."""
    return 64 * (num_rows + 1) + 24 * (num_rows + nnz // chunk + 1) + 4 * (nnz // chunk) * width + (64 << 20)


class Case:
    """One A @ X problem on the device, with every system as a zero-argument callable."""

    def __init__(self, cp, lib, indptr, indices, width, chunk, torch=None, seed=0):
        rng = np.random.default_rng(seed)
        n = indptr.size - 1
        nnz = indices.size
        self.cp, self.lib, self.n, self.nnz, self.width = cp, lib, n, nnz, width
        self.indptr = cp.asarray(indptr)
        self.indices = cp.asarray(indices)
        self.weight = cp.asarray(rng.random(nnz, dtype=np.float32))
        self.x = cp.asarray(rng.standard_normal((n, width), dtype=np.float32))
        self.out = cp.empty((n, width), dtype=cp.float32)
        stream = cp.cuda.get_current_stream()
        self.handle = lib.ngra_bench_create(stream.ptr, cp.cuda.Device().id, n, n, nnz, self.indptr.data.ptr,
                                            self.indices.data.ptr, chunk, scratch_bytes(n, nnz, width, chunk))
        if not self.handle:
            raise RuntimeError(lib.ngra_bench_error().decode())
        import cupyx.scipy.sparse as cusparse

        self.matrix = cusparse.csr_matrix((self.weight, self.indices, self.indptr), shape=(n, n))
        self.systems = {
            "ngra fused_gather": lambda: self._ngra("ngra_bench_spmm"),
            "ngra fused_gather (op)": lambda: self._ngra("ngra_bench_spmm_op"),
            "cuSPARSE SpMM (CuPy)": lambda: self.matrix @ self.x,
        }
        if torch is not None:
            t_indptr = torch.as_tensor(self.indptr, device="cuda")
            t_indices = torch.as_tensor(self.indices, device="cuda")
            t_weight = torch.as_tensor(self.weight, device="cuda")
            self.t_matrix = torch.sparse_csr_tensor(t_indptr, t_indices, t_weight, size=(n, n))
            self.t_x = torch.as_tensor(self.x, device="cuda")
            self.systems["torch.sparse.mm"] = lambda: torch.sparse.mm(self.t_matrix, self.t_x)
            self.torch = torch

    def _ngra(self, entry):
        status = getattr(self.lib, entry)(self.handle, self.x.data.ptr, self.weight.data.ptr, self.width,
                                          self.out.data.ptr)
        if status != 0:
            raise RuntimeError(self.lib.ngra_bench_error().decode())
        return self.out

    def check(self, tolerance=1e-4):
        want = self.cp.asnumpy(self.matrix @ self.x)
        for name, fn in self.systems.items():
            got = fn()
            got = got.cpu().numpy() if hasattr(got, "cpu") else self.cp.asnumpy(got)
            error = relative_error(got, want)
            if error > tolerance:
                raise AssertionError(f"{name} disagrees with cuSPARSE: relative error {error:.2e}")

    def schedule_counts(self):
        counts = (ctypes.c_int64 * 3)()
        self.lib.ngra_bench_schedule_counts(self.handle, counts)
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


def run_case(label, graph, width, args, env):
    indptr, indices = graph
    n, nnz = indptr.size - 1, indices.size
    bytes_moved = traffic_bytes(n, nnz, width)["total"]
    print(f"\n{label}: {n} x {n}, {nnz} edges, d = {width}; {bytes_moved / 1e9:.3f} GB moved without reuse")
    if env is None:
        return {}
    cp, lib, torch, peak = env["cp"], env["lib"], env["torch"], env["peak"]
    case = Case(cp, lib, indptr, indices, width, args.chunk, torch=torch, seed=args.seed)
    try:
        case.check()
        items, split, partial_rows = case.schedule_counts()
        print(f"  schedule: {items} work items, {split} split segments, {partial_rows} partial rows "
              f"(chunk {args.chunk})")
        times = {}
        for name, fn in case.systems.items():
            times[name] = time_ms(cp, fn, args.repeats, args.warmup, torch if name.startswith("torch") else None)
        baseline = times.get("cuSPARSE SpMM (CuPy)")
        print(f"  {'system':28s} {'median ms':>10s} {'cuSPARSE/':>9s} {'eff. GB/s':>10s} {'of peak':>7s}")
        for name, ms in times.items():
            print(format_row(name, ms, baseline, bytes_moved / (ms / 1e3) / 1e9, peak))
        return times
    finally:
        case.close()


def gpu_environment(args):
    import cupy as cp

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
    lib = load_library(archs, args.build_dir, verbose=args.verbose)
    print(f"built/loaded the benchmark library for sm_{'/'.join(archs)} in {time.perf_counter() - start:.0f} s")
    return {"cp": cp, "torch": torch, "lib": lib, "peak": peak}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--densities", default="0.0001,0.001,0.01,0.1",
                        help="densities of the 10K x 10K matrix, comma-separated")
    parser.add_argument("--no-uniform", dest="uniform", action="store_false", help="skip workload (a)")
    parser.add_argument("--no-reddit", dest="reddit", action="store_false", help="skip workload (b)")
    parser.add_argument("--vertices", type=int, default=233_000)
    parser.add_argument("--edges", type=int, default=23_200_000)
    parser.add_argument("--widths", default="128,602", help="feature widths of workload (b)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=256, help="edges per work item before a segment is split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peak-gbs", type=float, default=None, help="override the peak memory bandwidth")
    parser.add_argument("--arch", action="append", help="compute capability to build for (default: the device's)")
    parser.add_argument("--build-dir", default=os.path.join(build_cuda.ROOT, "build", "cuda"))
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--quick", action="store_true", help="reddit at 1/10 scale, 5 repeats")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: generate the graphs and count bytes")
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
    if args.quick:
        args.vertices //= 10
        args.edges //= 10
        args.repeats = min(args.repeats, 5)
    return args


def main(argv=None):
    args = parse_args(argv)
    env = None if args.dry_run else gpu_environment(args)
    results = {}
    if args.uniform:
        for density in args.densities:
            n = 10_000
            graph = uniform_graph(n, int(round(density * n * n)), seed=args.seed)
            label = f"A @ X, density {density * 100:g}%"
            results[label] = run_case(label, graph, 128, args, env)
    if args.reddit:
        start = time.perf_counter()
        graph = power_law_graph(args.vertices, args.edges, seed=args.seed)
        print(f"\n(generated the power-law graph in {time.perf_counter() - start:.1f} s)")
        for width in args.widths:
            label = f"reddit-middle-like, d = {width}"
            results[label] = run_case(label, graph, width, args, env)
    return results


if __name__ == "__main__":
    main()
