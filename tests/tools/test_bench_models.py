"""tools/bench_models.py runs end to end on tiny graphs and prints its tables."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
from plot_checks import assert_plot

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench_models.py"), "--scale=0.003", "--quick",
                           "--hidden=8", *args], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_main_table_and_table_2_layout(tmp_path):
    plot = tmp_path / "models.png"
    done = run("--graphs=pubmed", "--models=gcn,mpgcn", "--systems=fit,fitval,ngra1,ngra4,tf", f"--plot={plot}")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| GCN | pubmed") or
             line.startswith("| MP-GCN | pubmed")]
    assert len(lines) == 2, done.stdout
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        # fit, fit + val, step P=1, step P=4, TF step: all measured
        assert all(float(cells[i]) > 0 for i in range(2, 7)), line
        assert cells[7] == "-" and cells[11] == "-", line  # no PyG asked for
        assert all(cells[i].endswith("x") for i in (8, 9, 10, 12)), line
    assert "NGra Table 2 layout" in done.stdout
    assert_plot(done, plot)


def test_unknown_system_model_or_graph_is_refused():
    for flag, value in (("systems", "ngra1,gpu"), ("models", "gcn,gpt"), ("graphs", "cora,citeseer"),
                        ("stages", "gat,gin")):
        done = run(f"--{flag}={value}")
        bad = value.split(",")[1]
        assert done.returncode != 0 and f"--{flag}: unknown ['{bad}']" in done.stderr, done.stderr[-2000:]


def test_cora():
    done = run("--graphs=cora", "--models=gcn", "--systems=fit,ngra1,tf")
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| GCN | cora"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[2]) > 0 and float(cells[4]) > 0 and float(cells[6]) > 0, row


def test_ablation_alone():
    done = run("--graphs=pubmed", "--models=ggcn", "--systems=", "--ablation")
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| G-GCN |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert len(cells) == 7 and all(float(c) > 0 for c in cells), row


def test_sage_and_gin_rows_against_both_peers():
    with_pyg = importlib.util.find_spec("torch_geometric") is not None
    done = run("--graphs=pubmed", "--models=sage,gin", "--systems=fit,ngra1,tf" + (",pyg" if with_pyg else ""))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("GraphSAGE", "GIN"):
        row = next(line for line in done.stdout.splitlines() if line.startswith(f"| {name} | pubmed"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        measured = (2, 4, 6, 7) if with_pyg else (2, 4, 6)
        assert all(float(cells[i]) > 0 for i in measured), row


def test_user_written_variants_table():
    """--variants: the chosen stages and G-GCN get a row, fused (edge code / online softmax: generated and
    interpreted) and unfused (all ten rows took nine minutes of a 2-core CI machine: two stages and the baseline)."""
    done = run("--variants", "--graphs=pubmed", "--epochs=1", "--stages=tanh-gate,gat-dropout")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("| ") and "fused as" not in line}
    assert set(rows) == {"G-GCN (built in)", "tanh-difference gate", "GAT (8 heads), attention dropout 0.6"}, done.stdout
    assert rows["G-GCN (built in)"][1] == "specialised gate_sigmoid"
    assert rows["tanh-difference gate"][1] == "edge code"
    assert rows["GAT (8 heads), attention dropout 0.6"][1] == "online softmax"
    for label, cells in rows.items():
        assert float(cells[2]) > 0 and float(cells[9]) > 0, cells  # fused and unfused epochs measured
        assert cells[11].endswith("x") and cells[12].endswith("x"), cells
        if label != "G-GCN (built in)":  # edge code, also interpreted (the template has nothing to interpret)
            assert float(cells[7]) > 0 and cells[8].endswith("x"), cells
        if label.startswith("GAT"):  # the same seed: the same training, attention dropout included
            fused, unfused = (float(loss) for loss in cells[13].split("/"))
            np.testing.assert_allclose(fused, unfused, rtol=1e-4, err_msg=label)
    assert rows["G-GCN (built in)"][7] == "-"


def test_programs_against_edge_code(tmp_path):
    """bench_kernels --programs: each specialised program against its edge code, forward and backward."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_kernels.py"), "--programs", "--repeats=1",
                           "--width=8", "--reddit_vertices=2000", "--reddit_edges=20000"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("| ") and "template fwd" not in line]
    # every specialised program but src_sub_dst (src_add_dst's twin)
    assert [cells[0] for cells in rows] == ["copy_src", "src_mul_edge", "src_add_dst", "src_mul_dst", "gate_sigmoid",
                                            "gate_tanh", "gate_relu", "type_select"], done.stdout
    for cells in rows:
        assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[3].endswith("x") and cells[6].endswith("x"), cells
