"""tools/bench_accuracy.py: the recipes' test accuracy on a real graph (mean ± std over seeds) and their steady
epoch, ngra-tf against PyG with the same settings. GCN on Cora, one seed: the recipe's 200 epochs."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench_accuracy.py"), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def table(stdout):
    """The printed table as {model: {column: cell}}."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows[cells[0]] = dict(zip(header, cells))
    return header, rows


def accuracy(cell):
    """'80.8 ± 0.0' -> (80.8, 0.0)."""
    mean, std = cell.split(" ± ")
    return float(mean), float(std)


@pytest.mark.slow  # 200 GCN epochs on Cora and the table (make test keeps the flag checks)
def test_gcn_on_cora_with_ngra(tmp_path):
    out = tmp_path / "runs.json"
    done = run("--dataset=cora", "--models=gcn", "--seeds=1", "--systems=ngra", f"--json={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("cora: 2708 vertices, 10858 edges, 1433 features, 7 classes; 140 / 500 / 1000 "
                                  "train / validation / test; 1 seeds"), done.stdout
    assert "gcn ngra seed 0: " in done.stdout and "after 200 epochs" in done.stdout  # (no early stopping for gcn)
    header, rows = table(done.stdout)
    assert header == ["model", "ngra accuracy (%)", "published", "ngra epoch (ms)", "ngra first epoch (s)"]
    assert "PyG / ngra epoch" not in header
    gcn = rows["GCN"]
    mean, std = accuracy(gcn["ngra accuracy (%)"])
    assert mean > 70 and std == 0.0, gcn  # one seed
    assert gcn["published"] == "81.5"
    assert float(gcn["ngra epoch (ms)"]) > 0 and float(gcn["ngra first epoch (s)"]) > 0
    assert "published: Kipf & Welling 2017" in done.stdout
    saved = json.loads(out.read_text())
    assert list(saved) == ["gcn/ngra"]
    record = saved["gcn/ngra"]
    assert record["runs"] == [pytest.approx(mean, abs=0.05)] and record["epochs"] == [200]
    assert record["mean"] == pytest.approx(mean, abs=0.05) and record["std"] == 0.0
    assert record["epoch_ms"] == pytest.approx(float(gcn["ngra epoch (ms)"]), abs=0.05)


@pytest.mark.slow  # PyG's 200 GCN epochs on Cora take minutes on two shared cores
@pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None, reason="needs torch_geometric")
def test_gcn_on_cora_against_pyg():
    done = run("--dataset=cora", "--models=gcn", "--seeds=1", "--systems=ngra,pyg")
    assert done.returncode == 0, done.stderr[-3000:]
    header, rows = table(done.stdout)
    assert header == ["model", "ngra accuracy (%)", "pyg accuracy (%)", "published", "ngra epoch (ms)",
                      "pyg epoch (ms)", "ngra first epoch (s)", "pyg first epoch (s)", "PyG / ngra epoch"]
    gcn = rows["GCN"]
    for system in ("ngra", "pyg"):
        mean, _ = accuracy(gcn[f"{system} accuracy (%)"])
        assert mean > 70, gcn
        assert float(gcn[f"{system} epoch (ms)"]) > 0
    ratio = gcn["PyG / ngra epoch"]
    assert ratio.endswith("×")
    assert float(ratio[:-1]) == pytest.approx(float(gcn["pyg epoch (ms)"]) / float(gcn["ngra epoch (ms)"]), rel=0.02)


@pytest.mark.parametrize("args, message", [
    (["--models=gcn,gpt"], "--models: unknown ['gpt']; choose from gcn, gat, sage, gin, appnp"),
    (["--systems=ngra,dgl"], "--systems: choose from ngra, pyg"),
    (["--systems="], "--systems: choose from ngra, pyg"),
    (["--dataset=/nonexistent.npz", "--systems=ngra"],
     "--dataset: no file /nonexistent.npz; give cora, amazon_computers or a Planetoid .npz"),
], ids=["models", "systems", "no-systems", "dataset"])
def test_bad_flags_are_one_line_and_train_nothing(args, message):
    done = run(*args, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.rstrip().splitlines()[-1] == message, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "seed 0" not in done.stdout
