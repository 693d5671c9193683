"""The op library loads; without it the package warns once and falls back to
the pure-TF references."""

import pathlib
import subprocess
import sys

import ngra_tf
from ngra_testlib import subprocess_env

WORKER = pathlib.Path(__file__).with_name("fallback_worker.py")


def test_library_loads_with_every_op():
    lib = ngra_tf.ops.library()
    assert lib is not None, "the op library did not load (see the RuntimeWarning)"
    assert ngra_tf.ops.library_path() is not None
    for op in ("gather", "scatter", "gather_grad_arg", "fused_gather", "fused_gather_grad", "copy_h2d",
               "copy_d2h", "copy_d2d", "copy_stats", "uniform_at"):
        assert callable(getattr(lib, f"ngra_{op}")), op


def test_library_is_loaded_once():
    assert ngra_tf.ops.library() is ngra_tf.ops.library()


def test_missing_library_warns_once_and_falls_back():
    result = subprocess.run([sys.executable, str(WORKER)], env=subprocess_env(NGRA_TF_OPS_LIBRARY="/nonexistent.so"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    counts = dict(item.split("=") for item in result.stdout.split()[-2:])
    assert counts["warnings"] == "1"
    assert int(counts["checked"]) == 3 * (9 * 4 + 4 + 3 * 2 + 1 + 1) + 3
