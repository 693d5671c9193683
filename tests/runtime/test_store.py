"""Stores: a store of graph G at P is G.partition(P) exactly, read back by NumPy and by TF ops."""

import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf.store import Store, StorePartition, open_store, write_store
from ngra_tf.store.store import CHUNK_ARRAYS, INDEX_ARRAYS
from store_checks import assert_store_matches, small_graphs, vertex_data

GRAPHS = small_graphs()
FORMATS = ["npy", "hdf5"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("reencode", [True, False])
@pytest.mark.parametrize("num_parts", [1, 3, 4])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_store_equals_partition(tmp_path, name, num_parts, reencode, fmt):
    graph = GRAPHS[name]
    data = vertex_data(graph.num_vertices) if name != "edgeless" else {}
    store = write_store(tmp_path / "store", graph, num_parts, data, format=fmt, reencode=reencode)
    assert isinstance(store, Store) and store.format == fmt
    assert_store_matches(store, graph, num_parts, reencode, data)
    assert_store_matches(open_store(tmp_path / "store"), graph, num_parts, reencode, data)


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_graph_gives_back_the_graph(tmp_path, fmt):
    from ngra_tf.store.convert import read_graph

    for name, graph in GRAPHS.items():
        back = read_graph(write_store(tmp_path / name, graph, 3, format=fmt))
        assert back.num_vertices == graph.num_vertices, name
        np.testing.assert_array_equal(back.src, graph.src, err_msg=name)
        np.testing.assert_array_equal(back.dst, graph.dst, err_msg=name)
        if graph.edge_data is None:
            assert back.edge_data is None, name
        else:
            np.testing.assert_array_equal(back.edge_data, graph.edge_data, err_msg=name)


def test_public_names():
    assert ngra_tf.store.open_store is open_store and ngra_tf.store.write_store is write_store
    assert "runtime" in ngra_tf.__all__


@pytest.mark.parametrize("fmt", FORMATS)
def test_ops_read_when_they_run_inside_tf_function(tmp_path, fmt):
    graph = GRAPHS["power_law_scalar_data"]
    data = vertex_data(graph.num_vertices)
    store = write_store(tmp_path / "store", graph, 3, data, format=fmt)
    partition = graph.partition(3)

    @tf.function
    def read(i, j):
        return store.vertex_rows_op("features", j), store.vertex_rows_op("train_mask", j), store.chunk_arrays_op(
            i, j, names=CHUNK_ARRAYS)

    for i in range(3):
        for j in range(3):
            features, mask, arrays = read(i, j)
            expected = partition.chunk(i, j)
            np.testing.assert_array_equal(features.numpy(), data["features"][partition.vertices(j)])
            assert mask.dtype == tf.bool
            np.testing.assert_array_equal(mask.numpy(), data["train_mask"][partition.vertices(j)])
            for name in INDEX_ARRAYS:
                np.testing.assert_array_equal(arrays[name].numpy(), getattr(expected.adjacency, name))
                assert arrays[name].dtype == tf.as_dtype(getattr(expected.adjacency, name).dtype)
            np.testing.assert_array_equal(arrays["edge_ids"].numpy(), expected.edge_ids)
            np.testing.assert_array_equal(arrays["edge_data"].numpy(), expected.edge_data)
    # Static shapes come from the manifest.
    graph_fn = read.get_concrete_function(0, 1)
    rows = int(partition.bounds[2] - partition.bounds[1])
    assert graph_fn.structured_outputs[0].shape == (rows, 4)
    assert graph_fn.structured_outputs[2]["csc_src"].shape == (int(partition.edge_counts[0, 1]),)


@pytest.mark.parametrize("fmt", FORMATS)
def test_default_op_arrays_and_slices(tmp_path, fmt):
    graph = GRAPHS["no_edge_data"]
    data = vertex_data(graph.num_vertices)
    store = write_store(tmp_path / "store", graph, 2, data, format=fmt)
    arrays = store.chunk_arrays_op(1, 0)
    assert sorted(arrays) == sorted(INDEX_ARRAYS)  # no edge data in this graph, no edge ids unless asked
    rows = store.vertex_rows("pairs", 1)
    np.testing.assert_array_equal(store.vertex_rows("pairs", 1, 3, 7), rows[3:7])
    np.testing.assert_array_equal(store.vertex_rows_op("pairs", 1, 3, 7).numpy(), rows[3:7])
    assert store.vertex_rows_op("pairs", 1, 5, 5).shape == (0, 2, 2)
    with pytest.raises(ValueError, match="outside interval 1"):
        store.vertex_rows("pairs", 1, 0, len(rows) + 1)


def test_partition_view(tmp_path):
    graph = GRAPHS["multigraph_2d_data"]
    store = write_store(tmp_path / "store", graph, 4)
    view, partition = store.partition(), graph.partition(4)
    assert isinstance(view, StorePartition) and store.partition() is view
    assert view.num_parts == 4 and view.identity_order == partition.identity_order
    for name in ("bounds", "order", "position", "edge_counts"):
        np.testing.assert_array_equal(getattr(view, name), getattr(partition, name))
        assert not getattr(view, name).flags.writeable
    for part in range(4):
        np.testing.assert_array_equal(view.vertices(part), partition.vertices(part))
    np.testing.assert_array_equal(view.order_tensor().numpy(), partition.order)
    np.testing.assert_array_equal(view.position_tensor().numpy(), partition.position)
    assert view.chunk(2, 1) is not view.chunk(2, 1)  # read from disk each time, not cached
    assert view.chunk(2, 1).num_edges == partition.chunk(2, 1).num_edges


def test_sizes_for_a_memory_planner(tmp_path):
    graph = GRAPHS["multigraph_2d_data"]
    data = vertex_data(graph.num_vertices)
    store = write_store(tmp_path / "store", graph, 3, data)
    for i in range(3):
        chunk = store.chunk(i, 2)
        arrays = [getattr(chunk.adjacency, name) for name in INDEX_ARRAYS] + [chunk.edge_ids, chunk.edge_data]
        assert store.chunk_nbytes(i, 2) == sum(array.nbytes for array in arrays)
        assert store.vertex_nbytes("pairs", i) == store.vertex_rows("pairs", i).nbytes
    assert store.vertex_spec("pairs") == ((2, 2), np.dtype(np.float64))
    assert store.edge_data_spec == ((2, 3), np.dtype(np.float32))


def test_bad_arguments(tmp_path):
    graph = GRAPHS["tiny"]
    store = write_store(tmp_path / "store", graph, 2, {"x": np.zeros((3, 1))})
    with pytest.raises(ValueError, match="no vertex array 'y'; it has 'x'"):
        store.vertex_rows("y", 0)
    with pytest.raises(ValueError, match="interval 2 is out of range for a store of 2 intervals"):
        store.chunk(0, 2)
    with pytest.raises(ValueError, match="a chunk's arrays are"):
        store.chunk_arrays_op(0, 0, names=["csc_src", "weights"])
    with pytest.raises(ValueError, match="format must be one of npy, hdf5"):
        write_store(tmp_path / "other", graph, 2, format="parquet")
    with pytest.raises(ValueError, match="vertex array 'x'.*has 2 rows; the graph has 3 vertices"):
        write_store(tmp_path / "other", graph, 2, {"x": np.zeros((2, 1))})
    with pytest.raises(ValueError, match="a vertex array name must be"):
        write_store(tmp_path / "other", graph, 2, {"../x": np.zeros((3, 1))})
    with pytest.raises(ValueError, match="num_parts must be a positive integer"):
        write_store(tmp_path / "other", graph, 0)
    assert not (tmp_path / "other").exists()
