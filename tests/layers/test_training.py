"""Real training: one short GCN run on Cora (the full 200-epoch results are in
the README), and examples/train.py for every model, on Cora in a subprocess
and on a small synthetic preset in-process. train.py's flag checks run
in-process (`example`, `usage_error`; tests/parallel and tests/runtime import
them from here); one subprocess checks what a usage error looks like on the
command line."""

import json
import signal
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import app, flags
from absl.testing import flagsaver

import layer_checks as lc
import ngra_tf
from ngra_tf import recipes
from ngra_tf.compiler import REWRITES
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


def test_example_help_documents_the_flags(example):
    # What --helpfull prints for train.py: its docstring, then its flags' help.
    assert example.__doc__.startswith("Trains a SAGA-NN model")
    text = example.FLAGS.module_help(example)
    for flag in ("model", "dataset", "epochs", "hidden", "lr", "weight_decay", "dropout", "patience", "chunks",
                 "schedule", "rewrites", "explain", "seed", "runs", "profile_dir", "history_json", "verbose"):
        assert f"--{flag}:" in text or f"--[no]{flag}:" in text, flag
    assert "<gcn|commnet|mpgcn|ggcn|ggnn|gat|sage|gin|appnp|resgcn|jknet|rgcn>" in text
    assert "epoch_seconds" in text
    for preset in datasets.PRESETS:
        assert preset in text


@pytest.fixture
def example():
    """examples/train.py imported in-process; its FLAGS are left as they were before the test."""
    module = lc.example_train_module()
    parsed = module.FLAGS.is_parsed()
    with flagsaver.flagsaver():
        yield module
        if not parsed:
            module.FLAGS.unparse_flags()


def usage_error(example, *args):
    """The message of the app.UsageError that train.py's validate_flags() raises for these flags."""
    example.FLAGS.unparse_flags()
    example.FLAGS(["train.py", *args])
    with pytest.raises(app.UsageError) as raised:
        example.validate_flags()
    return str(raised.value)


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


@pytest.mark.parametrize("epochs", [1, 4])
def test_example_times_every_epoch(example, tiny_pubmed, epochs, capsys):
    example.FLAGS(["train.py", "--model=gcn", "--dataset=pubmed", f"--epochs={epochs}", "--hidden=8",
                   "--patience=0"])
    run = json.loads(json.dumps(example.train_once(example.dataset_inputs(tiny_pubmed, "pubmed"), seed=0)))
    out = capsys.readouterr().out
    seconds = run["epoch_seconds"]  # as --history_json writes it
    assert len(seconds) == run["epochs"] == epochs
    assert all(isinstance(s, float) and s > 0 for s in seconds), seconds
    assert sum(seconds) <= run["seconds"]
    assert f"after {epochs} epochs (first epoch {seconds[0]:.2f} s incl. tracing; " in out, out
    if epochs == 1:
        assert "no steady-state figure" in out and "median" not in out, out
    else:
        steady = 1e3 * np.median(seconds[1:])
        assert f"then {steady:.1f} ms/epoch, median of {epochs - 1})" in out, out


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
    assert len(record["epoch_seconds"]) == 3 and min(record["epoch_seconds"]) > 0, record["epoch_seconds"]
    assert sum(record["epoch_seconds"]) <= record["seconds"]
    assert 0.0 <= record["test"]["accuracy"] <= 1.0
    # The dataset and the training run were resident above the baseline: Cora's dense
    # features alone are 2708 x 1433 float32 (15.5 MB).
    assert record["peak_memory_bytes"] > 15 << 20, record
    assert record["peak_resident_bytes"] >= record["baseline_resident_bytes"] + record["peak_memory_bytes"]
    assert "peak memory" in done.stdout and "above the baseline" in done.stdout


def test_a_usage_error_is_one_line_on_the_command_line(tmp_path):
    # The one check that needs the real CLI: app.run turns validate_flags()'s UsageError into a non-zero exit with
    # the message as stderr's last line, no traceback, and nothing trained or written.
    path = tmp_path / "no" / "such" / "history.json"
    done = run_example("--model=gcn", "--dataset=cora", "--epochs=200", f"--history_json={path}", timeout=60)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.rstrip().splitlines()[-1] == f"--history_json: no directory {path.parent}", done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "test accuracy" not in done.stdout and not path.parent.exists()


@pytest.mark.parametrize("args,message", [
    (["--rewrites=hoist,inline"], f"--rewrites: unknown ['inline']; choose from {', '.join(REWRITES)} or none"),
    (["--history_json=/no/such/dir/history.json"], "--history_json: no directory /no/such/dir"),
    (["--model=gcn", "--depth=16"], "--depth applies to --model=resgcn or jknet, not gcn"),
    (["--model=resgcn", "--k=5"], "--k applies to --model=appnp, not resgcn"),
    (["--history_json=/"], "--history_json: / is a directory; name a file in it, such as /history.json"),
    ([f"--profile_dir={__file__}"], f"--profile_dir: {__file__} is a file, not a directory"),
])
def test_example_flag_errors(example, args, message):
    assert usage_error(example, *args) == message


def test_example_valid_flags_pass(example):
    example.FLAGS(["train.py", "--model=ggcn", "--rewrites=none", "--chunks=2", "--history_json=history.json"])
    assert example.validate_flags() is None  # no --topology to read


def test_example_flag_bounds(example):
    with pytest.raises(flags.IllegalFlagValueError):
        example.FLAGS(["train.py", "--epochs=0"])
    with pytest.raises(flags.IllegalFlagValueError):
        example.FLAGS(["train.py", "--model=transformer"])


def test_a_signal_while_tracing_is_raised_at_the_next_batch(example):
    """Raised inside a trace, the interrupt would cross TensorFlow's C++ (a SystemError, or an abort): it is
    remembered and StopCheck raises it once the step has run; outside a trace it is raised at once."""
    example.STOPPED_BY.clear()
    try:
        @tf.function
        def trace():
            example.stop_training(signal.SIGINT, None)
            return tf.constant(1)

        assert trace().numpy() == 1 and example.STOPPED_BY == ["Ctrl-C (SIGINT)"]
        with pytest.raises(KeyboardInterrupt, match=r"Ctrl-C \(SIGINT\)"):
            example.StopCheck().on_train_batch_end(0)
        with pytest.raises(KeyboardInterrupt, match=r"Ctrl-C \(SIGINT\)"):  # the first signal names the stop
            example.stop_training(signal.SIGTERM, None)
    finally:
        example.STOPPED_BY.clear()
