"""examples/train.py with the real graphs: --dataset (cora, amazon_computers, a .npz, or a synthetic preset),
--normalize and --features. Two runs on the command line (Amazon Computers end to end, and what a dataset that is
not there looks like); the rest in-process (`example`, `usage_error` from test_training)."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
from absl import app

from ngra_tf.graph import datasets
from test_training import example, run_example, usage_error  # noqa: F401  (`example` is a fixture)


@pytest.mark.slow  # (trains: make test keeps the flag checks)
def test_amazon_computers_on_the_command_line():
    done = run_example("--dataset=amazon_computers", "--model=gcn", "--epochs=2", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.search(r"gcn on amazon_computers, seed 0: test accuracy (\d\.\d{4}) after 2 epochs", done.stdout)
    assert match, done.stdout
    assert 0.0 <= float(match.group(1)) <= 1.0


def test_a_dataset_that_is_not_there_is_one_line_on_the_command_line():
    done = run_example("--dataset=/nonexistent.npz", "--epochs=2", timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("--dataset: /nonexistent.npz is neither a dataset (cora, amazon_computers, pubmed"), last
    assert last.endswith("nor a file"), last
    assert "Traceback" not in done.stderr and "test accuracy" not in done.stdout


# ---- --dataset in-process ----


@pytest.mark.parametrize("name", ["nope", "/nonexistent.npz", "citeseer"])
def test_an_unknown_dataset_names_itself(example, name):
    example.FLAGS(["train.py", f"--dataset={name}"])
    with pytest.raises(app.UsageError, match=rf"^--dataset: {re.escape(name)} is neither a dataset "
                                             r"\(cora, amazon_computers, pubmed, .*\) nor a file$"):
        example.load(name, 0)


def test_a_file_that_is_no_dataset_names_the_flag(example, tmp_path):
    text = tmp_path / "graph.npz"
    text.write_text("not an npz")
    with pytest.raises(app.UsageError, match=rf"^--dataset: {re.escape(str(text))}: "):
        example.load(str(text), 0)
    raw = dict(np.load(datasets.DATA_DIR + "/cora.npz"))
    del raw["labels"]
    broken = tmp_path / "broken.npz"
    np.savez(broken, **raw)
    with pytest.raises(app.UsageError, match=rf"^--dataset: {re.escape(str(broken))}: .*labels"):
        example.load(str(broken), 0)


def test_a_npz_path_loads_like_its_name(example):
    example.FLAGS(["train.py", "--features=dense"])
    by_path = example.load(datasets.DATA_DIR + "/cora.npz", 0)
    by_name = example.load("cora", 0)
    assert by_path.name.endswith("cora.npz") and by_name.name == "cora"
    np.testing.assert_array_equal(by_path.features, by_name.features)
    np.testing.assert_array_equal(by_path.labels, by_name.labels)
    assert by_path.num_classes == by_name.num_classes == 7


# ---- --features and --normalize ----


def test_features_auto_follows_the_data(example):
    example.FLAGS(["train.py"])
    cora, amazon = example.load("cora", 0), example.load("amazon_computers", 0)
    assert isinstance(cora.features, sp.csr_matrix) and cora.features.dtype == np.float32
    assert isinstance(amazon.features, np.ndarray) and amazon.features.dtype == np.float32
    assert amazon.features.shape == (13_752, 767) and amazon.num_classes == 10
    # --normalize=auto: what the dataset's own auto picks
    np.testing.assert_array_equal(cora.features.toarray(), datasets.load("cora").training_features().toarray())


def test_features_and_normalize_flags_reach_the_inputs(example):
    example.FLAGS(["train.py", "--features=dense", "--normalize=l2"])
    dense = example.load("cora", 0).features
    assert isinstance(dense, np.ndarray)
    np.testing.assert_allclose(np.linalg.norm(dense, axis=1), 1, rtol=1e-5)
    example.FLAGS.unparse_flags()
    example.FLAGS(["train.py", "--features=sparse", "--normalize=none", "--dataset=amazon_computers"])
    sparse = example.load("amazon_computers", 0).features
    assert isinstance(sparse, sp.csr_matrix)
    np.testing.assert_array_equal(sparse.toarray(), datasets.load("amazon_computers").features.toarray())
    example.FLAGS.unparse_flags()
    example.FLAGS(["train.py", "--normalize=row"])
    row = example.load("cora", 0).features
    np.testing.assert_allclose(np.asarray(row.sum(axis=1)).ravel(), 1, rtol=1e-5)


@pytest.mark.parametrize("flag", ["--normalize=l2", "--features=sparse", "--normalize=auto"])
def test_normalize_and_features_are_refused_with_a_synthetic_preset(example, flag):
    message = usage_error(example, flag, "--dataset=reddit-small")
    assert message.startswith(f"--{flag[2:].split('=')[0]} applies to a real graph's bag-of-words features")
    assert message.endswith("not to a synthetic preset"), message


@pytest.mark.parametrize("flag", ["--normalize=row", "--features=dense"])
def test_normalize_and_features_are_refused_with_a_store(example, flag, tmp_path):
    message = usage_error(example, flag, f"--store={tmp_path}")
    assert message.startswith(f"--{flag[2:].split('=')[0]} applies to a real graph's bag-of-words features")
    assert message.endswith("not to a store"), message


def test_bad_normalize_and_features_values(example):
    from absl import flags  # noqa: PLC0415

    for flag in ("--normalize=sum", "--features=csr"):
        with pytest.raises(flags.IllegalFlagValueError):
            example.FLAGS(["train.py", flag])


@pytest.mark.slow  # (trains: make test keeps the flag checks)
def test_sparse_and_dense_features_train_alike(example, capsys):
    """--features=sparse trains; without dropout (which draws differently on the two) it trains like dense."""
    runs = {}
    for kind in ("sparse", "dense"):
        example.FLAGS(["train.py", "--model=gcn", "--dataset=cora", "--epochs=2", "--patience=0", "--dropout=0",
                       f"--features={kind}"])
        runs[kind] = example.train_once(example.load("cora", 0), seed=0)
        example.FLAGS.unparse_flags()
    out = capsys.readouterr().out
    match = re.search(r"gcn on cora, seed 0: test accuracy (\d\.\d{4}) after 2 epochs", out)
    assert match, out
    sparse, dense = runs["sparse"], runs["dense"]
    assert f"{sparse['test']['accuracy']:.4f}" == match.group(1)
    assert len(sparse["history"]["loss"]) == 2 and sparse["history"]["loss"][1] < sparse["history"]["loss"][0]
    for name in ("loss", "val_loss", "accuracy", "val_accuracy"):
        np.testing.assert_allclose(sparse["history"][name], dense["history"][name], rtol=1e-5, err_msg=name)
    assert sparse["test"]["accuracy"] == dense["test"]["accuracy"]


@pytest.mark.slow  # (trains: make test keeps the flag checks)
def test_sparse_features_with_dropout_train(example, capsys):
    """The recipe's dropout (0.5) on sparse rows (ngra_tf.layers.Dropout drops stored values): GraphSAGE learns
    Cora in 5 epochs (about 80 % test accuracy)."""
    example.FLAGS(["train.py", "--model=sage", "--dataset=cora", "--epochs=5", "--patience=0", "--features=sparse"])
    run = example.train_once(example.load("cora", 0), seed=0)
    assert np.all(np.diff(run["history"]["loss"]) < 0), run["history"]["loss"]
    assert run["test"]["accuracy"] > 0.6, run["test"]
    out = capsys.readouterr().out
    assert f"sage on cora, seed 0: test accuracy {run['test']['accuracy']:.4f} after 5 epochs" in out, out


# ---- over several devices features are dense ----


@pytest.mark.slow  # (trains: make test keeps the flag checks)
def test_auto_features_over_several_devices_train(example, monkeypatch, capsys):
    # What main() does for --devices=2 (the test process's CPU is split in four: tests/conftest.py).
    example.FLAGS(["train.py", "--model=gcn", "--dataset=cora", "--epochs=1", "--patience=0", "--chunks=2",
                   "--devices=2"])
    monkeypatch.setattr(example, "DEVICES", 2)
    run = example.train_once(example.load("cora", 0), seed=0)
    assert np.isfinite(run["history"]["loss"][0])


def test_sparse_features_over_several_devices_are_a_usage_error(example):
    assert "--features" in usage_error(example, "--features=sparse", "--devices=2", "--chunks=2")
