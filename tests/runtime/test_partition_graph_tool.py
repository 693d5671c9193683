"""tools/partition_graph.py end to end: presets equal the in-memory recipe, memory stays bounded, bad input
exits with status 1 and leaves no output behind."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

from ngra_tf import recipes
from ngra_tf.graph import Graph, datasets
from ngra_tf.store import open_store
from store_checks import assert_store_matches

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "partition_graph.py"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def run_tool(*args, timeout=600):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=ROOT)


def test_cora_preset_equals_the_in_memory_recipe(tmp_path):
    done = run_tool("--preset=cora", f"--output={tmp_path / 'cora'}", "--chunks=3", "--format=hdf5",
                    "--memory_budget=1MB")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"wrote .*cora: hdf5, 2708 vertices, \d+ edges, P=3", done.stdout), done.stdout
    store = open_store(tmp_path / "cora")
    dataset = datasets.cora()
    vertex_data = {"features": dataset.training_features(), "labels": dataset.labels,  # (CSR: 1.3 % non-zero)
                   "train_mask": dataset.train_mask, "val_mask": dataset.val_mask, "test_mask": dataset.test_mask}
    assert_store_matches(store, recipes.prepare_graph("gcn", dataset.graph), 3, vertex_data=vertex_data)
    assert store.manifest["source"]["num_classes"] == 7
    store.verify()


def test_conversion_stays_within_a_small_fraction_of_the_graph(tmp_path):
    rng = np.random.default_rng(0)
    num_vertices, num_edges, width = 50_000, 2_000_000, 128
    src, dst = rng.integers(0, num_vertices, num_edges), rng.integers(0, num_vertices, num_edges)
    np.savez(tmp_path / "edges.npz", src=src, dst=dst)
    np.save(tmp_path / "x.npy", rng.standard_normal((num_vertices, width), dtype=np.float32))
    whole = 16 * num_edges + 4 * num_vertices * width  # int64 edges and the features: 57.6 MB
    done = run_tool(f"--edges={tmp_path / 'edges.npz'}", f"--features={tmp_path / 'x.npy'}",
                    f"--output={tmp_path / 'store'}", "--chunks=4", "--memory_budget=16MB", "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    growth = int(re.search(r"\((\d+) bytes above the baseline\)", done.stdout).group(1))
    assert growth < whole / 4, (growth, whole, done.stdout)
    store = open_store(tmp_path / "store")
    assert store.num_parts > 1 and store.num_edges == num_edges
    expected = Graph.from_edges(src, dst, num_vertices).partition(store.num_parts)
    np.testing.assert_array_equal(store.order, expected.order)
    np.testing.assert_array_equal(store.edge_counts, expected.edge_counts)


ERROR_CASES = {
    "missing": (["--edges={d}/nowhere.txt", "--output={d}/out", "--chunks=2"],
                r"edge list .*nowhere.txt does not exist"),
    "malformed": (["--edges={d}/bad.txt", "--output={d}/out", "--chunks=2"], r"bad.txt:3: expected 'src dst'"),
    "range": (["--edges={d}/good.txt", "--num_vertices=3", "--output={d}/out", "--chunks=2"],
              r"good.txt:4: destination vertex id 5 is out of range for num_vertices=3"),
    "rows": (["--edges={d}/good.txt", "--features={d}/x.npy", "--num_vertices=9", "--output={d}/out", "--chunks=2"],
             r"vertex array 'features' \(.*x.npy\) has 4 rows; the graph has 9 vertices"),
    "budget": (["--edges={d}/good.txt", "--output={d}/out", "--memory_budget=lots"],
               r"cannot read 'lots' as a memory size"),
    "preset": (["--preset=reddit-huge", "--output={d}/out", "--chunks=2"],
               r"--preset must be one of cora, amazon_computers, pubmed"),
    "normalize": (["--edges={d}/good.txt", "--normalize=l2", "--output={d}/out", "--chunks=2"],
                  r"--normalize applies to presets"),
    "sparse synthetic": (["--preset=pubmed", "--scale=0.01", "--feature_format=sparse", "--output={d}/out",
                          "--chunks=2"], r"feature_format=sparse apply to cora, amazon_computers"),
    "both": (["--preset=cora", "--edges={d}/good.txt", "--output={d}/out", "--chunks=2"], r"drop --edges"),
    "no_p": (["--edges={d}/good.txt", "--output={d}/out"], r"give --chunks=P or --memory_budget=SIZE"),
    "no labels": (["--edges={d}/good.txt", "--features={d}/x.npy", "--output={d}/out", "--memory_budget=4GB"],
                  r"--memory_budget chooses P for training --models, which needs the features and labels"),
    "model": (["--preset=cora", "--output={d}/out", "--memory_budget=4GB", "--models=gcn,gnn"],
              r"model must be one of gcn, .*; got .gnn."),
    "too small": (["--preset=cora", "--output={d}/out", "--memory_budget=100MB"],
                  r"memory budget 95.4 MiB \(100000000 bytes\) is too small to train this graph at any P up to "
                  r"\d+: at best gcn needs [\d.]+ MiB = 1.5 x largest step .* runtime [\d.]+ MiB; give "
                  r"at least"),
}

# Runs the tool's main for each case in one process (TensorFlow loads once), as app.run would.
DRIVER = """
import contextlib, importlib.util, io, json, sys
from absl import app, flags
spec = importlib.util.spec_from_file_location("partition_graph", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
for args in json.loads(sys.argv[2]):
    tool.FLAGS.unparse_flags()
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            tool.main(tool.FLAGS(["partition_graph.py"] + args))
            code = 0
        except SystemExit as exit:
            code = exit.code
        except (app.UsageError, flags.Error) as error:  # app.run prints these and exits with status 1
            print(error, file=sys.stderr)
            code = 1
    print(json.dumps({"code": code, "stderr": errors.getvalue()}))
"""


def test_bad_input_exits_1_with_a_message_and_no_output(tmp_path):
    (tmp_path / "good.txt").write_text("0 1\n1 2\n2 0\n2 5\n")
    (tmp_path / "bad.txt").write_text("0 1\n# comment\n1\n")
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    cases = [[arg.format(d=tmp_path) for arg in args] for args, _ in ERROR_CASES.values()]
    done = subprocess.run([sys.executable, "-c", DRIVER, str(TOOL), json.dumps(cases)], capture_output=True,
                          text=True, timeout=600, env=ENV, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"code"')]
    assert len(results) == len(ERROR_CASES), done.stdout
    for (name, (_, message)), result in zip(ERROR_CASES.items(), results):
        assert result["code"] == 1, (name, result)
        assert re.search(message, result["stderr"]), (name, result["stderr"])
        assert not (tmp_path / "out").exists(), name
    # The process itself exits with status 1.
    done = run_tool(f"--edges={tmp_path / 'bad.txt'}", f"--output={tmp_path / 'out'}", "--chunks=2")
    assert done.returncode == 1 and "partition_graph.py: error: " in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_the_p_a_budget_gives_trains_under_that_budget(tmp_path):
    """The documented path: the converter picks P for a budget, and train.py trains from that store under the
    same budget and no other flag (the scaled-down preset the suites keep for reddit-full's runs)."""
    training = recipes.TrainingMemory()
    two = convert_preset(tmp_path / "two", chunks=2)
    budget = training(two)[0]  # (blog x 0.5: P = 1 needs more, so the budget picks P = 2)
    done = run_tool("--preset=blog", "--scale=0.5", f"--output={tmp_path / 'store'}", f"--memory_budget={budget}",
                    "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"P=2 .*\n.*\ntraining \(the trainer's estimate\): gcn needs ", done.stdout), done.stdout
    train = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--model=gcn",
                            f"--store={tmp_path / 'store'}", f"--memory_budget={budget}", "--epochs=2",
                            "--validation_freq=0"], capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "read from the store and spill files: first epoch" in train.stdout, train.stdout


def convert_preset(path, chunks):
    done = run_tool("--preset=blog", "--scale=0.5", f"--output={path}", f"--chunks={chunks}", "--noprogress")
    assert done.returncode == 0, done.stderr[-3000:]
    return open_store(path)
