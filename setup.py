"""Builds ngra-tf: the Python package plus one TF op library compiled from ops/cc.

The op library is compiled with g++ against the TensorFlow that is installed
(via tf.sysconfig), for this machine's CPU unless NGRA_TF_PORTABLE=1.
"""
import concurrent.futures
import glob
import os

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

OPS_LIBRARY = "ngra_tf.ops._ngra_ops"


def _tf_flags():
    import tensorflow as tf  # Imported late: only building needs it.

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


class BuildTfOps(build_ext):
    """Compiles the op sources in parallel and links a plain `_ngra_ops.so`."""

    def get_ext_filename(self, fullname):
        # tf.load_op_library takes any path; no Python ABI suffix is needed.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        compile_flags, link_flags = _tf_flags()
        arch = [] if os.environ.get("NGRA_TF_PORTABLE") == "1" else ["-march=native"]
        # -g0 last: Python's own CFLAGS carry -g, which would triple the library size.
        ext.extra_compile_args = ["-std=c++17", "-O3", "-fPIC", "-Wno-sign-compare", *arch, *compile_flags, "-g0"]
        ext.extra_link_args = link_flags
        ext.include_dirs = [os.path.abspath(".")]
        ext.language = "c++"
        # setuptools compiles an extension's sources one by one; the op library
        # has several heavy template files, so compile them side by side.
        original_compile = self.compiler.compile

        def parallel_compile(sources, **kwargs):
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                parts = pool.map(lambda s: original_compile([s], **kwargs), sources)
                return [obj for objs in parts for obj in objs]

        self.compiler.compile = parallel_compile
        super().build_extension(ext)


setup(
    name="ngra-tf",
    version="0.1.0",
    description="NGra-style large-graph GNN training for TensorFlow 2: SAGA-NN layers, chunked propagation ops.",
    packages=find_packages(include=["ngra_tf", "ngra_tf.*"]),
    python_requires=">=3.9",
    install_requires=["tensorflow>=2.16,<2.17", "numpy>=1.23,<2", "scipy>=1.9", "absl-py>=1.0"],
    extras_require={
        "io": ["tensorflow-io>=0.37,<0.38"],
        "test": ["pytest>=7", "hypothesis>=6"],
        "bench": ["torch>=2.1"],
    },
    ext_modules=[
        Extension(
            OPS_LIBRARY,
            sources=sorted(glob.glob("ops/cc/*.cc")),
            # Headers carry the kernels: any change to them recompiles everything.
            depends=sorted(glob.glob("ops/cc/*.h") + glob.glob("ops/kernels/*.h")),
        )
    ],
    cmdclass={"build_ext": BuildTfOps},
    zip_safe=False,
)
