"""The streaming converter: file inputs, the recipes' preparation and presets, block by block, equal the
in-memory path; the memory budget picks the smallest P that fits."""

import zipfile

import h5py
import numpy as np
import pytest

from ngra_tf import recipes
from ngra_tf.graph import Graph, datasets
from ngra_tf.store import convert, memory, presets, sources
from ngra_tf.store.prepare import RankBitmap, SymmetrizedEdges
from store_checks import assert_store_matches

# 64 KB: blocks of 1024 edges and 16 KiB of rows, dedup buckets of 64 KiB, so every pass crosses blocks.
TINY = "64KB"


def messy_graph(seed=0, num_vertices=300, num_edges=3000, edge_data=True):
    """Repeated pairs, reverses of other edges, self loops and isolated vertices, edges in no order."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_vertices - 20, num_edges)  # the last 20 vertices stay isolated
    dst = rng.integers(0, num_vertices - 20, num_edges)
    loops = rng.random(num_edges) < 0.05
    dst[loops] = src[loops]
    copies, originals = rng.integers(0, num_edges, (2, num_edges // 5))
    src[copies], dst[copies] = src[originals], dst[originals]
    reverses, originals = rng.integers(0, num_edges, (2, num_edges // 5))
    src[reverses], dst[reverses] = dst[originals], src[originals]
    data = rng.normal(size=num_edges).astype(np.float32) if edge_data else None
    return Graph.from_edges(src, dst, num_vertices, edge_data=data)


def convert_graph(tmp_path, edges, **options):
    options.setdefault("memory_budget", TINY)
    return convert.convert(tmp_path / "store", edges, **options)


@pytest.mark.parametrize("preparation", ["gcn", "symmetric"])
@pytest.mark.parametrize("num_parts", [1, 3])
def test_streamed_preparation_equals_recipes(tmp_path, preparation, num_parts):
    graph = messy_graph()
    model = "gcn" if preparation == "gcn" else "commnet"
    prepared = recipes.prepare_graph(model, graph)
    store = convert_graph(tmp_path, sources.GraphEdges(graph), num_parts=num_parts, prepare=preparation,
                          format="hdf5" if num_parts == 3 else "npy")
    assert_store_matches(store, prepared, num_parts)
    if preparation == "gcn":
        assert store.edge_data_spec == ((), np.dtype(np.float32))


def test_rank_bitmap():
    rng = np.random.default_rng(3)
    members = np.sort(rng.choice(100_000, 7_000, replace=False))
    bitmap = RankBitmap(100_000)
    for part in np.array_split(rng.permutation(members), 5):
        bitmap.add(part)
    bitmap.freeze()
    assert bitmap.count == len(members)
    queries = rng.permutation(members)
    np.testing.assert_array_equal(bitmap.rank(queries), np.searchsorted(members, queries))


def test_text_edge_list_in_blocks(tmp_path):
    graph = messy_graph(1)
    path = tmp_path / "edges.txt"
    lines = ["# a comment", ""] + [f"{s} {d} {w!r}" if k % 2 else f"{s},{d},{w!r}"
                                   for k, (s, d, w) in enumerate(zip(graph.src, graph.dst, graph.edge_data))]
    path.write_text("\n".join(lines) + "\n")
    loaded = datasets.load_edge_list(path, num_vertices=graph.num_vertices)
    store = convert_graph(tmp_path, sources.edges_from_file(path, graph.num_vertices), num_parts=3)
    assert_store_matches(store, loaded, 3)
    np.testing.assert_array_equal(loaded.edge_data, graph.edge_data)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_edges_and_feature_files(tmp_path, compression):
    graph = messy_graph(2, edge_data=False)
    rng = np.random.default_rng(0)
    data = rng.normal(size=(graph.num_edges, 2)).astype(np.float16)
    features = rng.normal(size=(graph.num_vertices, 33)).astype(np.float32)
    labels = rng.integers(0, 9, graph.num_vertices)
    save = np.savez_compressed if compression == zipfile.ZIP_DEFLATED else np.savez
    save(tmp_path / "edges.npz", src=graph.src.astype(np.int32), dst=graph.dst, edge_data=data,
         num_vertices=graph.num_vertices)
    save(tmp_path / "x.npz", features=features)
    np.save(tmp_path / "y.npy", labels)
    with h5py.File(tmp_path / "x.h5", "w") as file:
        file.create_dataset("group/feat", data=features)
    rows = {"features": sources.rows_from_file(tmp_path / "x.npz"),
            "labels": sources.rows_from_file(tmp_path / "y.npy"),
            "again": sources.rows_from_file(tmp_path / "x.h5", "group/feat")}
    store = convert_graph(tmp_path, sources.edges_from_file(tmp_path / "edges.npz"), vertex_rows=rows, num_parts=4)
    expected = Graph.from_edges(graph.src, graph.dst, graph.num_vertices, edge_data=data)
    assert_store_matches(store, expected, 4, vertex_data={"features": features, "labels": labels,
                                                          "again": features})


def test_synthetic_preset_is_streamed_exactly(tmp_path):
    dataset = datasets.synthetic("pubmed", seed=3, scale=0.05)
    edges, rows, description = presets.preset_inputs("pubmed", seed=3, scale=0.05)
    assert description["num_classes"] == dataset.num_classes
    store = convert_graph(tmp_path, edges, vertex_rows=rows, num_parts=3, prepare="gcn")
    expected = {"features": dataset.dense_features(), "labels": dataset.labels, "train_mask": dataset.train_mask,
                "val_mask": dataset.val_mask, "test_mask": dataset.test_mask}
    assert_store_matches(store, recipes.prepare_graph("gcn", dataset.graph), 3, vertex_data=expected)


def test_normalized_synthetic_features_match_dense_features(tmp_path):
    dataset = datasets.synthetic("blog", seed=1, scale=0.01)
    _, rows, _ = presets.preset_inputs("blog", seed=1, scale=0.01, normalize="row")
    streamed = np.concatenate(list(rows["features"].blocks(7)))
    np.testing.assert_array_equal(streamed, dataset.dense_features(normalize=True))


def test_memory_budget_picks_the_smallest_p_whose_working_set_fits(tmp_path):
    """The converter asks working_set(shape) about the partitions it weighs and keeps the smallest P that fits:
    the shapes it asks about are the partition it then writes (its bounds and chunk counts)."""
    graph = messy_graph(4)
    features = np.zeros((graph.num_vertices, 64), np.float32)
    asked = {}

    def working_set(shape):  # a stand-in for the trainer's estimate: grows with the largest chunk and interval
        need = 1000 * int(shape.edge_counts.max()) + 10 * int(np.diff(shape.bounds).max()) * shape.row_nbytes("x")
        asked.setdefault(shape.num_parts, []).append(need)
        return need, f"{need} bytes"

    def need(p):
        partition = graph.partition(p)
        return 1000 * int(partition.edge_counts.max()) + 10 * int(np.diff(partition.bounds).max()) * 64 * 4

    budget = need(3)
    store = convert.convert(tmp_path / "store", sources.GraphEdges(graph), {"x": sources.ArrayRows("x", features)},
                            memory_budget=budget, working_set=working_set)
    assert_store_matches(store, graph, store.num_parts, vertex_data={"x": features})
    assert need(store.num_parts) <= budget < need(store.num_parts - 1)
    assert store.num_parts > 1 and need(store.num_parts) in asked[store.num_parts]
    with pytest.raises(ValueError, match=r"memory budget 700 B \(700 bytes\) is too small to train this graph at "
                                         r"any P up to \d+: at best \d+ bytes"):
        convert.convert(tmp_path / "small", sources.GraphEdges(graph), {"x": sources.ArrayRows("x", features)},
                        memory_budget=700, working_set=working_set)
    assert not (tmp_path / "small").exists()
    with pytest.raises(ValueError, match=r"give num_parts, or memory_budget and working_set"):
        convert.convert(tmp_path / "neither", sources.GraphEdges(graph), memory_budget=budget)


def test_the_converter_picks_the_p_the_trainer_accepts(tmp_path):
    """One estimate: the P a budget gives is the smallest whose training working set, by the trainer's own
    estimate (GraphModel.memory_plan), fits; the model trains from it under that budget, and P - 1 would not."""
    training = recipes.TrainingMemory(["gcn"])

    def written(p, budget=None):
        edges, rows, description = presets.preset_inputs("blog", 0, 0.5)
        return convert.convert(tmp_path / f"p{p}", edges, rows, num_parts=p, memory_budget=budget,
                               working_set=training, prepare="gcn", source=description)

    one, two = written(1), written(2)
    budget = training(two)[0]
    assert training(one)[0] > budget  # (blog x 0.5: one chunk's step is the largest at P = 1, not at 2)
    chosen = written(None, budget)
    assert chosen.num_parts == 2
    model = recipes.build_model("gcn", chosen, num_classes=chosen.num_classes(), memory_budget=budget)
    model.build(chosen.array("features").shape)
    assert model.memory_plan().working_set == training(chosen)[0] <= budget  # (executor() checked it)


def test_parse_size():
    assert memory.parse_size("256MB") == 256 * 10**6
    assert memory.parse_size("1.5GiB") == 3 * 2**29
    assert memory.parse_size("512M") == 512 * 2**20
    assert memory.parse_size(" 2 gb ") == 2 * 10**9
    assert memory.parse_size("4096") == memory.parse_size(4096) == 4096
    for bad in ("", "lots", "12 parsecs", "-1MB", "0", True):
        with pytest.raises(ValueError):
            memory.parse_size(bad)


def test_bad_inputs_name_the_file_and_line(tmp_path):
    text = tmp_path / "edges.txt"
    text.write_text("0 1\n# fine\n1 2\n2 x\n")
    with pytest.raises(ValueError, match=r"edges.txt:4: vertex ids must be integers"):
        convert_graph(tmp_path, sources.edges_from_file(text), num_parts=2)
    text.write_text("0 1\n1 2 3 4\n")
    with pytest.raises(ValueError, match=r"edges.txt:2: expected 'src dst' or 'src dst weight'"):
        convert_graph(tmp_path, sources.edges_from_file(text), num_parts=2)
    text.write_text("0 1\n\n1 7\n")
    with pytest.raises(ValueError, match=r"edges.txt:3: destination vertex id 7 is out of range for "
                                         r"num_vertices=5"):
        convert_graph(tmp_path, sources.edges_from_file(text, 5), num_parts=2)
    text.write_text("0 1\n-1 2\n")
    with pytest.raises(ValueError, match=r"edges.txt:2: source vertex id -1 is negative"):
        convert_graph(tmp_path, sources.edges_from_file(text), num_parts=2)
    np.savez(tmp_path / "bad.npz", src=np.array([0, 1, 9]), dst=np.array([1, 2, 0]), num_vertices=4)
    with pytest.raises(ValueError, match=r"bad.npz: edge 2: source vertex id 9 is out of range"):
        convert_graph(tmp_path, sources.edges_from_file(tmp_path / "bad.npz"), num_parts=2)
    text.write_text("0 1\n1 2\n")
    rows = {"features": sources.ArrayRows("features", np.zeros((4, 2)))}
    with pytest.raises(ValueError, match=r"vertex array 'features' \(features\) has 4 rows; the graph has 3"):
        convert_graph(tmp_path, sources.edges_from_file(text), vertex_rows=rows, num_parts=2)
    with pytest.raises(ValueError, match="edge list .*missing.txt does not exist"):
        sources.edges_from_file(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="has no array 'features'; it has src, dst"):
        sources.rows_from_file(tmp_path / "bad.npz")
    assert not (tmp_path / "store").exists()


def test_prepared_source_reports_its_passes(tmp_path):
    stages = set()
    graph = messy_graph(5)
    convert_graph(tmp_path, sources.GraphEdges(graph), num_parts=2, prepare="gcn",
                  progress=lambda stage, done, total: stages.add(stage))
    assert {"symmetrise edges", "deduplicate edges", "count chunk edges", "bucket edges",
            "write chunks"} <= stages
    assert isinstance(SymmetrizedEdges(sources.GraphEdges(graph), "gcn"), sources.EdgeSource)
