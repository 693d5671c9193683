"""ngra_tf.graph.datasets: the Planetoid npz loader and the project's Cora."""

import numpy as np
import pytest
import scipy.sparse as sp

from ngra_tf.graph import Graph
from ngra_tf.graph import datasets


@pytest.fixture(scope="module")
def cora():
    return datasets.cora()


def test_cora_shapes(cora):
    assert isinstance(cora, datasets.Dataset)
    g = cora.graph
    assert isinstance(g, Graph)
    assert (g.num_vertices, g.num_edges) == (2708, 10858)
    assert isinstance(cora.features, sp.csr_matrix)
    assert cora.features.shape == (2708, 1433) and cora.features.dtype == np.float32
    assert cora.labels.shape == (2708,) and cora.labels.dtype == np.int64
    assert cora.num_classes == 7 and set(np.unique(cora.labels)) == set(range(7))
    sizes = [len(cora.train_index), len(cora.val_index), len(cora.test_index)]
    assert sizes == [140, 500, 1000]
    for index in (cora.train_index, cora.val_index, cora.test_index):
        assert index.dtype == np.int64 and len(np.unique(index)) == len(index)
    assert not set(cora.train_index) & set(cora.test_index)
    assert not set(cora.val_index) & set(cora.test_index)


def test_cora_is_loaded_as_published(cora):
    raw = np.load(datasets.DATA_DIR + "/cora.npz")
    g = cora.graph
    np.testing.assert_array_equal(g.src, raw["edge_src"])
    np.testing.assert_array_equal(g.dst, raw["edge_dst"])
    np.testing.assert_array_equal(cora.features.data, raw["feat_data"])
    assert np.all(np.isin(cora.features.data, [0.0, 1.0]))
    # Duplicates kept: Planetoid lists 10858 edges, 10556 distinct (already both directions).
    assert g.remove_duplicates().num_edges == 10556
    assert g.symmetrize().num_edges == 10556


def test_cora_explicit_path_matches_default(cora):
    again = datasets.cora(datasets.DATA_DIR + "/cora.npz")
    np.testing.assert_array_equal(again.graph.src, cora.graph.src)
    np.testing.assert_array_equal(again.labels, cora.labels)


def _arrays():
    """A valid tiny dataset: 4 vertices, 3 features, 2 classes."""
    features = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 1, 0]], np.float32))
    return dict(num_vertices=np.int64(4), edge_src=np.array([0, 1, 2]), edge_dst=np.array([1, 2, 3]),
                feat_indptr=features.indptr.astype(np.int64), feat_indices=features.indices.astype(np.int64),
                feat_data=features.data, feat_shape=np.array([4, 3]), labels=np.array([0, 1, 1, 0]),
                train_index=np.array([0]), val_index=np.array([1, 2]), test_index=np.array([3]))


def _save(tmp_path, arrays):
    path = tmp_path / "tiny.npz"
    np.savez(path, **arrays)
    return path


def test_tiny_round_trip(tmp_path):
    data = datasets.load_planetoid_npz(_save(tmp_path, _arrays()))
    assert (data.graph.num_vertices, data.graph.num_edges, data.num_classes) == (4, 3, 2)
    np.testing.assert_array_equal(data.features.toarray(), [[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(data.val_index, [1, 2])


@pytest.mark.parametrize(
    "key, value",
    [
        ("labels", None),  # missing
        ("test_index", None),
        ("edge_dst", np.array([1, 2])),  # wrong length
        ("edge_src", np.array([0, 1, 9])),  # out of range
        ("labels", np.array([0, 1, 1])),
        ("feat_indptr", np.array([0, 1, 3])),
        ("feat_data", np.ones(2, np.float32)),
        ("feat_shape", np.array([5, 3])),
        ("feat_indices", np.array([0, 1, 7, 0, 1])),
        ("train_index", np.array([4])),
        ("val_index", np.array([[1, 2]])),
        ("num_vertices", np.array([4, 4])),
        ("edge_src", np.array([0.5, 1.0, 2.0])),
    ],
)
def test_malformed_npz(tmp_path, key, value):
    arrays = _arrays()
    if value is None:
        del arrays[key]
    else:
        arrays[key] = value
    with pytest.raises(ValueError, match=key):
        datasets.load_planetoid_npz(_save(tmp_path, arrays))


# ---- the shipped datasets by name: Amazon Computers ----


@pytest.fixture(scope="module")
def amazon():
    return datasets.load("amazon_computers")


def test_shipped_names_load(cora):
    assert datasets.SHIPPED == ("cora", "amazon_computers")
    again = datasets.load("cora")
    np.testing.assert_array_equal(again.graph.src, cora.graph.src)
    np.testing.assert_array_equal(again.features.toarray(), cora.features.toarray())


def test_amazon_computers_shapes_split_and_classes(amazon):
    g = amazon.graph
    assert (g.num_vertices, g.num_edges) == (13_752, 287_209)
    assert isinstance(amazon.features, sp.csr_matrix) and amazon.features.dtype == np.float32
    assert amazon.features.shape == (13_752, 767) and amazon.num_features == 767
    assert amazon.num_classes == 10 and set(np.unique(amazon.labels)) == set(range(10))
    assert [len(amazon.train_index), len(amazon.val_index), len(amazon.test_index)] == [200, 300, 13_252]
    # 20 / 30 per class for training / validation; every other vertex is a test vertex.
    np.testing.assert_array_equal(np.bincount(amazon.labels[amazon.train_index], minlength=10), [20] * 10)
    np.testing.assert_array_equal(np.bincount(amazon.labels[amazon.val_index], minlength=10), [30] * 10)
    everything = np.concatenate([amazon.train_index, amazon.val_index, amazon.test_index])
    np.testing.assert_array_equal(np.sort(everything), np.arange(13_752))
    assert amazon.train_mask.sum() == 200 and not (amazon.train_mask & amazon.test_mask).any()
    # Bag-of-words: 35 % of the entries are non-zero (so training_features keeps them dense).
    assert 0.34 < amazon.features.nnz / np.prod(amazon.features.shape) < 0.36


def test_amazon_computers_default_path_matches_load(amazon):
    again = datasets.amazon_computers()
    np.testing.assert_array_equal(again.graph.dst, amazon.graph.dst)
    np.testing.assert_array_equal(again.labels, amazon.labels)
    np.testing.assert_array_equal(again.test_index, amazon.test_index)


@pytest.mark.parametrize("name", ["nope", "Cora", "pubmed", "cora.npz", ""])
def test_load_refuses_what_is_not_shipped(name):
    with pytest.raises(ValueError, match=rf"no shipped dataset '{name}'.*cora, amazon_computers"):
        datasets.load(name)


# ---- training_features: normalisation and representation ----


@pytest.fixture
def signed(tmp_path):
    """The tiny dataset with features of both signs and a zero row (row 2), 50 % non-zero."""
    tiny = datasets.load_planetoid_npz(_save(tmp_path, _arrays()))
    dense = np.array([[3, 0, -4], [0, 1, 1], [0, 0, 0], [-1, 2, 0]], np.float64)  # (float64: returned as float32)
    return tiny._replace(features=sp.csr_matrix(dense)), dense


def test_row_normalisation_divides_by_the_sum_of_absolute_values(signed):
    data, dense = signed
    x = data.training_features("row", sparse=False)
    assert isinstance(x, np.ndarray) and x.dtype == np.float32
    np.testing.assert_allclose(x, [[3 / 7, 0, -4 / 7], [0, 0.5, 0.5], [0, 0, 0], [-1 / 3, 2 / 3, 0]], rtol=1e-6)
    np.testing.assert_allclose(np.abs(x).sum(axis=1), [1, 1, 0, 1], rtol=1e-6)
    np.testing.assert_array_equal(data.features.toarray(), dense)  # the dataset's own features are left alone


def test_l2_normalisation_divides_by_the_norm(signed):
    data, dense = signed
    x = data.training_features("l2", sparse=False)
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, [[0.6, 0, -0.8], [0, 2 ** -0.5, 2 ** -0.5], [0, 0, 0],
                                   [-(5 ** -0.5), 2 * 5 ** -0.5, 0]], rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), [1, 1, 0, 1], rtol=1e-6)
    np.testing.assert_array_equal(data.features.toarray(), dense)


def test_none_leaves_the_features(signed):
    data, dense = signed
    x = data.training_features("none", sparse=True)
    assert isinstance(x, sp.csr_matrix) and x.dtype == np.float32
    np.testing.assert_array_equal(x.toarray(), dense)
    assert x is not data.features  # a copy


@pytest.mark.parametrize("normalize", ["row", "l2", "none"])
def test_sparse_and_dense_hold_the_same_values(cora, normalize):
    sparse, dense = cora.training_features(normalize, sparse=True), cora.training_features(normalize, sparse=False)
    assert isinstance(sparse, sp.csr_matrix) and sparse.dtype == np.float32 and sparse.shape == (2708, 1433)
    assert isinstance(dense, np.ndarray) and dense.dtype == np.float32
    np.testing.assert_array_equal(sparse.toarray(), dense)
    assert sparse.nnz == cora.features.nnz  # normalising stores no new entries


def test_cora_normalisations(cora):
    raw = cora.features.toarray()
    nonzero = raw.sum(axis=1) > 0
    assert nonzero.all()  # (Cora has no empty row)
    row = cora.training_features("row", sparse=False)
    np.testing.assert_allclose(row.sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(row, cora.dense_features(normalize=True), rtol=1e-6)
    l2 = cora.training_features("l2", sparse=False)
    np.testing.assert_allclose(np.linalg.norm(l2, axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(l2, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(cora.training_features("none", sparse=False), raw)


@pytest.mark.parametrize("which", ["cora", "amazon"])
def test_auto_normalisation_is_what_auto_normalization_picks(cora, amazon, which):
    data = cora if which == "cora" else amazon
    picked = datasets.auto_normalization(data.features)
    assert picked in ("row", "l2", "none")
    auto = data.training_features()  # normalize="auto", sparse="auto"
    explicit = data.training_features(picked)
    assert type(auto) is type(explicit)
    np.testing.assert_array_equal(auto.toarray() if sp.issparse(auto) else auto,
                                  explicit.toarray() if sp.issparse(explicit) else explicit)


def test_sparse_auto_follows_the_density(cora, amazon):
    assert datasets.SPARSE_DENSITY == 0.1
    x = cora.training_features(sparse="auto")
    assert isinstance(x, sp.csr_matrix) and x.dtype == np.float32 and x.shape == (2708, 1433)  # 1.3 % non-zero
    y = amazon.training_features(sparse="auto")
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (13_752, 767)  # 35 % non-zero
    assert isinstance(amazon.training_features(sparse=True), sp.csr_matrix)
    assert isinstance(cora.training_features(sparse=False), np.ndarray)


def test_sparse_auto_switches_below_the_density(tmp_path):
    """Fewer than SPARSE_DENSITY of the entries non-zero: sparse; exactly that fraction: dense."""
    tiny = datasets.load_planetoid_npz(_save(tmp_path, _arrays()))
    for stored, expected in ((9, sp.csr_matrix), (10, np.ndarray)):
        dense = np.zeros((4, 25), np.float32)  # 100 entries
        dense.flat[:stored] = 1
        x = tiny._replace(features=sp.csr_matrix(dense)).training_features("none")
        assert type(x) is expected, stored


@pytest.mark.parametrize("kwargs, message", [
    (dict(normalize="sum"), "normalize must be one of auto, row, l2, none; got 'sum'"),
    (dict(normalize=True), "normalize must be one of"),
    (dict(normalize=None), "normalize must be one of"),
    (dict(sparse="yes"), "sparse must be True, False or 'auto'; got 'yes'"),
    (dict(sparse=None), "sparse must be True, False or 'auto'"),
    (dict(sparse="dense"), "sparse must be True, False or 'auto'"),
])
def test_bad_training_features_arguments(cora, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cora.training_features(**kwargs)
