"""Builds ngra-tf: the Python package plus one TF op library compiled from ops/cc
(and ops/net/listen_on.c, a small preload library that keeps workers off other interfaces).

The op library is compiled with g++ against the TensorFlow that is installed
(via tf.sysconfig), for this machine's CPU unless NGRA_TF_PORTABLE=1.

GPU kernels (ops/cuda) are added only when asked: NGRA_TF_CUDA=1 builds them
and fails with the reason if it cannot; NGRA_TF_CUDA=auto builds them when
nvcc and a CUDA build of TensorFlow are present. NGRA_TF_CUDA_ARCHS="80;90"
picks the GPU architectures (see tools/build_cuda.py).
"""
import concurrent.futures
import glob
import importlib.util
import json
import os
import shutil
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

OPS_LIBRARY = "ngra_tf.ops._ngra_ops"
# Preloaded into workers and cluster clients: pins TensorFlow's wildcard listen to one address.
LISTEN_LIBRARY = "ngra_tf.parallel._listen_on"
# The op sources whose kernel templates take most of the build (92, 69 and 49 s of a 2-core AMD EPYC's 305).
HEAVY_SOURCES = ["ops/cc/fused_gather_kernels.cc", "ops/cc/fused_gather_grad_kernels.cc",
                 "ops/cc/edge_code_kernels.cc"]


def _cpu_module():
    """ngra_tf/ops/cpu.py, loaded by path: the package cannot be imported while it is being built."""
    spec = importlib.util.spec_from_file_location("ngra_tf_ops_cpu", os.path.join("ngra_tf", "ops", "cpu.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tf_flags():
    import tensorflow as tf  # Imported late: only building needs it.

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def _cuda_builder():
    """tools/build_cuda.py if the GPU kernels are to be built, else None."""
    request = os.environ.get("NGRA_TF_CUDA", "0").strip().lower()
    if request in ("", "0"):
        return None
    if request not in ("1", "auto"):
        raise SystemExit(f"NGRA_TF_CUDA must be 0, 1 or auto, got {request!r}")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
    import build_cuda

    try:  # a bad NGRA_TF_CUDA_ARCHS is named before anything compiles
        build_cuda.gencode_flags(build_cuda.archs_from_env())
    except ValueError as error:
        raise SystemExit(f"NGRA_TF_CUDA_ARCHS: {error}") from None
    import tensorflow as tf

    problems = []
    if build_cuda.find_nvcc() is None:
        problems.append("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")
    # A CUDA build of TensorFlow (it has a GPU device to register kernels on)
    # ships its CUDA headers here; the kernels themselves are compiled
    # against nvcc's own headers.
    if not tf.sysconfig.get_build_info().get("is_cuda_build"):
        problems.append("this TensorFlow was built without CUDA")
    if not os.path.isdir(os.path.join(tf.sysconfig.get_include(), "third_party", "gpus")):
        problems.append("TensorFlow's CUDA headers (include/third_party/gpus) are missing")
    if problems and request == "1":
        raise SystemExit("NGRA_TF_CUDA=1, but the GPU kernels cannot be built: " + "; ".join(problems))
    if problems:
        print("ngra-tf: building without GPU kernels: " + "; ".join(problems))
        return None
    return build_cuda


class BuildTfOps(build_ext):
    """Compiles the op sources in parallel and links a plain `_ngra_ops.so`."""

    def get_ext_filename(self, fullname):
        # tf.load_op_library takes any path; no Python ABI suffix is needed.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        if ext.name == LISTEN_LIBRARY:  # plain C, no TensorFlow
            ext.extra_compile_args, ext.extra_link_args = ["-O2", "-fPIC", "-Wall", "-g0"], ["-ldl"]
            return super().build_extension(ext)
        cuda = _cuda_builder()  # first: a bad request fails before TensorFlow loads
        compile_flags, link_flags = _tf_flags()
        # 512-bit vectors where the CPU has them: the gate programs' exp is
        # compute-bound (their forward runs 1.3x faster than with 256-bit).
        arch = [] if os.environ.get("NGRA_TF_PORTABLE") == "1" else ["-march=native", "-mprefer-vector-width=512"]
        # -fno-trapping-math: the kernels never read FP exception flags, and it
        # lets GCC vectorise the branch-free exp/tanh of the gate programs.
        # -g0 last: Python's own CFLAGS carry -g, which would triple the library size.
        ext.extra_compile_args = ["-std=c++17", "-O3", "-fno-trapping-math", "-fPIC", "-Wno-sign-compare",
                                  "-Wno-subobject-linkage", *arch,
                                  *compile_flags, "-g0"]
        ext.extra_link_args = link_flags
        ext.include_dirs = [os.path.abspath(".")]
        ext.language = "c++"
        if cuda is not None:
            # nvcc compiles the TF-free kernels (*.cu.cc); the TF wrappers are
            # plain C++ and link them, with CUDA's static runtime.
            nvcc = cuda.find_nvcc()
            # Objects are cached in build/cuda, shared with the harness builds.
            ext.extra_objects = cuda.compile_objects(cuda.KERNEL_SOURCES, cuda.archs_from_env(),
                                                     os.path.join(cuda.ROOT, "build", "cuda"), nvcc)
            ext.sources = ext.sources + sorted(set(glob.glob("ops/cuda/*.cc")) - set(glob.glob("ops/cuda/*.cu.cc")))
            ext.depends = ext.depends + ext.extra_objects + sorted(glob.glob("ops/cuda/*.h"))  # relink on change
            ext.extra_link_args = [*ext.extra_link_args, "-L" + cuda.cuda_lib_dir(nvcc), "-l:libcudart_static.a",
                                   "-ldl", "-lrt", "-lpthread"]
        ext.sources = self._grouped_sources(ext.sources)
        # setuptools compiles an extension's sources one by one; the op library
        # has several heavy template files, so compile them side by side.
        original_compile = self.compiler.compile

        def parallel_compile(sources, **kwargs):
            # setuptools sorts the sources: start the heavy ones first, longest first.
            order = {source: rank for rank, source in enumerate(HEAVY_SOURCES)}
            sources = sorted(sources, key=lambda source: order.get(source, len(order)))
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                parts = pool.map(lambda s: original_compile([s], **kwargs), sources)
                return [obj for objs in parts for obj in objs]

        self.compiler.compile = parallel_compile
        super().build_extension(ext)
        self._record_toolchain(ext, [*arch, "-std=c++17", "-O3", "-fno-trapping-math", "-fPIC", "-g0",
                                     *(flag for flag in compile_flags if flag.startswith("-D"))], cuda is not None)

    def _grouped_sources(self, sources):
        """The template-heavy kernel files alone; every other ops/cc file in one translation unit (written into
        build_temp): each of them spends most of its ~13 s parsing TensorFlow's headers, and together they take
        33 s instead of 102 (2-core AMD EPYC). Bazel still compiles them one by one, so they must not define the
        same name twice at namespace scope."""
        heavy = [s for s in HEAVY_SOURCES if s in sources]
        light = [s for s in sources if s not in heavy and s.startswith("ops/cc/")]
        if len(light) < 2:
            return sources
        os.makedirs(self.build_temp, exist_ok=True)
        unity = os.path.join(self.build_temp, "ops_cc_light.cc")
        text = "// Generated by setup.py: the light op sources as one translation unit.\n" + "".join(
            f'#include "{s}"\n' for s in light)
        if not os.path.exists(unity) or open(unity).read() != text:  # unchanged: no needless rebuild
            with open(unity, "w") as f:
                f.write(text)
        return heavy + [unity] + [s for s in sources if s not in heavy and s not in light]

    def _record_toolchain(self, ext, flags, cuda):
        """Beside the library: the compiler and flags that built it and whether it has the GPU kernels, and
        (outside an editable build) the kernel headers, so that generated edge code (ngra_tf/ops/generated.py)
        is built the same way, and for GPUs only where the ops can run on them."""
        directory = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        editable = self.inplace or getattr(self, "editable_mode", False)
        compiler = shutil.which(self.compiler.compiler_cxx[0]) or self.compiler.compiler_cxx[0]
        # An editable build copies only the libraries into the source tree: write the record there itself.
        package = self.get_finalized_command("build_py").get_package_dir("ngra_tf.ops")
        record = {"cxx": compiler, "flags": flags, "cuda": cuda}
        if "-march=native" in flags:  # the loader refuses a CPU that lacks any of these (ngra_tf/ops/cpu.py)
            record["instruction_sets"] = sorted(_cpu_module().instruction_sets())
        for place in {directory, os.path.abspath(package)} if editable else {directory}:
            with open(os.path.join(place, "_ngra_ops.json"), "w") as f:
                json.dump(record, f, indent=1)
        if not editable:  # the headers generated code compiles against: C++ (kernels) and CUDA (NVRTC)
            for folder in ("kernels", "cuda"):
                include = os.path.join(directory, "include", "ops", folder)
                os.makedirs(include, exist_ok=True)
                for header in glob.glob(f"ops/{folder}/*.h"):
                    shutil.copy(header, include)


setup(
    name="ngra-tf",
    version="0.1.0",
    description="NGra-style large-graph GNN training for TensorFlow 2: SAGA-NN layers, chunked propagation ops.",
    packages=find_packages(include=["ngra_tf", "ngra_tf.*"]),
    package_data={"ngra_tf.graph": ["data/*.npz"],  # Cora and Amazon Computers (datasets.load)
                  "ngra_tf.parallel": ["topologies/*.txt", "topologies/*.json"]},  # Topology.sample()
    python_requires=">=3.9",
    install_requires=["tensorflow>=2.16,<2.17", "numpy>=1.23,<2", "scipy>=1.9", "absl-py>=1.0"],
    extras_require={
        "io": ["tensorflow-io>=0.37,<0.38"],
        "test": ["pytest>=7", "hypothesis>=6"],
        "plot": ["matplotlib>=3.5"],
        "bench": ["torch==2.13.*", "torch_geometric>=2.4", "matplotlib>=3.5"],  # the checked torch
    },
    ext_modules=[
        Extension(
            OPS_LIBRARY,
            sources=sorted(glob.glob("ops/cc/*.cc")),
            # Headers carry the kernels: any change to them recompiles everything.
            depends=sorted(glob.glob("ops/cc/*.h") + glob.glob("ops/kernels/*.h")),
        ),
        Extension(LISTEN_LIBRARY, sources=["ops/net/listen_on.c"]),
    ],
    cmdclass={"build_ext": BuildTfOps},
    zip_safe=False,
)
