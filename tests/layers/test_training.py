"""Real training: one short GCN run on Cora (the full 200-epoch results are in
the README), and examples/train.py for every model, on Cora in a subprocess
and on a small synthetic preset in-process."""

import json
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import layer_checks as lc
import ngra_tf
from ngra_tf import recipes
from ngra_tf.graph import datasets

TRAIN_PY = str(lc.ROOT / "examples" / "train.py")


def test_gcn_on_cora_learns():
    dataset = datasets.cora()
    keras.utils.set_random_seed(0)
    graph = recipes.prepare_graph("gcn", dataset.graph)
    model = recipes.build_model("gcn", graph, dataset.num_classes, hidden=16)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    x = np.asarray(dataset.features.todense(), np.float32)
    x /= np.maximum(x.sum(axis=1, keepdims=True), 1e-12)
    train, _, test = lc.node_masks(dataset)
    history = model.fit(x, dataset.labels, sample_weight=train, epochs=50, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    result = model.evaluate(x, dataset.labels, sample_weight=test, verbose=0, return_dict=True)
    assert result["accuracy"] > 0.70, result


def run_example(*args, timeout=120):
    return subprocess.run([sys.executable, TRAIN_PY, *args], capture_output=True, text=True, timeout=timeout,
                          env=lc.subprocess_env(), cwd=lc.ROOT)


@pytest.mark.parametrize("model", ["gat", "ggnn"])
def test_example_on_cora(model):
    done = run_example(f"--model={model}", "--dataset=cora", "--epochs=2", "--hidden=8")
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.search(rf"{model} on cora, seed 0: test accuracy (\d\.\d+) after 2 epochs", done.stdout)
    assert match, done.stdout
    assert 0.0 <= float(match.group(1)) <= 1.0


def test_example_helpfull_documents_the_flags():
    done = run_example("--helpfull")
    assert done.returncode == 1, done.stderr[-3000:]  # absl prints the help and exits with 1
    text = done.stdout
    assert "Trains a SAGA-NN model" in text
    for flag in ("model", "dataset", "epochs", "hidden", "lr", "weight_decay", "dropout", "patience", "chunks",
                 "schedule", "rewrites", "explain", "seed", "runs", "profile_dir", "history_json", "verbose"):
        assert f"--{flag}:" in text or f"--[no]{flag}:" in text, flag
    assert "<gcn|commnet|mpgcn|ggcn|ggnn|gat>" in text
    for preset in datasets.PRESETS:
        assert preset in text


@pytest.fixture
def example():
    module = lc.example_train_module()
    yield module
    module.FLAGS.unparse_flags()


@pytest.fixture(scope="module")
def tiny_pubmed():
    data = datasets.synthetic("pubmed", seed=0, scale=0.01)
    assert data.graph.num_vertices == 197 and data.num_classes == 3
    return data


@pytest.mark.parametrize("model", list(recipes.RECIPES))
def test_example_train_once_on_synthetic_preset(example, tiny_pubmed, model, capsys):
    example.FLAGS(["train.py", f"--model={model}", "--dataset=pubmed", "--epochs=2", "--hidden=8"])
    run = example.train_once(example.dataset_inputs(tiny_pubmed, "pubmed"), seed=0)
    out = capsys.readouterr().out
    match = re.search(rf"{model} on pubmed, seed 0: test accuracy (\d\.\d{{4}}) after ([12]) epochs", out)
    assert match, out
    assert 0.0 <= run["test"]["accuracy"] <= 1.0
    assert f"{run['test']['accuracy']:.4f}" == match.group(1)
    assert len(run["history"]["loss"]) == run["epochs"] == int(match.group(2))


def test_example_chunks_schedule_and_rewrites_do_not_change_training(example, tiny_pubmed, capsys):
    runs = []
    for args in ([], ["--chunks=3", "--schedule=dest-order", "--explain"], ["--chunks=2", "--rewrites=none"]):
        example.FLAGS(["train.py", "--model=ggcn", "--dataset=pubmed", "--epochs=3", "--hidden=8", *args])
        runs.append(example.train_once(example.dataset_inputs(tiny_pubmed, "pubmed"), seed=0))
        example.FLAGS.unparse_flags()
    out = capsys.readouterr().out
    assert "3x3 chunks" in out and "fused_gather program gate_sigmoid" in out  # --explain
    assert runs[0]["test"]["accuracy"] == runs[1]["test"]["accuracy"] == runs[2]["test"]["accuracy"]
    for run in runs[1:]:  # every epoch's loss, up to float reassociation
        np.testing.assert_allclose(run["history"]["loss"], runs[0]["history"]["loss"], rtol=1e-5)


def test_example_history_json(tmp_path):
    path = tmp_path / "history.json"
    done = run_example("--model=gcn", "--dataset=cora", "--epochs=3", "--hidden=8", f"--history_json={path}")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(path.read_text())
    assert record["model"] == "gcn" and record["epochs"] == 3
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert len(record["history"][name]) == 3, name
    assert record["history"]["loss"][-1] < record["history"]["loss"][0]
    assert 0.0 <= record["test"]["accuracy"] <= 1.0
    # The dataset and the training run were resident above the baseline: Cora's dense
    # features alone are 2708 x 1433 float32 (15.5 MB).
    assert record["peak_memory_bytes"] > 15 << 20, record
    assert record["peak_resident_bytes"] >= record["baseline_resident_bytes"] + record["peak_memory_bytes"]
    assert "peak memory" in done.stdout and "above the baseline" in done.stdout


def test_example_history_json_in_a_missing_directory_fails_before_training(tmp_path):
    path = tmp_path / "no" / "such" / "history.json"
    done = run_example("--model=gcn", "--dataset=cora", "--epochs=200", f"--history_json={path}", timeout=60)
    assert done.returncode == 1
    assert "--history_json: no directory" in done.stderr
    assert "test accuracy" not in done.stdout and not path.parent.exists()


def test_example_rejects_unknown_rewrites(example):
    from absl import app  # noqa: PLC0415

    example.FLAGS(["train.py", "--rewrites=hoist,inline"])
    with pytest.raises(app.UsageError, match="inline"):
        example.main([])


def test_example_flag_bounds(example):
    from absl import flags  # noqa: PLC0415

    with pytest.raises(flags.IllegalFlagValueError):
        example.FLAGS(["train.py", "--epochs=0"])
    with pytest.raises(flags.IllegalFlagValueError):
        example.FLAGS(["train.py", "--model=transformer"])
