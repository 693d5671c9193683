"""Peak memory of full-graph GCN training in PyG, for comparison with a streamed ngra-tf run.

    python tools/peak_pyg.py --preset=reddit-middle --epochs=2

Builds the preset's graph as ngra_tf.recipes prepares it for GCN (symmetrised,
self loops, GCN edge weights), then trains torch_geometric's GCNConv
(602 -> hidden -> classes, the weights precomputed, normalize=False) on the whole
graph with Adam and prints the process's peak resident memory above a
baseline taken after torch is imported and before the data is built. The
graph's own arrays count (PyG needs them in memory, as ngra-tf in-memory
training does). Needs torch and torch_geometric (an optional extra).
"""

from __future__ import annotations

import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "reddit-middle", "A synthetic preset (ngra_tf.datasets.PRESETS).")
flags.DEFINE_float("scale", 1.0, "Multiplies the preset's vertex and edge counts.", lower_bound=1e-4)
flags.DEFINE_integer("hidden", 128, "Hidden units.", lower_bound=1)
flags.DEFINE_integer("epochs", 2, "Training epochs.", lower_bound=1)


def main(argv):
    del argv
    try:
        import torch  # noqa: PLC0415
        from torch_geometric.nn import GCNConv  # noqa: PLC0415
    except ImportError as error:
        raise app.UsageError(f"needs torch and torch_geometric ({error})") from None
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.graph import datasets  # noqa: PLC0415
    from ngra_tf.runtime import resident  # noqa: PLC0415

    if FLAGS.preset not in datasets.PRESETS:
        raise app.UsageError(f"--preset must be one of {', '.join(datasets.PRESETS)}")
    baseline = resident.mark()
    dataset = datasets.synthetic(FLAGS.preset, scale=FLAGS.scale)
    graph = recipes.prepare_graph("gcn", dataset.graph)
    x = torch.from_numpy(dataset.dense_features(normalize=False))
    edge_index = torch.from_numpy(__import__("numpy").stack([graph.src, graph.dst]).astype("int64"))
    weight = torch.from_numpy(graph.edge_data.astype("float32"))
    labels = torch.from_numpy(dataset.labels.astype("int64"))
    train = torch.from_numpy(dataset.train_mask)
    del dataset, graph
    conv1 = GCNConv(x.shape[1], FLAGS.hidden, normalize=False)
    conv2 = GCNConv(FLAGS.hidden, int(labels.max()) + 1, normalize=False)
    optimizer = torch.optim.Adam(list(conv1.parameters()) + list(conv2.parameters()), lr=0.01)
    for epoch in range(FLAGS.epochs):
        start = time.perf_counter()
        optimizer.zero_grad()
        hidden = torch.relu(conv1(x, edge_index, weight))
        logits = conv2(hidden, edge_index, weight)
        loss = torch.nn.functional.cross_entropy(logits[train], labels[train])
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}, {time.perf_counter() - start:.2f} s")
    print(f"PyG full-graph GCN on {FLAGS.preset}: {baseline.peak()}")


if __name__ == "__main__":
    app.run(main)
