"""Compiles the CUDA side of ngra-tf with nvcc; needs neither TensorFlow nor a GPU.

One place for the nvcc flags, used by setup.py (the op library's GPU
kernels), tests/ops/test_cuda_harness.py, `make cuda-check` and
tools/bench_cuda.py. Objects are cached under --out and rebuilt only when a
source or header under ops/ is newer, or the flags changed.

    python tools/build_cuda.py --harness            # build/cuda/cuda_harness
    python tools/build_cuda.py --bench-lib          # build/cuda/libngra_bench.so
    python tools/build_cuda.py --generated-check    # build/cuda/generated_code_check (+ its case file)
    python tools/build_cuda.py --objects --arch 80 --arch 90

Architectures: NGRA_TF_CUDA_ARCHS="80;90" (or --arch); each gets SASS, and the
newest also PTX so that later GPUs can JIT it. nvcc 13 supports sm_75 and up.
"compute_90" asks for PTX alone: the compile check of `make cuda-check` and the
test suite, which run nothing on a GPU, skips ptxas and about half of nvcc's time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_SOURCES = sorted(glob.glob(os.path.join(ROOT, "ops", "cuda", "*.cu.cc")))
HARNESS = os.path.join(ROOT, "ops", "tests", "cuda_harness.cu")
BENCH = os.path.join(ROOT, "ops", "tests", "cuda_bench.cu")
GENERATED_CHECK = os.path.join(ROOT, "ops", "tests", "generated_code_check.cc")
DEFAULT_ARCHS = ("80", "90")


def find_nvcc() -> str | None:
    """nvcc from PATH, else from CUDA_HOME / CUDA_PATH / /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


def cuda_lib_dir(nvcc: str) -> str:
    """Where libcudart_static.a lives: beside nvcc's CUDA (nvcc may be a wrapper script elsewhere)."""
    homes = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))]
    result = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True)
    for line in (result.stdout + result.stderr).splitlines():  # "#$ TOP=/usr/local/cuda-13.0/bin/.."
        if line.startswith("#$ TOP="):
            homes.insert(0, os.path.normpath(line.split("=", 1)[1].strip().strip('"')))
    homes += [h for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if h]
    for home in homes:
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            if os.path.exists(os.path.join(home, sub, "libcudart_static.a")):
                return os.path.join(home, sub)
    raise RuntimeError(f"libcudart_static.a not found near {nvcc} (looked in {homes})")


def gpu_visible() -> bool:
    """Whether nvidia-smi lists a GPU here."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        result = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def check_archs() -> list[str]:
    """The test suite's architectures: NGRA_TF_CUDA_ARCHS, else sm_90 where a GPU will run what is built and PTX
    alone where none will (`make cuda-check`'s default too, so that the two share their objects in CI)."""
    return archs_from_env(default=("90",) if gpu_visible() else ("compute_90",))


def archs_from_env(default=DEFAULT_ARCHS) -> list[str]:
    value = os.environ.get("NGRA_TF_CUDA_ARCHS", "")
    archs = [a.strip().replace("sm_", "") for a in value.replace(",", ";").split(";") if a.strip()]
    return archs or list(default)


def gencode_flags(archs) -> list[str]:
    """nvcc's -gencode flags: SASS for each "90" (or "sm_90") and PTX for the newest of them, so that later GPUs
    can JIT it; "compute_90" asks for PTX alone, a compile check where nothing runs on a GPU (nvcc's ptxas, about
    half of its time, does not run)."""
    ptx_only = {a[len("compute_"):] for a in archs if a.startswith("compute_")}
    sass = {a.replace("sm_", "") for a in archs if not a.startswith("compute_")}
    if not ptx_only | sass or not all(a.isdigit() for a in ptx_only | sass):
        raise ValueError(f"CUDA architectures must be numbers like 80 or sm_90, or compute_90 for PTX alone; "
                         f"got {list(archs)}")
    sass = sorted(sass, key=int)
    ptx = sorted(ptx_only | set(sass[-1:]), key=int)
    return ([f"-gencode=arch=compute_{a},code=sm_{a}" for a in sass]
            + [f"-gencode=arch=compute_{a},code=compute_{a}" for a in ptx])


def common_flags(archs, opt="-O3") -> list[str]:
    # -fPIC: the same objects go into the TF op library (a shared object).
    return ["-std=c++17", opt, "-x", "cu", "-I", ROOT, "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
            *gencode_flags(archs)]


def _newest_input(with_tests: bool) -> float:
    """The newest file the CUDA sources can include (ops/tests only for the harness and benchmark)."""
    dirs = ["cuda", "kernels"] + (["tests"] if with_tests else [])
    files = [f for d in dirs for f in glob.glob(os.path.join(ROOT, "ops", d, "*"))]
    return max((os.path.getmtime(f) for f in files if os.path.isfile(f)), default=0.0)


def _up_to_date(target: str, flags_key: str, with_tests: bool = True) -> bool:
    stamp = target + ".flags"
    return (os.path.exists(target) and os.path.exists(stamp) and open(stamp).read() == flags_key
            and os.path.getmtime(target) >= _newest_input(with_tests))


def _run(cmd, target, flags_key, verbose):
    if verbose:
        print(" ".join(cmd), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed for {target}:\n{result.stdout}{result.stderr}")
    with open(target + ".flags", "w") as f:
        f.write(flags_key)
    return target


def _object_for(source, flags, out, nvcc):
    key = hashlib.sha1(" ".join([nvcc, *flags]).encode()).hexdigest()[:10]
    return os.path.join(out, os.path.basename(source).replace(".", "_") + f".{key}.o")


def compile_jobs(jobs, out, nvcc, workers=None, verbose=False) -> list[str]:
    """Compiles [(source, flags)] with nvcc into out/, side by side; returns the objects in order."""
    os.makedirs(out, exist_ok=True)
    todo, objects = [], []
    for source, flags in jobs:
        target = _object_for(source, flags, out, nvcc)
        objects.append(target)
        if not _up_to_date(target, " ".join(flags), with_tests=os.sep + "tests" + os.sep in source):
            todo.append(([nvcc, *flags, "-c", source, "-o", target], target, " ".join(flags)))
    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        for future in [pool.submit(_run, cmd, target, key, verbose) for cmd, target, key in todo]:
            future.result()
    return objects


def compile_objects(sources, archs, out, nvcc=None, opt="-O3", jobs=None, verbose=False) -> list[str]:
    """nvcc -c each CUDA source into out/, in parallel; returns the object paths."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")
    flags = common_flags(archs, opt)
    return compile_jobs([(source, flags) for source in sources], out, nvcc, jobs, verbose)


def link(objects, target, nvcc, extra=(), shared=False, verbose=False) -> str:
    cmd = [nvcc, *(["-shared", "-Xcompiler", "-fPIC"] if shared else []), *objects, "-o", target, *extra]
    if verbose:
        print(" ".join(cmd), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking {target} failed:\n{result.stdout}{result.stderr}")
    return target


# The harness holds no device code (it calls the kernels through api.h), so
# it is host C++: nvcc -x c++ hands it to the host compiler with CUDA's include
# path, instead of also running the device front end over its emulation code.
# -O1 halves its compile time; it still runs in seconds.
HARNESS_FLAGS = ["-std=c++17", "-O1", "-x", "c++", "-I", ROOT, "-Xcompiler", "-fPIC", "-DNGRA_HARNESS_GPU=1"]


def build_harness(archs, out, nvcc=None, verbose=False) -> str:
    """The harness with its emulated and GPU halves, linked with the kernel objects."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    jobs = [(source, common_flags(archs)) for source in KERNEL_SOURCES] + [(HARNESS, HARNESS_FLAGS)]
    objects = compile_jobs(jobs, out, nvcc, verbose=verbose)
    target = os.path.join(out, "cuda_harness")
    flags_key = " ".join(common_flags(archs)) + " harness"
    if not _up_to_date(target, flags_key):
        link(objects, target, nvcc, extra=["-Xcompiler", "-pthread"], verbose=verbose)
        with open(target + ".flags", "w") as f:
            f.write(flags_key)
    return target


# The emulated half under AddressSanitizer and UBSan: the harness's arena
# poisons the guard after each buffer, so a kernel that reads or writes past
# one fails where CI runs (compute-sanitizer's memcheck needs a GPU). Built at
# -O0: at -O1 the instrumented harness took g++ 11 minutes here (beside another
# build), at -O0 about 2.5.
SANITIZER_FLAGS = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def build_harness_without_nvcc(out, compiler="g++", verbose=False, sanitize=False) -> str:
    """The harness's emulated half with a plain C++ compiler (no nvcc); sanitize: at -O0 with SANITIZER_FLAGS."""
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, "cuda_harness_sanitized" if sanitize else "cuda_harness_host")
    flags = ["-std=c++17", *(["-O0", *SANITIZER_FLAGS] if sanitize else ["-O1"]), "-pthread", "-I", ROOT, "-x", "c++"]
    if not _up_to_date(target, " ".join(flags)):
        _run([compiler, *flags, HARNESS, "-o", target], target, " ".join(flags), verbose)
    return target


def build_bench_lib(archs, out, nvcc=None, verbose=False, defines=()) -> str:
    """libngra_bench.so: the C entry points tools/bench_cuda.py loads with ctypes.

    defines: NAME=VALUE macros for the kernels' tuning knobs (NGRA_GPU_*); each
    set gets its own library beside the default one.
    """
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    extra = [f"-D{d}" for d in defines]
    flags = common_flags(archs) + extra
    suffix = "-" + hashlib.sha1(" ".join(extra).encode()).hexdigest()[:8] if extra else ""
    target = os.path.join(out, f"libngra_bench{suffix}.so")
    flags_key = " ".join(flags) + " bench"
    if not _up_to_date(target, flags_key):  # an up-to-date library needs no objects (one carried to a GPU has none)
        objects = compile_jobs([(BENCH, flags)], out, nvcc, verbose=verbose)
        link(objects, target, nvcc, shared=True, verbose=verbose)
        with open(target + ".flags", "w") as f:
            f.write(flags_key)
    return target


def _generated_check_flags(cases, opt) -> list[str]:
    return ["-std=c++17", opt, "-I", ROOT, f'-DNGRA_GENERATED_CASES="{os.path.abspath(cases)}"']


def _cases_key(cases) -> str:
    with open(cases, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:10]


def build_generated_check_without_nvcc(out, cases, compiler="g++", verbose=False, sanitize=False) -> str:
    """ops/tests/generated_code_check.cc's emulated half for the case file `cases` (tools/generated_cases.py);
    sanitize: with SANITIZER_FLAGS."""
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, "generated_code_check_sanitized" if sanitize else "generated_code_check_host")
    # -O0: a third of -O1's compile time, and its checks still run in half a second.
    flags = _generated_check_flags(cases, "-O0") + ["-pthread", "-x", "c++"] + (SANITIZER_FLAGS if sanitize else [])
    key = " ".join(flags) + " " + _cases_key(cases)
    if not _up_to_date(target, key):
        _run([compiler, *flags, GENERATED_CHECK, "-o", target], target, key, verbose)
    return target


def build_generated_check(archs, out, cases, nvcc=None, verbose=False) -> str:
    """The same with its GPU half: compiled as CUDA, since each case's generated kernels are device code of its
    own (FixedCode), as NVRTC would build them for the op."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, "generated_code_check")
    flags = [*_generated_check_flags(cases, "-O1"), "-x", "cu", "--expt-relaxed-constexpr", "-DNGRA_HARNESS_GPU=1",
             *gencode_flags(archs)]
    key = " ".join(flags) + " " + _cases_key(cases)
    if not _up_to_date(target, key):
        _run([nvcc, *flags, GENERATED_CHECK, "-o", target, "-Xcompiler", "-pthread"], target, key, verbose)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", action="append", help="compute capability, e.g. 90 (repeatable)")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "cuda"))
    parser.add_argument("--objects", action="store_true", help="the kernel objects of the op library")
    parser.add_argument("--harness", action="store_true", help="ops/tests/cuda_harness.cu")
    parser.add_argument("--bench-lib", action="store_true", help="ops/tests/cuda_bench.cu as a shared library")
    parser.add_argument("--generated-check", action="store_true",
                        help="ops/tests/generated_code_check.cc for GPU and emulation, with the case file "
                             "tools/generated_cases.py writes beside it (generated_cases.inc)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    archs = args.arch or archs_from_env()
    try:
        gencode_flags(archs)
    except ValueError as error:
        source = "--arch" if args.arch else "NGRA_TF_CUDA_ARCHS"
        parser.error(f"{source}: {error}")
    nvcc = find_nvcc()
    if nvcc is None:
        print("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)", file=sys.stderr)
        return 1
    if not (args.objects or args.harness or args.bench_lib or args.generated_check):
        args.objects = args.harness = args.bench_lib = True
    try:
        if args.objects:
            for path in compile_objects(KERNEL_SOURCES, archs, args.out, nvcc, verbose=args.verbose):
                print(path)
        if args.harness:
            print(build_harness(archs, args.out, nvcc, verbose=args.verbose))
        if args.bench_lib:
            print(build_bench_lib(archs, args.out, nvcc, verbose=args.verbose))
        if args.generated_check:
            import generated_cases  # noqa: PLC0415  (beside this file; loads ngra_tf's TF-free modules)

            os.makedirs(args.out, exist_ok=True)
            cases = os.path.join(args.out, "generated_cases.inc")
            text = generated_cases.cases(range(6), gates=(4, 16))
            if not os.path.exists(cases) or open(cases).read() != text:  # a rewrite would force a rebuild
                with open(cases, "w") as f:
                    f.write(text)
            print(build_generated_check(archs, args.out, cases, nvcc, verbose=args.verbose))
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
