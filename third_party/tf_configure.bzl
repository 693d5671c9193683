"""Repository rule exposing the pip-installed TensorFlow to Bazel.

The headers and libtensorflow_framework.so.2 live inside a virtualenv whose
path depends on where the repo is cloned, so a fixed new_local_repository
path cannot work. Instead this rule asks a Python interpreter where
TensorFlow is and symlinks its include/ dir and framework library into the
external repository, then writes a BUILD file for them.

Interpreter: $NGRA_TF_PYTHON if set (tools/bazel_build.sh passes it via
--repo_env), else <workspace>/.venv/bin/python, else python3.
"""

# Prints the include dir, the framework library, and the -D flags that this
# TensorFlow wants (e.g. -D_GLIBCXX_USE_CXX11_ABI=1) as a list literal that is
# also valid Starlark: the same values the pip build gets from tf.sysconfig.
_QUERY = """
import os, tensorflow as tf
s = tf.sysconfig
print(s.get_include())
print(os.path.join(s.get_lib(), "libtensorflow_framework.so.2"))
print([f[2:] for f in s.get_compile_flags() if f.startswith("-D")])
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

cc_import(
    name = "framework",
    shared_library = "libtensorflow_framework.so.2",
)

cc_library(
    name = "tensorflow",
    # CUDA headers are over half of the 20k files (420 MB) under include/ and
    # CPU kernels never read them; leaving them out halves the time Bazel
    # spends globbing and hashing headers after a server restart (a no-op
    # build went from 22 s to 10 s). Re-add them when ops/cuda is built here.
    hdrs = glob(
        ["include/**"],
        exclude = [
            "include/external/cudnn_frontend_archive/**",
            "include/external/cutlass_archive/**",
            "include/external/local_config_cuda/**",
            "include/external/nccl_archive/**",
            "include/third_party/gpus/**",
        ],
    ),
    defines = {defines},
    includes = ["include"],
    deps = [":framework"],
)
"""

def _python(rctx):
    python = rctx.os.environ.get("NGRA_TF_PYTHON", "")
    if python:
        return python
    workspace = rctx.path(Label("//:WORKSPACE")).dirname
    venv = rctx.path("%s/.venv/bin/python" % workspace)
    if venv.exists:
        return str(venv)
    return "python3"

def _tf_configure_impl(rctx):
    python = _python(rctx)

    # Importing TensorFlow takes a few seconds; Bazel caches this repository,
    # so it only runs again when NGRA_TF_* changes or after `bazel clean --expunge`.
    result = rctx.execute([python, "-c", _QUERY], quiet = True)
    if result.return_code != 0:
        fail("cannot import tensorflow with %s:\n%s" % (python, result.stderr))
    # Last three lines: anything TensorFlow itself prints comes before ours.
    include_dir, framework, defines = result.stdout.strip().split("\n")[-3:]
    rctx.symlink(include_dir, "include")
    rctx.symlink(framework, "libtensorflow_framework.so.2")
    rctx.file("BUILD", _BUILD.format(defines = defines))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    # NGRA_TF_VERSION is not read; it only makes Bazel re-run this rule when
    # the installed TensorFlow changes (tools/bazel_build.sh sets it).
    environ = ["NGRA_TF_PYTHON", "NGRA_TF_VERSION"],
)
