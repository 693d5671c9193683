"""Training over several devices (the ring, NeuGraph's chain, no sharing) equals training on one,
and each vertex interval crosses from the host once per route."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import ngra_tf
from ngra_tf import recipes
from ngra_tf.ops import copy_stats
from ngra_tf.parallel import DeviceRing, Topology, place, same_device, traffic

NUM_VERTICES, NUM_EDGES, WIDTH, CLASSES = 96, 600, 6, 3
DEVICES = [d.name for d in tf.config.list_logical_devices("CPU")]


def _problem(model, seed=0):
    rng = np.random.default_rng(seed)
    graph = ngra_tf.Graph.from_edges(rng.integers(0, NUM_VERTICES, NUM_EDGES),
                                     rng.integers(0, NUM_VERTICES, NUM_EDGES), NUM_VERTICES)
    arrays = {"features": rng.normal(size=(NUM_VERTICES, WIDTH)).astype(np.float32),
              "labels": rng.integers(0, CLASSES, NUM_VERTICES),
              "train_mask": (rng.random(NUM_VERTICES) < 0.6).astype(np.float32)}
    return recipes.prepare_graph(model, graph), arrays


def _model(model, graph, arrays, **options):
    keras.utils.set_random_seed(1)
    built = recipes.build_model(model, graph, CLASSES, hidden=5, **options)
    built.compile(optimizer=keras.optimizers.Adam(0.05), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    built.build(arrays["features"].shape)
    return built


def _fit(model, arrays, epochs):
    return model.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"], epochs=epochs,
                     verbose=0).history


def _assert_same_training(one, many, expected, got):
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
    for want, have in zip(one.get_weights(), many.get_weights()):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model,devices", [("gcn", 4), ("ggcn", 2)])  # (gat at 2: test_stream_ring)
def test_ring_training_equals_one_device(model, devices):
    # Dropout on (the recipe's), 4 x 4 chunks, 5 epochs of model.fit.
    graph, arrays = _problem(model)
    one = _model(model, graph, arrays, chunks=4)
    many = _model(model, graph, arrays, chunks=4, devices=devices, placement="ring")
    many.set_weights(one.get_weights())
    expected, got = _fit(one, arrays, 5), _fit(many, arrays, 5)
    _assert_same_training(one, many, expected, got)
    np.testing.assert_allclose(many.predict(arrays["features"], verbose=0),
                               one.predict(arrays["features"], verbose=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model,placement", [("mpgcn", "chain"), ("ggnn", "none")])
def test_every_placement_trains_every_model_alike(model, placement):
    graph, arrays = _problem(model)
    one = _model(model, graph, arrays, chunks=5)
    # Two PCIe switches of two devices: the chain has two groups.
    topology = Topology.load(_paper_sample())
    many = _model(model, graph, arrays, chunks=5, devices=4, placement=placement, topology=topology)
    many.set_weights(one.get_weights())
    expected, got = _fit(one, arrays, 2), _fit(many, arrays, 2)
    _assert_same_training(one, many, expected, got)


def _paper_sample():
    import pathlib

    return pathlib.Path(ngra_tf.parallel.__file__).parent / "topologies" / "paper-8gpu.json"


def _host_and_device_bytes(model, arrays):
    model.predict(arrays["features"], verbose=0)  # first run: chunks made resident on their owners
    copy_stats(reset=True)
    model.predict(arrays["features"], verbose=0)
    return traffic(copy_stats(reset=True))


def test_each_interval_crosses_from_the_host_once_per_route():
    graph, arrays = _problem("gcn")
    one_layer_inputs = NUM_VERTICES * (WIDTH + 5) * 4  # float32 rows entering each of the two GCN layers
    measured, models = {}, {}
    for placement in ("ring", "chain", "none"):
        models[placement] = model = _model("gcn", graph, arrays, chunks=4, devices=4, placement=placement,
                                           topology=Topology.load(_paper_sample()))
        measured[placement] = _host_and_device_bytes(model, arrays)
        loads_per_interval = len(model.ring.placement.routes(0))
        assert measured[placement]["all"]["h2d"] == loads_per_interval * one_layer_inputs, placement
    assert [len(place(Topology.load(_paper_sample()), p, devices=_first4()).routes(0))
            for p in ("ring", "chain", "none")] == [1, 2, 4]
    assert measured["none"]["all"]["h2d"] == 4 * measured["ring"]["all"]["h2d"]
    assert measured["none"]["all"]["d2d"] < measured["ring"]["all"]["d2d"]  # the ring forwards what "none" reloads
    for device in models["ring"].ring.devices:  # every device receives rows from the one before it
        assert _bytes_of(measured["ring"], device)["d2d"] > 0, device


def _bytes_of(table, device):
    return next(v for k, v in table.items() if k != "all" and same_device(k, device))


def _first4():
    return Topology.load(_paper_sample()).devices[:4]


def test_steps_run_on_the_devices_that_own_them():
    graph, arrays = _problem("gcn")
    model = _model("gcn", graph, arrays, chunks=4, devices=4)
    stats = _host_and_device_bytes(model, arrays)
    for device in DEVICES:  # each owns a column: its chunk steps ran there, on rows copied to it
        assert _bytes_of(stats, device)["h2d"] + _bytes_of(stats, device)["d2d"] > 0, device
    assert [model.ring.owner(j) for j in range(4)] == model.ring.order


def test_bad_devices_fail_with_a_clear_error(tmp_path):
    graph, arrays = _problem("gcn")
    layers = [ngra_tf.layers.GCN(CLASSES)]
    with pytest.raises(ValueError, match="devices=8, but this process has 4 CPU"):
        ngra_tf.GraphModel(graph, layers, chunks=8, devices=8)
    with pytest.raises(ValueError, match="at least 1"):
        ngra_tf.GraphModel(graph, layers, chunks=4, devices=0)
    with pytest.raises(ValueError, match="use chunks >= 4"):
        ngra_tf.GraphModel(graph, layers, chunks=2, devices=4)
    with pytest.raises(ValueError, match="placement must be one of ring, chain, none"):
        ngra_tf.GraphModel(graph, layers, chunks=4, devices=2, placement="star")
    with pytest.raises(ValueError, match="no device '/GPU:3'"):
        ngra_tf.GraphModel(graph, layers, chunks=4, devices=["/CPU:0", "/GPU:3"])
    with pytest.raises(ValueError, match="names a device twice"):
        ngra_tf.GraphModel(graph, layers, chunks=4, devices=["/CPU:1", "/CPU:1"])
    store = ngra_tf.store.write_store(tmp_path / "s", graph, 2, {"features": arrays["features"]})
    with pytest.raises(ValueError, match="use chunks >= 4"):  # the store has P = 2
        ngra_tf.GraphModel(store, layers, devices=4)


def test_explain_and_save_load(tmp_path):
    graph, arrays = _problem("gcn")
    model = _model("gcn", graph, arrays, chunks=4, devices=["/CPU:1", "/CPU:2"], placement="chain")
    _fit(model, arrays, 1)
    text = model.explain(print_fn=None)
    assert "placement chain" in text and "/CPU:2" in text
    path = tmp_path / "ring.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.ring.devices == ["/CPU:1", "/CPU:2"] and loaded.ring.placement.kind == "chain"
    np.testing.assert_allclose(loaded.predict(arrays["features"], verbose=0),
                               model.predict(arrays["features"], verbose=0), rtol=1e-6, atol=1e-6)


def test_device_ring_owns_intervals_round_the_ring():
    ring = DeviceRing(3)
    assert [ring.owner(j) for j in range(7)] == [ring.order[j % 3] for j in range(7)]
    assert ring.routes(0)[0][0] in ring.devices
