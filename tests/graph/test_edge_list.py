"""Edge-list loaders: text and npz, with clear errors for malformed files."""

import numpy as np
import pytest

from ngra_tf.graph import datasets


def edges_of(graph):
    return sorted(zip(graph.src.tolist(), graph.dst.tolist()))


def test_text_edge_list_with_comments_and_weights(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# a comment\n0 1 0.5\n\n2,0,1.5\n1 2 2.0\n")
    graph = datasets.load_edge_list(path)
    assert graph.num_vertices == 3
    assert edges_of(graph) == [(0, 1), (1, 2), (2, 0)]
    weight = {(s, d): w for s, d, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.edge_data.tolist())}
    assert weight == {(0, 1): 0.5, (1, 2): 2.0, (2, 0): 1.5}


def test_text_edge_list_without_weights_and_explicit_vertex_count(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 0\n")
    graph = datasets.load_edge_list(path, num_vertices=5)
    assert graph.num_vertices == 5 and graph.edge_data is None and graph.num_edges == 2


def test_empty_text_edge_list(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# nothing\n")
    graph = datasets.load_edge_list(path, num_vertices=2)
    assert graph.num_edges == 0 and graph.num_vertices == 2


@pytest.mark.parametrize("text, message", [
    ("0 1\n2\n", "g.txt:2"),
    ("0 1\n0 1 2.0\n", "g.txt:2"),
    ("0 x\n", "integers"),
    ("0 -1\n", "negative"),
])
def test_malformed_text_edge_list(tmp_path, text, message):
    path = tmp_path / "g.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        datasets.load_edge_list(path)


def test_npz_edge_list_round_trip(tmp_path):
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0, 1, 3]), dst=np.array([1, 2, 0]), num_vertices=4,
             edge_data=np.array([1.0, 2.0, 3.0], np.float32))
    graph = datasets.load_edge_list(path)
    assert graph.num_vertices == 4
    assert edges_of(graph) == [(0, 1), (1, 2), (3, 0)]
    assert sorted(graph.edge_data.tolist()) == [1.0, 2.0, 3.0]


def test_npz_edge_list_missing_key(tmp_path):
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0]))
    with pytest.raises(ValueError, match="dst"):
        datasets.load_edge_list(path)


def test_synthetic_presets_have_table_one_shapes():
    data = datasets.synthetic("blog", seed=1, scale=0.01)
    vertices, edges, width, classes = datasets.PRESETS["blog"]
    assert data.graph.num_vertices == round(vertices * 0.01)
    assert data.graph.num_edges == round(edges * 0.01)
    assert data.features.shape == (data.graph.num_vertices, width)
    assert data.num_classes == classes and data.labels.max() < classes
    again = datasets.synthetic("blog", seed=1, scale=0.01)
    assert np.array_equal(again.graph.src, data.graph.src)  # deterministic
    with pytest.raises(ValueError, match="preset"):
        datasets.synthetic("twitter")
