"""Sparse bag-of-words features: GCN's epoch and peak memory, ngra-tf (sparse and dense) against PyG (dense).

    python tools/bench_sparse.py                      # Coauthor-Physics-shaped: 34,493 vertices, 8,415 features
    python tools/bench_sparse.py --scale=0.1 --epochs=5
    python tools/bench_sparse.py --systems=store-sparse,store-dense --chunks=4

The graph has the shape of Shchur et al.'s Coauthor Physics: 34,493
vertices, 247,962 undirected edges (a power-law graph, ngra_tf.graph.synthetic),
8,415 binary bag-of-words features of which 0.4 % are non-zero (each vertex
draws its word count from a geometric distribution around that mean), 5
classes, 20 / 30 training / validation vertices per class. Labels are random:
this measures speed and memory, not accuracy.

Each system trains the recipe's GCN (16 hidden, dropout 0.5, Adam 0.01, the
validation forward every epoch) in a subprocess of its own, so that peaks
compare; the peak is the process's resident memory above a baseline taken
once its framework is loaded, before the data is made:

    ngra sparse   ngra-tf, the features a scipy CSR matrix (training_features(sparse="auto"))
    ngra dense    ngra-tf, the same features as a dense float32 array
    PyG dense     torch_geometric's GCNConv on a dense tensor: the full-batch loop of PyG's GCN example
    store sparse  ngra-tf from a chunk store (P = --chunks) whose feature array is CSR, under the smallest
                  memory budget the model accepts (its own estimate), validation from the store too
    store dense   the same with the features stored dense

A store's cell writes its store first (not timed, not in the peak: its
baseline is taken after the conversion, once the dataset is freed), so its
peak is what training from disk holds. The epoch is the median of the epochs
after the first (reported apart).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

from timing import epoch_timer  # tools/, the script's own directory

FLAGS = flags.FLAGS
SHAPE = (34_493, 247_962, 8_415, 5)  # Coauthor Physics: vertices, undirected edges, features, classes
DENSITY = 0.004
SYSTEMS = ("ngra-sparse", "ngra-dense", "pyg-dense", "store-sparse", "store-dense")
flags.DEFINE_float("scale", 1.0, "Multiplies the vertex and edge counts.", lower_bound=1e-3)
flags.DEFINE_integer("epochs", 10, "Epochs per system (the first is reported apart).", lower_bound=2)
flags.DEFINE_list("systems", list(SYSTEMS[:3]), "Systems: " + ", ".join(SYSTEMS) + ".")
flags.DEFINE_integer("chunks", 4, "P of the store systems.", lower_bound=1)
flags.DEFINE_string("cell", None, "Internal: run one system and print its result as JSON.")


def bag_of_words(scale, seed=0):
    """The benchmark's dataset (see the module doc)."""
    import scipy.sparse as sp  # noqa: PLC0415

    from ngra_tf.graph import datasets  # noqa: PLC0415
    from ngra_tf.graph.synthetic import power_law_graph  # noqa: PLC0415

    vertices, edges, width, classes = SHAPE
    vertices, edges = max(100, round(vertices * scale)), max(100, round(edges * scale))
    rng = np.random.default_rng(seed)
    graph = power_law_graph(vertices, edges, seed=seed).symmetrize()
    words = np.minimum(rng.geometric(1.0 / (DENSITY * width), vertices), width)
    rows = np.repeat(np.arange(vertices), words)
    cols = np.concatenate([rng.choice(width, n, replace=False) for n in words])
    features = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(vertices, width))
    labels = rng.integers(0, classes, vertices)
    order = rng.permutation(vertices)
    train, val = np.sort(order[:20 * classes]), np.sort(order[20 * classes:50 * classes])
    test = np.sort(order[50 * classes:])
    return datasets.Dataset(graph, features, labels, train, val, test, classes)


def run_ngra(scale, epochs, sparse):
    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.runtime import resident  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    baseline = resident.mark()
    data = bag_of_words(scale)
    x = data.training_features(sparse=sparse)
    sizes = {"features_bytes": int(x.data.nbytes + x.indices.nbytes + x.indptr.nbytes) if sparse else int(x.nbytes)}
    graph = recipes.prepare_graph("gcn", data.graph)
    model = recipes.build_model("gcn", graph, data.num_classes)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    timer, seconds = epoch_timer()
    model.fit(x, data.labels, sample_weight=data.train_mask, epochs=epochs, verbose=0, callbacks=[timer],
              validation_data=(x, data.labels, data.val_mask))
    weights = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_weights)
    return {"seconds": seconds, "peak": baseline.peak().above_baseline_bytes, "model_bytes": weights,
            "graph_bytes": int(graph.src.nbytes + graph.dst.nbytes + graph.edge_data.nbytes), **sizes}


def run_store(scale, epochs, sparse, num_parts):
    import gc  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.runtime import resident  # noqa: PLC0415
    from ngra_tf.store import open_store, write_store  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = bag_of_words(scale)
        arrays = {"features": data.training_features(sparse=sparse), "labels": data.labels,
                  "train_mask": data.train_mask, "val_mask": data.val_mask}
        write_store(tmp + "/bag.store", recipes.prepare_graph("gcn", data.graph), num_parts, arrays)
        classes = data.num_classes
        del data, arrays
        gc.collect()
        baseline = resident.mark()
        store = open_store(tmp + "/bag.store")
        features = sum(store.vertex_nbytes("features", p) for p in range(num_parts))

        def model(budget):
            keras.utils.set_random_seed(0)
            built = recipes.build_model("gcn", store, classes, sparse=sparse, memory_budget=budget)
            built.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(),
                          weighted_metrics=["accuracy"])
            built.build(store.array("features").shape)
            return built

        budget = model(2**40).memory_plan().working_set  # the smallest budget it accepts
        gcn = model(budget)
        timer, seconds = epoch_timer()
        x, y = store.array("features"), store.array("labels")
        gcn.fit(x, y, sample_weight=store.array("train_mask"), epochs=epochs, verbose=0, callbacks=[timer],
                validation_data=(x, y, store.array("val_mask")))
        return {"seconds": seconds, "peak": baseline.peak().above_baseline_bytes, "features_bytes": features,
                "budget": budget}


def run_pyg(scale, epochs):
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch_geometric.nn import GCNConv  # noqa: PLC0415

    from ngra_tf.runtime import resident  # noqa: PLC0415

    torch.manual_seed(0)
    baseline = resident.mark()
    data = bag_of_words(scale)
    x = torch.from_numpy(data.training_features(sparse=False))
    y = torch.from_numpy(data.labels)
    g = data.graph.remove_self_loops()
    edge_index = torch.from_numpy(np.stack([g.src, g.dst]).astype(np.int64))
    convs = nn.ModuleList([GCNConv(x.shape[1], 16, cached=True), GCNConv(16, data.num_classes, cached=True)])
    optimizer = torch.optim.Adam([{"params": convs[0].parameters(), "weight_decay": 5e-4},
                                  {"params": convs[1].parameters(), "weight_decay": 0.0}], lr=0.01)
    train, val = torch.from_numpy(data.train_mask), torch.from_numpy(data.val_mask)

    def forward(training):
        h = nn.functional.dropout(x, 0.5, training)
        h = nn.functional.relu(convs[0](h, edge_index))
        return convs[1](nn.functional.dropout(h, 0.5, training), edge_index)

    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.cross_entropy(forward(True)[train], y[train]).backward()
        optimizer.step()
        with torch.no_grad():
            nn.functional.cross_entropy(forward(False)[val], y[val])
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds, "peak": baseline.peak().above_baseline_bytes, "features_bytes": int(x.nbytes)}


def main(argv):
    del argv
    if FLAGS.cell is not None:
        if FLAGS.cell.startswith("store-"):
            result = run_store(FLAGS.scale, FLAGS.epochs, FLAGS.cell == "store-sparse", FLAGS.chunks)
        elif FLAGS.cell == "pyg-dense":
            result = run_pyg(FLAGS.scale, FLAGS.epochs)
        else:
            result = run_ngra(FLAGS.scale, FLAGS.epochs, FLAGS.cell == "ngra-sparse")
        print("RESULT " + json.dumps(result))
        return
    unknown = set(FLAGS.systems) - set(SYSTEMS)
    if unknown:
        raise app.UsageError(f"--systems: unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    data = bag_of_words(FLAGS.scale)
    print(f"bag-of-words graph: {data.num_vertices} vertices, {data.graph.num_edges} directed edges, "
          f"{data.num_features} features, {data.features.nnz / np.prod(data.features.shape):.2%} non-zero "
          f"({data.features.nnz} entries); {os.cpu_count()} cores", flush=True)
    results = {}
    for system in FLAGS.systems:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), f"--cell={system}",
                               f"--scale={FLAGS.scale}", f"--epochs={FLAGS.epochs}", f"--chunks={FLAGS.chunks}"],
                              capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
        if done.returncode != 0 or not line:
            sys.exit(f"bench_sparse.py: {system} failed:\n{done.stderr[-3000:]}")
        results[system] = json.loads(line[0][len("RESULT "):])
    mib = 2.0 ** 20
    print("| system | epoch (ms) | first epoch (s) | peak above baseline (MiB) | features in memory (MiB) |\n"
          "|---|---|---|---|---|")
    for system, r in results.items():
        print(f"| {system} | {1e3 * statistics.median(r['seconds'][1:]):.1f} | {r['seconds'][0]:.2f} | "
              f"{r['peak'] / mib:.1f} | {r['features_bytes'] / mib:.1f} |")
    for system in ("store-sparse", "store-dense"):
        if system in results:
            r = results[system]
            print(f"{system}: P={FLAGS.chunks}, the smallest budget it accepts {r['budget'] / mib:.1f} MiB, peak "
                  f"{r['peak'] / r['budget']:.2f}x that; the store's features {r['features_bytes'] / mib:.1f} MiB")
    if "store-sparse" in results and "store-dense" in results:
        ratio = (statistics.median(results["store-dense"]["seconds"][1:])
                 / statistics.median(results["store-sparse"]["seconds"][1:]))
        print(f"store-dense / store-sparse epoch: {ratio:.2f}x")
    if "ngra-sparse" in results:
        r = results["ngra-sparse"]
        data_bytes = r["features_bytes"] + r["graph_bytes"] + r["model_bytes"]
        print(f"ngra sparse: peak {r['peak'] / data_bytes:.2f}x its sparse data plus the model "
              f"({data_bytes / mib:.1f} MiB: features {r['features_bytes'] / mib:.1f}, prepared graph "
              f"{r['graph_bytes'] / mib:.1f}, weights {r['model_bytes'] / mib:.2f})")
        for other in ("pyg-dense", "ngra-dense"):
            if other in results:
                ratio = statistics.median(results[other]["seconds"][1:]) / statistics.median(r["seconds"][1:])
                print(f"{other} / ngra-sparse epoch: {ratio:.2f}x")


if __name__ == "__main__":
    app.run(main)
