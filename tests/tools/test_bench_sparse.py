"""tools/bench_sparse.py: GCN on a bag-of-words graph with sparse and dense features, each in a process of its own.
At 2 % of Coauthor Physics' shape, two epochs: the sparse run holds a fraction of the dense run's features."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench_sparse.py"), *args], capture_output=True,
                          text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.slow  # three processes start TensorFlow
def test_sparse_and_dense_rows_and_ratios():
    done = run("--scale=0.02", "--epochs=2", "--systems=ngra-sparse,ngra-dense")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ngra-"):
            rows[cells[0]] = [float(c) for c in cells[1:]]
    assert set(rows) == {"ngra-sparse", "ngra-dense"}, done.stdout
    epoch, first, peak, features = zip(*rows.values())
    assert all(e > 0 for e in epoch) and all(f > 0 for f in first) and all(p > 0 for p in peak)
    # 0.4 % non-zero: the CSR arrays (data, int32 indices, indptr) are a few percent of the dense array.
    assert rows["ngra-sparse"][3] < 0.05 * rows["ngra-dense"][3], rows
    assert re.search(r"ngra sparse: peak [\d.]+x its sparse data plus the model", done.stdout), done.stdout
    assert re.search(r"ngra-dense / ngra-sparse epoch: [\d.]+x", done.stdout), done.stdout


def test_an_unknown_system_is_one_line():
    done = run("--systems=ngra-sparse,nope")
    assert done.returncode == 1 and "--systems: unknown ['nope']" in done.stderr.strip().splitlines()[-1], done.stderr
    assert "Traceback" not in done.stderr
