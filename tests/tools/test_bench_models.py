"""tools/bench_models.py runs end to end on tiny graphs and prints its tables."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench_models.py"), "--scale=0.003", "--quick",
                           "--hidden=8", *args], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_main_table_and_table_2_layout():
    done = run("--graphs=pubmed", "--models=gcn,mpgcn", "--systems=ngra1,ngra4,tf")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| GCN | pubmed") or
             line.startswith("| MP-GCN | pubmed")]
    assert len(lines) == 2, done.stdout
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4]) > 0, line  # P=1, P=4, TF
        assert cells[5] == "-" and cells[6].endswith("x") and cells[8].endswith("x"), line  # no PyG asked for
    assert "NGra Table 2 layout" in done.stdout


def test_ablation_alone():
    done = run("--graphs=pubmed", "--models=ggcn", "--systems=", "--ablation")
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| G-GCN |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert len(cells) == 7 and all(float(c) > 0 for c in cells), row
