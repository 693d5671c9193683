"""tools/bench_kernels.py runs end to end on its smallest case, checks every system, times the floors, and plots."""

import os
import pathlib
import subprocess
import sys

import pytest
from plot_checks import assert_plot

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
    assert float(rows["tf.zeros (the output alone)"].split()[-1]) > 0, done.stdout  # a floor: its median alone
    assert_plot(done, plot)


@pytest.mark.slow  # 25 s: 42 traced functions and 8 generated libraries
def test_programs_table_compares_every_template_with_its_edge_code():
    """--programs: each template against its edge code, the calls alternated; the tool asserts that the two
    agree, forward and gradients, before it times them."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_kernels.py"), "--programs",
                           "--reddit_vertices=300", "--reddit_edges=3000", "--width=16", "--repeats=2"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| program")}
    assert set(rows) == {"copy_src", "src_mul_edge", "src_add_dst", "src_mul_dst", "gate_sigmoid", "gate_tanh",
                         "gate_relu", "type_select"}, done.stdout
    reads_dst = {"src_add_dst", "src_mul_dst", "gate_sigmoid", "gate_tanh", "gate_relu"}
    for name, cells in rows.items():
        # template and code: forward, with d x_src, and (programs that read destination rows) with both gradients
        groups = 3 if name in reads_dst else 2  # (template ms, code ms, code / template) each
        times = [float(cells[3 * g + i]) for g in range(groups) for i in (0, 1)]
        ratios = [float(cells[3 * g + 2].strip().rstrip("x")) for g in range(groups)]
        assert min(times) > 0 and min(ratios) > 0, (name, cells)
        assert name in reads_dst or [cell.strip() for cell in cells[6:]] == ["-"] * 3, (name, cells)


@pytest.mark.parametrize("flag, message", [
    ("--densities=0.01,abc", "flag --densities=['0.01', 'abc']: takes numbers in (0, 1]"),
    ("--densities=2", "flag --densities=['2']: takes numbers in (0, 1]"),
    ("--repeats=0", "flag --repeats=0: 0 is not a positive integer"),
], ids=["not-a-number", "above-one", "no-repeats"])
def test_bad_flags_give_one_error_line_and_no_traceback(flag, message):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_kernels.py"), flag], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "A @ X" not in done.stdout
