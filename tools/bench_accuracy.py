"""Test accuracy and epoch time of the recipes on a real graph: ngra-tf against PyG with the same settings.

    python tools/bench_accuracy.py                              # Amazon Computers, five models, 10 seeds
    python tools/bench_accuracy.py --dataset=cora --seeds=3
    python tools/bench_accuracy.py --models=gcn --seeds=2 --systems=ngra

Every model trains as its recipe says (ngra_tf.recipes: hidden units, learning
rate, weight decay, dropout, epochs, early stopping on the validation loss with
the best weights restored), on the features the dataset's defaults give
(Dataset.training_features: normalised as the data calls for, sparse where they
are). PyG trains the same architecture with the same settings, as a PyG user
writes it: the stock GCNConv, GATConv, SAGEConv, GINConv and APPNP (GCN's and
APPNP's normalised adjacency cached, as PyG's transductive examples do), Adam with
weight_decay on the first layer's weights (PyG's example; Keras's L2 in the
recipes means the same), dropout before every layer, full-batch steps, the same
early stopping. Both draw their own initial weights and dropout masks, so they
agree in distribution, not seed by seed.

Each cell is the mean ± standard deviation of the test accuracy over --seeds
seeds, beside the figure the dataset's paper published (Shchur et al. 2018,
Table 1, for Amazon Computers: 100 random splits of the same protocol, their own
tuned settings; Kipf & Welling and Velickovic et al. for Cora's standard split).
The epoch columns are steady-state medians (every epoch after the first of every
seed: a training step and the validation forward), both systems in the same
process, one after the other; the first epoch (tracing) is reported apart.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np
from absl import app, flags

from timing import epoch_timer  # tools/, the script's own directory

FLAGS = flags.FLAGS
MODELS = ("gcn", "gat", "sage", "gin", "appnp")
NAMES = {"gcn": "GCN", "gat": "GAT", "sage": "GraphSAGE", "gin": "GIN", "appnp": "APPNP"}
# Published mean test accuracy (%) and its standard deviation, by dataset and model; None: no figure for it.
PUBLISHED = {
    "amazon_computers": {"gcn": (82.6, 2.4), "gat": (78.0, 19.0), "sage": (82.4, 1.8), "gin": None, "appnp": None},
    "cora": {"gcn": (81.5, None), "gat": (83.0, 0.7), "sage": None, "gin": None, "appnp": None},
}
SOURCES = {"amazon_computers": "Shchur et al. 2018, Table 1 (GraphSAGE: its mean aggregator)",
           "cora": "Kipf & Welling 2017 (GCN), Velickovic et al. 2018 (GAT)"}
flags.DEFINE_string("dataset", "amazon_computers", "amazon_computers, cora, or a .npz in the Planetoid format.")
flags.DEFINE_list("models", list(MODELS), "Models: " + ", ".join(MODELS) + ".")
flags.DEFINE_integer("seeds", 10, "Seeds per model and system (0, 1, ...).", lower_bound=1)
flags.DEFINE_list("systems", ["ngra", "pyg"], "ngra, pyg.")
flags.DEFINE_string("json", None, "Also write every run's accuracy and epoch times here.")
flags.DEFINE_integer("threads", 0, "Threads for TF and torch (0: their defaults; 1 keeps several runs on a shared "
                     "machine from oversubscribing it, for accuracy alone).", lower_bound=0)


def load():
    from ngra_tf.graph import datasets  # noqa: PLC0415

    name = FLAGS.dataset
    if name in datasets.SHIPPED:
        return name, datasets.load(name)
    if not os.path.exists(name):
        raise app.UsageError(f"--dataset: no file {name}; give {', '.join(datasets.SHIPPED)} or a Planetoid .npz")
    return os.path.splitext(os.path.basename(name))[0], datasets.load_planetoid_npz(name)


# ---------------------------------------------------------------- ngra-tf

def ngra_run(data, model_name, seed):
    """(test accuracy, epoch seconds) of one ngra-tf run through the recipe."""
    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415

    keras.utils.set_random_seed(seed)
    recipe = recipes.RECIPES[model_name]
    features = data.training_features()
    graph = recipes.prepare_graph(model_name, data.graph)
    model = recipes.build_model(model_name, graph, data.num_classes, num_features=data.num_features,
                                sparse=not isinstance(features, np.ndarray))
    model.compile(optimizer=keras.optimizers.Adam(recipe.learning_rate), loss=ngra_tf.masked_loss(),
                  weighted_metrics=["accuracy"])
    timer, seconds = epoch_timer()
    model.fit(features, data.labels, sample_weight=data.train_mask, epochs=recipe.epochs, verbose=0,
              validation_data=(features, data.labels, data.val_mask),
              callbacks=[timer] + recipes.callbacks(recipe))
    result = model.evaluate(features, data.labels, sample_weight=data.test_mask, verbose=0, return_dict=True)
    return float(result["accuracy"]), seconds


# ---------------------------------------------------------------- PyG

def pyg_run(data, model_name, seed):
    """(test accuracy, epoch seconds) of the same recipe written with PyG's layers."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch_geometric import nn as gnn  # noqa: PLC0415
    from torch_geometric.utils import to_undirected  # noqa: PLC0415

    from ngra_tf import recipes  # noqa: PLC0415

    torch.manual_seed(seed)
    recipe = recipes.RECIPES[model_name]
    features = data.training_features(sparse=False)
    x = torch.from_numpy(features)
    y = torch.from_numpy(data.labels)
    g = data.graph
    # Symmetrised without self loops: GCNConv and GATConv add their own, SAGEConv and GINConv take none.
    edge_index = to_undirected(torch.from_numpy(np.stack([g.src, g.dst]).astype(np.int64)))
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    width, hidden, classes, drop = x.shape[1], recipe.hidden, data.num_classes, recipe.dropout

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            if model_name == "gcn":
                # cached: the normalised adjacency computed once (PyG's GCN example, transductive)
                self.convs = nn.ModuleList([gnn.GCNConv(width, hidden, cached=True),
                                            gnn.GCNConv(hidden, classes, cached=True)])
            elif model_name == "gat":
                self.convs = nn.ModuleList([gnn.GATConv(width, hidden, heads=8, dropout=drop),
                                            gnn.GATConv(8 * hidden, classes, heads=1, concat=False, dropout=drop)])
            elif model_name == "sage":
                self.convs = nn.ModuleList([gnn.SAGEConv(width, hidden), gnn.SAGEConv(hidden, classes)])
            elif model_name == "gin":
                def mlp(a, b):
                    return nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, b))

                self.convs = nn.ModuleList([gnn.GINConv(mlp(width, hidden), train_eps=True),
                                            gnn.GINConv(mlp(hidden, classes), train_eps=True)])
            else:
                self.convs = nn.ModuleList([nn.Linear(width, hidden), nn.Linear(hidden, classes)])
                self.propagate = gnn.APPNP(K=10, alpha=0.1, cached=True)

        def forward(self, x):
            act = nn.functional.elu if model_name == "gat" else nn.functional.relu
            h = x
            for i, conv in enumerate(self.convs):
                h = nn.functional.dropout(h, drop, self.training)
                h = conv(h) if model_name == "appnp" else conv(h, edge_index)
                if i == 0:
                    h = act(h)
            return self.propagate(h, edge_index) if model_name == "appnp" else h

    net = Net()
    # The recipe's L2 is on the first layer's weights (GAT's: both layers'), biases excluded.
    decayed = [p for name, p in net.named_parameters()
               if "bias" not in name and (model_name == "gat" or name.startswith("convs.0."))]
    rest = [p for p in net.parameters() if all(p is not q for q in decayed)]
    optimizer = torch.optim.Adam([{"params": decayed, "weight_decay": recipe.weight_decay},
                                  {"params": rest, "weight_decay": 0.0}], lr=recipe.learning_rate)
    masks = {name: torch.from_numpy(getattr(data, f"{name}_mask")) for name in ("train", "val", "test")}

    def loss_of(logits, mask):
        return nn.functional.cross_entropy(logits[mask], y[mask])

    best, best_state, since, seconds = float("inf"), None, 0, []
    for _ in range(recipe.epochs):
        start = time.perf_counter()
        net.train()
        optimizer.zero_grad()
        loss_of(net(x), masks["train"]).backward()
        optimizer.step()
        net.eval()
        with torch.no_grad():
            # Keras's val_loss counts the regulariser too; so does this, for the same stopping rule.
            val = loss_of(net(x), masks["val"]).item() + 0.5 * recipe.weight_decay * sum(
                float((p * p).sum()) for p in decayed)
        seconds.append(time.perf_counter() - start)
        if recipe.patience is None:
            continue
        if val < best:
            best, best_state, since = val, {k: v.clone() for k, v in net.state_dict().items()}, 0
        else:
            since += 1
            if since >= recipe.patience:
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    with torch.no_grad():
        predicted = net(x).argmax(1)
    accuracy = float((predicted[masks["test"]] == y[masks["test"]]).float().mean())
    return accuracy, seconds


RUNNERS = {"ngra": ngra_run, "pyg": pyg_run}


# ---------------------------------------------------------------- the table

def describe(runs):
    accuracy = 100 * np.array([a for a, _ in runs])
    later = [s for _, seconds in runs for s in seconds[1:]]
    first = statistics.median(seconds[0] for _, seconds in runs)
    return {"mean": float(accuracy.mean()), "std": float(accuracy.std()), "runs": [float(a) for a in accuracy],
            "epoch_ms": 1e3 * statistics.median(later) if later else None, "first_epoch_s": first,
            "epochs": [len(seconds) for _, seconds in runs]}


def main(argv):
    del argv
    unknown = set(FLAGS.models) - set(MODELS)
    if unknown:
        raise app.UsageError(f"--models: unknown {sorted(unknown)}; choose from {', '.join(MODELS)}")
    unknown = set(FLAGS.systems) - set(RUNNERS)
    if unknown or not FLAGS.systems:
        raise app.UsageError(f"--systems: choose from {', '.join(RUNNERS)}")
    if "pyg" in FLAGS.systems:
        try:
            import torch_geometric  # noqa: F401, PLC0415
        except ImportError:
            raise app.UsageError("--systems=pyg needs torch and torch_geometric (pip install '.[bench]'); "
                                 "or run --systems=ngra") from None
    if FLAGS.threads:
        import tensorflow as tf  # noqa: PLC0415

        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
        if "pyg" in FLAGS.systems:
            import torch  # noqa: PLC0415

            torch.set_num_threads(FLAGS.threads)
    name, data = load()
    print(f"{name}: {data.num_vertices} vertices, {data.graph.num_edges} edges, {data.num_features} features, "
          f"{data.num_classes} classes; {len(data.train_index)} / {len(data.val_index)} / {len(data.test_index)} "
          f"train / validation / test; {FLAGS.seeds} seeds; {os.cpu_count()} cores", flush=True)
    published = PUBLISHED.get(name, {})
    results = {}
    for model_name in FLAGS.models:
        for system in FLAGS.systems:
            runs = []
            for seed in range(FLAGS.seeds):
                runs.append(RUNNERS[system](data, model_name, seed))
                print(f"  {model_name} {system} seed {seed}: {100 * runs[-1][0]:.1f} % after {len(runs[-1][1])} "
                      "epochs", flush=True)
            results[(model_name, system)] = describe(runs)
    header = ["model"] + [f"{s} accuracy (%)" for s in FLAGS.systems] + ["published"] + \
        [f"{s} epoch (ms)" for s in FLAGS.systems] + [f"{s} first epoch (s)" for s in FLAGS.systems]
    if set(FLAGS.systems) == {"ngra", "pyg"}:
        header.append("PyG / ngra epoch")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for model_name in FLAGS.models:
        cells = [NAMES[model_name]]
        cells += [f"{results[m, s]['mean']:.1f} ± {results[m, s]['std']:.1f}"
                  for m, s in ((model_name, s) for s in FLAGS.systems)]
        figure = published.get(model_name)
        spread = "" if figure is None or figure[1] is None else f" ± {figure[1]}"
        cells.append("–" if figure is None else f"{figure[0]:.1f}{spread}")
        cells += [f"{results[model_name, s]['epoch_ms']:.1f}" for s in FLAGS.systems]
        cells += [f"{results[model_name, s]['first_epoch_s']:.2f}" for s in FLAGS.systems]
        if set(FLAGS.systems) == {"ngra", "pyg"}:
            cells.append(f"{results[model_name, 'pyg']['epoch_ms'] / results[model_name, 'ngra']['epoch_ms']:.2f}×")
        print("| " + " | ".join(cells) + " |")
    if name in SOURCES:
        print(f"published: {SOURCES[name]}")
    if FLAGS.json:
        with open(FLAGS.json, "w") as stream:
            json.dump({f"{m}/{s}": r for (m, s), r in results.items()}, stream, indent=1)


if __name__ == "__main__":
    app.run(main)
