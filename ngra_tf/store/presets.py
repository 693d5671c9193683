"""Datasets by name as conversion inputs: the shipped real graphs and the synthetic NGra Table 1 presets.

A shipped graph (Cora, Amazon Computers) brings its features as a model
trains on them (`Dataset.training_features`: normalised for the data, and
CSR where few entries are non-zero, so the store's feature array is CSR).

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
from ngra_tf.store.sources import ArrayRows, EdgeBlock, EdgeSource, GraphEdges, RowSource, row_source

NAMES = tuple(datasets.SHIPPED) + tuple(datasets.PRESETS)
FEATURE_FORMATS = ("auto", "sparse", "dense")


class PowerLawEdges(EdgeSource):
    """datasets.synthetic's graph (synthetic.power_law_graph), streamed."""

    def __init__(self, num_vertices: int, num_edges: int, seed: int, description: dict):
        self.num_vertices, self.num_edges, self.seed = num_vertices, num_edges, seed
        self.description = description

    def blocks(self, block_edges: int):
        start = 0
        for src, dst in power_law_edges(self.num_vertices, self.num_edges, seed=self.seed, block_edges=block_edges):
            yield EdgeBlock(src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False),
                            np.arange(start, start + len(src)), None)
            start += len(src)

    def known_sizes(self) -> tuple:
        return self.num_vertices, self.num_edges


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


def preset_inputs(name: str, seed: int = 0, scale: float = 1.0, normalize: str = "auto",
                  feature_format: str = "auto"):
    """(edges, {name: RowSource}, description) of dataset `name`.

    normalize: "auto" (a shipped graph's as Dataset.training_features picks it, as examples/train.py trains;
    synthetic features: none), "row", "l2" (shipped graphs only) or "none". feature_format: a shipped graph's
    features stored as CSR ("sparse"), dense ("dense"), or as training_features decides ("auto": CSR under
    datasets.SPARSE_DENSITY non-zeros); synthetic features are dense.
    """
    if normalize not in datasets.NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {', '.join(datasets.NORMALIZATIONS)}; got {normalize!r}")
    if feature_format not in FEATURE_FORMATS:
        raise ValueError(f"feature_format must be one of {', '.join(FEATURE_FORMATS)}; got {feature_format!r}")
    if name in datasets.SHIPPED:
        if scale != 1.0:
            raise ValueError(f"{name} has no scale: it is the published graph")
        dataset = datasets.load(name)
        features = dataset.training_features(normalize, "auto" if feature_format == "auto" else
                                             feature_format == "sparse")
        rows = {"features": row_source("features", features), "labels": ArrayRows("labels", dataset.labels)}
        rows.update(_masks(dataset.num_vertices, train_mask=dataset.train_index, val_mask=dataset.val_index,
                           test_mask=dataset.test_index))
        how = datasets.auto_normalization(dataset.features) if normalize == "auto" else normalize
        description = {"preset": name, "num_classes": dataset.num_classes, "normalized_features": how,
                       "feature_format": "csr" if getattr(rows["features"], "sparse", False) else "dense"}
        return GraphEdges(dataset.graph), rows, description
    if name not in datasets.PRESETS:
        raise ValueError(f"preset must be one of {', '.join(NAMES)}; got {name!r}")
    if normalize == "l2" or feature_format == "sparse":
        raise ValueError(f"{name}'s synthetic features are dense standard-normal rows: normalize=l2 and "
                         f"feature_format=sparse apply to {', '.join(datasets.SHIPPED)}")
    vertices, edges, width, classes = datasets.preset_shape(name, scale)
    normalize = normalize == "row"
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
