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
