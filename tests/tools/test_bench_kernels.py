"""tools/bench_kernels.py runs end to end on its smallest case, checks every system, and plots."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_smallest_case_table_and_plot(tmp_path):
    plot = tmp_path / "kernels.png"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_kernels.py"), "--densities=0.0001",
                           "--noreddit", "--repeats=1", "--notorch", f"--plot={plot}"], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("  ")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("  ") and
            not line.strip().startswith("system")}
    for system in ("ngra fused_gather", "tf.sparse.sparse_dense_matmul", "scipy CSR @ dense"):
        assert system in rows, done.stdout
        assert float(rows[system].split()[-3]) > 0, rows[system]  # median ms
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
