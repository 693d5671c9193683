"""Datasets by name as conversion inputs: Cora and the synthetic NGra Table 1 presets.

A synthetic preset is streamed, never held: its edges come block by block
from `synthetic.power_law_edges` and its features block by block from the
same generator `datasets.synthetic` draws them from, so the store holds
exactly the arrays `datasets.synthetic(name, seed, scale)` would (labels and
the split are drawn after all features; they are O(V)). Vertex arrays:
features, labels, train_mask, val_mask, test_mask.
"""

from __future__ import annotations

import numpy as np

from ngra_tf.graph import datasets
from ngra_tf.graph.synthetic import power_law_edges
from ngra_tf.store.sources import ArrayRows, EdgeBlock, EdgeSource, GraphEdges, RowSource

NAMES = ("cora",) + tuple(datasets.PRESETS)


class PowerLawEdges(EdgeSource):
    """datasets.synthetic's graph (synthetic.power_law_graph), streamed."""

    def __init__(self, num_vertices: int, num_edges: int, seed: int, description: dict):
        self.num_vertices, self.num_edges, self.seed = num_vertices, num_edges, seed
        self.description = description

    def blocks(self, block_edges: int):
        start = 0
        for src, dst in power_law_edges(self.num_vertices, self.num_edges, seed=self.seed, block_edges=block_edges):
            yield EdgeBlock(src.astype(np.int64), dst.astype(np.int64), np.arange(start, start + len(src)), None)
            start += len(src)


class SyntheticFeatures(RowSource):
    """datasets.synthetic's standard-normal features, drawn a block of rows at a time."""

    def __init__(self, num_rows: int, width: int, seed: int, normalize: bool):
        self.num_rows, self.row_shape, self.dtype = num_rows, (width,), np.dtype(np.float32)
        self.seed, self.normalize = seed, normalize
        self.label = f"synthetic features (seed {seed})"

    def blocks(self, block_rows: int, rng: np.random.Generator | None = None):
        rng = np.random.default_rng(self.seed) if rng is None else rng
        for start in range(0, self.num_rows, block_rows):
            rows = rng.standard_normal((min(block_rows, self.num_rows - start),) + self.row_shape, dtype=np.float32)
            yield datasets.normalize_rows(rows) if self.normalize else rows


def _masks(num_vertices: int, **indices) -> dict:
    masks = {}
    for name, index in indices.items():
        mask = np.zeros(num_vertices, bool)
        mask[index] = True
        masks[name] = ArrayRows(name, mask)
    return masks


def preset_inputs(name: str, seed: int = 0, scale: float = 1.0, normalize_features: bool | None = None):
    """(edges, {name: RowSource}, description) of dataset `name`.

    normalize_features row-normalises the features; by default as
    examples/train.py does: Cora's (bag of words) yes, synthetic ones no.
    """
    if name == "cora":
        if scale != 1.0:
            raise ValueError("cora has no scale: it is the published graph")
        dataset = datasets.cora()
        normalize = True if normalize_features is None else normalize_features
        rows = {"features": ArrayRows("features", dataset.dense_features(normalize=normalize)),
                "labels": ArrayRows("labels", dataset.labels)}
        rows.update(_masks(dataset.num_vertices, train_mask=dataset.train_index, val_mask=dataset.val_index,
                           test_mask=dataset.test_index))
        description = {"preset": "cora", "num_classes": dataset.num_classes, "normalized_features": normalize}
        return GraphEdges(dataset.graph), rows, description
    if name not in datasets.PRESETS:
        raise ValueError(f"preset must be one of {', '.join(NAMES)}; got {name!r}")
    vertices, edges, width, classes = datasets.preset_shape(name, scale)
    normalize = bool(normalize_features)
    description = {"preset": name, "seed": seed, "scale": scale, "num_classes": classes,
                   "normalized_features": normalize}
    features = SyntheticFeatures(vertices, width, seed, normalize)
    # Labels and the split come after all the features from the same generator: draw through them first.
    rng = np.random.default_rng(seed)
    for _ in features.blocks(max(1, (1 << 24) // (4 * width)), rng):
        pass
    labels, train, val, test = datasets.synthetic_labels(rng, vertices, classes)
    rows = {"features": features, "labels": ArrayRows("labels", labels)}
    rows.update(_masks(vertices, train_mask=train, val_mask=val, test_mask=test))
    return PowerLawEdges(vertices, edges, seed, {"kind": "synthetic preset", **description}), rows, description
