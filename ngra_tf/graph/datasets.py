"""Loaders for the real graphs shipped with the project (Cora, Amazon Computers) and the synthetic presets.

`load_planetoid_npz` reads the plain-npz form of a Planetoid dataset (Cora,
Citeseer, PubMed): the graph with its edges as published (not symmetrised,
duplicates and self loops kept), sparse features, labels and the standard
split. The keys:

  num_vertices                 int scalar
  edge_src, edge_dst           int [E]: directed edges edge_src[i] -> edge_dst[i]
  feat_indptr, feat_indices,   the CSR arrays of the [num_vertices, F] features
  feat_data, feat_shape
  labels                       int [num_vertices]: class ids, -1 for unlabelled
  train_index, val_index,      int vertex ids of the split
  test_index
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ngra_tf.graph.graph import Graph

# The datasets shipped inside the package (installed with it, editable or not).
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

_KEYS = ("num_vertices", "edge_src", "edge_dst", "feat_indptr", "feat_indices", "feat_data", "feat_shape",
         "labels", "train_index", "val_index", "test_index")
_SPLITS = ("train_index", "val_index", "test_index")
# The real graphs shipped inside the package, by name (load(name)); each file's README row is in docs/guide/keras.md.
SHIPPED = ("cora", "amazon_computers")
NORMALIZATIONS = ("auto", "row", "l2", "none")
# Below this fraction of non-zeros, features stay sparse up to the first matmul (training_features(sparse="auto")).
SPARSE_DENSITY = 0.1
# Rows with at most this many non-zeros on average are row-normalised by training_features(normalize="auto").
ROW_NORMALIZED_WORDS = 64


class Dataset(NamedTuple):
    """A node-classification dataset: row i of every per-vertex array is vertex i.

    For Keras: `model.fit(dataset.dense_features(), dataset.labels,
    sample_weight=dataset.train_mask, validation_data=(x, dataset.labels,
    dataset.val_mask))`.
    """

    graph: Graph  # directed edges as published
    features: sp.csr_matrix  # [num_vertices, num_features] float32
    labels: np.ndarray  # [num_vertices] int64; -1 marks an unlabelled vertex
    train_index: np.ndarray  # int64 vertex ids
    val_index: np.ndarray
    test_index: np.ndarray
    num_classes: int

    @property
    def num_vertices(self) -> int:
        return self.graph.num_vertices

    @property
    def num_features(self) -> int:
        return self.features.shape[1]

    def _mask(self, index) -> np.ndarray:
        mask = np.zeros(self.num_vertices, bool)
        mask[index] = True
        return mask

    @property
    def train_mask(self) -> np.ndarray:
        """[num_vertices] bool: the training vertices (a sample weight for fit)."""
        return self._mask(self.train_index)

    @property
    def val_mask(self) -> np.ndarray:
        return self._mask(self.val_index)

    @property
    def test_mask(self) -> np.ndarray:
        return self._mask(self.test_index)

    def dense_features(self, normalize: bool = False) -> np.ndarray:
        """The features as a dense float32 [num_vertices, num_features] array.

        normalize=True divides each row by its sum (rows that sum to 0 stay
        0), as GCN and GAT do with bag-of-words features.
        """
        x = self.features.toarray().astype(np.float32, copy=False)
        return normalize_rows(x) if normalize else x

    def training_features(self, normalize: str = "auto", sparse="auto"):
        """The features as a model trains on them: a scipy CSR matrix (sparse) or a dense float32 array.

        normalize: "row" divides each row by its sum, "l2" by its Euclidean
        norm, "none" leaves it; "auto" picks for the data (auto_normalization).
        sparse: True, False, or "auto": sparse when fewer than SPARSE_DENSITY
        of the entries are non-zero. Either way the model computes the same.
        """
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZATIONS)}; got {normalize!r}")
        if not (sparse is True or sparse is False or sparse == "auto"):
            raise ValueError(f"sparse must be True, False or 'auto'; got {sparse!r}")
        how = auto_normalization(self.features) if normalize == "auto" else normalize
        x = sp.csr_matrix(self.features, dtype=np.float32, copy=True)
        if how != "none":
            norms = np.asarray(abs(x).sum(axis=1) if how == "row" else np.sqrt(x.multiply(x).sum(axis=1))).ravel()
            x = sp.csr_matrix(sp.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms != 0)) @ x,
                              dtype=np.float32)
        if sparse == "auto":
            sparse = x.nnz < SPARSE_DENSITY * np.prod(x.shape, dtype=np.int64)
        return x if sparse else x.toarray()


def auto_normalization(features) -> str:
    """The normalisation training_features(normalize="auto") applies to `features`: "row" (Kipf & Welling's) for
    rows of at most ROW_NORMALIZED_WORDS non-zeros on average (Cora: 18), else "l2".

    Row-normalised entries of a row with k non-zeros are 1/k: past a few tens of words they are too small for a
    model's initial weights and its weight decay (Amazon Computers, about 270 words a product: the recipes' GCN
    reaches 54 % on row-normalised features, 82 % on l2-normalised ones, whose entries are 1/sqrt(k)).
    """
    x = sp.csr_matrix(features)
    rows = np.count_nonzero(np.diff(x.indptr))
    return "row" if x.nnz <= ROW_NORMALIZED_WORDS * max(rows, 1) else "l2"


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Divides each row of x by its sum, in place (rows that sum to 0 stay 0); returns x."""
    sums = x.sum(axis=1, keepdims=True)
    np.divide(x, sums, out=x, where=sums != 0)
    return x


def _vector(arrays, key, length=None):
    value = np.asarray(arrays[key])
    if value.ndim != 1:
        raise ValueError(f"{key} must be 1-D, got shape {value.shape}")
    if length is not None and value.shape[0] != length:
        raise ValueError(f"{key} must have length {length}, got {value.shape[0]}")
    return value


def _integers(key, value):
    if value.size and not np.issubdtype(value.dtype, np.integer):
        raise ValueError(f"{key} must hold integers, got dtype {value.dtype}")
    return value.astype(np.int64)


def load_planetoid_npz(path) -> Dataset:
    """Loads a Planetoid dataset stored as a .npz of plain arrays (no pickle)."""
    with np.load(path, allow_pickle=False) as npz:
        missing = [key for key in _KEYS if key not in npz.files]
        if missing:
            raise ValueError(f"{path} lacks the key(s) {', '.join(missing)}")
        arrays = {key: npz[key] for key in _KEYS}

    num_vertices = arrays["num_vertices"]
    if num_vertices.shape != () or not np.issubdtype(num_vertices.dtype, np.integer) or num_vertices < 0:
        raise ValueError(f"num_vertices must be a non-negative integer scalar, got {num_vertices!r}")
    n = int(num_vertices)

    src = _integers("edge_src", _vector(arrays, "edge_src"))
    dst = _integers("edge_dst", _vector(arrays, "edge_dst", len(src)))
    try:
        graph = Graph.from_edges(src, dst, n)
    except ValueError as error:
        raise ValueError(f"bad edges (edge_src, edge_dst): {error}") from None

    shape = _integers("feat_shape", _vector(arrays, "feat_shape", 2))
    if shape[0] != n:
        raise ValueError(f"feat_shape {tuple(shape)} must have num_vertices={n} rows")
    indptr = _integers("feat_indptr", _vector(arrays, "feat_indptr", n + 1))
    indices = _integers("feat_indices", _vector(arrays, "feat_indices"))
    data = _vector(arrays, "feat_data", len(indices))
    if indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0):
        raise ValueError(f"feat_indptr must rise from 0 to len(feat_indices)={len(indices)}")
    if indices.size and (indices.min() < 0 or indices.max() >= shape[1]):
        raise ValueError(f"feat_indices must lie in [0, {shape[1]})")
    features = sp.csr_matrix((data.astype(np.float32), indices, indptr), shape=tuple(int(s) for s in shape))

    labels = _integers("labels", _vector(arrays, "labels", n))
    if labels.size and labels.min() < -1:
        raise ValueError(f"labels must be class ids >= 0, or -1 for unlabelled; got {labels.min()}")
    num_classes = int(labels.max()) + 1 if labels.size else 0

    splits = {}
    for key in _SPLITS:
        index = _integers(key, _vector(arrays, key))
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"{key} holds vertex ids outside [0, {n})")
        if np.any(labels[index] < 0):
            raise ValueError(f"{key} holds unlabelled vertices")
        splits[key] = index
    return Dataset(graph, features, labels, num_classes=num_classes, **splits)


def cora(path=None) -> Dataset:
    """Cora with the standard Planetoid split; by default the copy shipped with ngra_tf."""
    return load_planetoid_npz(_shipped("cora") if path is None else path)


def amazon_computers(path=None) -> Dataset:
    """Amazon Computers (Shchur et al. 2018) with a 20 / 30 per class train / validation split; by default the
    copy shipped with ngra_tf."""
    return load_planetoid_npz(_shipped("amazon_computers") if path is None else path)


def load(name: str) -> Dataset:
    """A real graph shipped with ngra_tf, by name (SHIPPED)."""
    return load_planetoid_npz(_shipped(name))


def _shipped(name: str) -> str:
    if name not in SHIPPED:
        raise ValueError(f"no shipped dataset {name!r}; the shipped ones are {', '.join(SHIPPED)}")
    return os.path.join(DATA_DIR, f"{name}.npz")


# NGra Table 1: vertices, edges, feature width, classes.
PRESETS = {
    "pubmed": (19_700, 108_400, 500, 3),
    "protein": (43_500, 205_600, 29, 3),
    "blog": (10_300, 668_000, 128, 39),
    "reddit-small": (46_600, 1_400_000, 602, 41),
    "reddit-middle": (233_000, 23_200_000, 602, 41),
    "reddit-full": (2_200_000, 571_000_000, 300, 50),
    "enwiki": (3_200_000, 222_100_000, 300, 12),
}


def synthetic(preset: str, seed: int = 0, scale: float = 1.0) -> Dataset:
    """A power-law graph at the shape of an NGra Table 1 dataset, with random
    features (standard normal) and labels, and a 10% / 10% / 20% split.

    `scale` multiplies the vertex and edge counts (e.g. 0.01 for a quick run).
    The counts, width and class count come from the table; nothing else does.
    """
    from ngra_tf.graph.synthetic import power_law_graph  # noqa: PLC0415  synthetic imports Graph.

    vertices, edges, width, classes = preset_shape(preset, scale)
    rng = np.random.default_rng(seed)
    graph = power_law_graph(vertices, edges, seed=seed)
    features = sp.csr_matrix(rng.standard_normal((vertices, width), dtype=np.float32))
    labels, train, val, test = synthetic_labels(rng, vertices, classes)
    return Dataset(graph, features, labels, train, val, test, classes)


def preset_shape(preset: str, scale: float = 1.0) -> tuple[int, int, int, int]:
    """(vertices, edges, feature width, classes) of a synthetic preset at a scale."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    vertices, edges, width, classes = PRESETS[preset]
    return max(1, round(vertices * scale)), round(edges * scale), width, classes


def synthetic_labels(rng: np.random.Generator, vertices: int, classes: int):
    """(labels, train, val, test) of a synthetic preset, drawn after its features from the same generator."""
    labels = rng.integers(0, classes, vertices)
    order = rng.permutation(vertices)
    train, val = order[: vertices // 10], order[vertices // 10: vertices // 5]
    test = order[vertices // 5: vertices // 5 + vertices // 5]
    return labels, np.sort(train), np.sort(val), np.sort(test)


def load_edge_list(path, num_vertices: int | None = None) -> Graph:
    """A graph from an edge list: a text file or an .npz.

    Text: one edge per line, `src dst` or `src dst weight`, separated by
    whitespace or commas; blank lines and lines starting with # are skipped.
    The weights, if any, become the edge data.
    npz: arrays `src` and `dst`, optionally `edge_data` and `num_vertices`.
    num_vertices defaults to the file's, or 1 + the largest id.
    """
    path = os.fspath(path)
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as stored:
            missing = [key for key in ("src", "dst") if key not in stored]
            if missing:
                raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
            if num_vertices is None and "num_vertices" in stored:
                num_vertices = int(stored["num_vertices"])
            data = stored["edge_data"] if "edge_data" in stored else None
            return Graph.from_edges(stored["src"], stored["dst"], num_vertices, edge_data=data)
    blocks = list(read_edge_list_blocks(path))
    weighted = any(block[2] is not None for block in blocks)
    src = np.concatenate([block[0] for block in blocks])
    dst = np.concatenate([block[1] for block in blocks])
    weights = np.concatenate([block[2] for block in blocks]) if weighted else None
    return Graph.from_edges(src, dst, num_vertices, edge_data=weights)


def read_edge_list_blocks(path, block_lines: int = 1 << 16):
    """Parses a text edge list (the format load_edge_list reads) a block of lines at a time.

    Yields (src, dst, weights, line_numbers) per block: int64 ids, float32
    weights or None, and each edge's 1-based line number (for messages that
    point at a line). At least one block is yielded, empty for a file
    without edges. Raises ValueError naming the file and line of a line that
    is not `src dst` or `src dst weight`, or whose ids are not integers.
    """
    path = os.fspath(path)
    width = None  # fields per line: the first edge line decides

    def block(rows, numbers):
        table = np.array(rows, dtype=np.float64).reshape(-1, width or 2)
        weights = table[:, 2].astype(np.float32) if width == 3 else None
        # Ids went through int(): exact in float64 below 2^53.
        return (table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), weights,
                np.array(numbers, dtype=np.int64))

    rows, numbers = [], []
    yielded = False
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.replace(",", " ").split()
            if len(fields) not in (2, 3) or (width is not None and len(fields) != width):
                raise ValueError(f"{path}:{number}: expected 'src dst' or 'src dst weight' on every line, "
                                 f"got {line!r}")
            width = len(fields)
            try:
                rows.append([int(fields[0]), int(fields[1])] + [float(f) for f in fields[2:]])
            except ValueError:
                raise ValueError(f"{path}:{number}: vertex ids must be integers, got {line!r}") from None
            numbers.append(number)
            if len(rows) == block_lines:
                yield block(rows, numbers)
                rows, numbers, yielded = [], [], True
    if rows or not yielded:
        yield block(rows, numbers)
