"""Streamed training over several devices (NGra's ring from a store) equals in-memory training on one,
shares each source interval's rows device to device, and checks its memory budget per device."""

import re

import numpy as np
import pytest

from ngra_tf.ops import copy_stats
from ngra_tf.parallel import Topology, same_device, traffic
from ngra_tf.store import write_store
from ngra_tf.runtime.plan.budget import MemoryBudgetError

from test_stream import CLASSES, NUM_VERTICES, _assert_same_training, _fit_both, _model, _pair, _problem

PAPER = Topology.sample("paper-8gpu")  # two PCIe switches of two devices each: two chains of two
# (model, devices, placement, spill policy): gat is column-wide, mpgcn chains max over a column's chunks; each
# placement but none (test_ring's), both policies (8 cases took 12 minutes of a 2-core CI machine).
CASES = [("gcn", 2, "ring", "spill"), ("mpgcn", 2, "chain", "recompute"), ("gat", 2, "ring", "recompute")]


@pytest.mark.parametrize("model,devices,placement,spill", CASES)
def test_ring_streamed_training_equals_in_memory(tmp_path, model, devices, placement, spill):
    spill_dir = str(tmp_path / "spill") if spill == "recompute" else None  # the host tier on disk
    memory, streamed, store, arrays = _pair(tmp_path, model, 4, devices=devices, placement=placement,
                                            topology=PAPER, spill=spill, spill_dir=spill_dir)
    assert streamed.executor().host == ("disk" if spill_dir else "memory")
    expected, got = _fit_both(memory, streamed, store, arrays)
    _assert_same_training(memory, streamed, expected, got)
    np.testing.assert_allclose(streamed.predict(store.array("features"), verbose=0),
                               memory.predict(arrays["features"], verbose=0), rtol=1e-4, atol=1e-4)


def _predict_traffic(model, store):
    model.predict(store.array("features"), verbose=0)  # warm-up: stages compiled
    copy_stats(reset=True)
    model.predict(store.array("features"), verbose=0)
    return traffic(copy_stats(reset=True))


def _bytes_of(table, device):
    return next(counts for name, counts in table.items() if name != "all" and same_device(name, device))


def test_source_rows_cross_from_the_host_once_per_route(tmp_path):
    measured = {}
    for placement in ("ring", "none"):
        _, streamed, store, _ = _pair(tmp_path / placement, "gcn", 4, devices=4, placement=placement,
                                      topology=PAPER)
        measured[placement] = _predict_traffic(streamed, store)
        for device in streamed.ring.devices:  # each owns a column: its chunks were uploaded to it
            assert _bytes_of(measured[placement], device)["h2d"] > 0, device
    assert store.edge_counts.all()  # every device reads every source interval
    # GCN(5) then GCN(3), each propagating at its narrower width: 5 + 3 float32 source values per vertex.
    shared = NUM_VERTICES * (5 + CLASSES) * 4
    assert streamed.memory_plan().shared_rows == shared
    # The ring loads each interval's source rows once (one route) and passes them to the other 3 devices;
    # without sharing each of the 4 devices loads them. All else (chunks, destination rows) is the same.
    ring, none = measured["ring"]["all"], measured["none"]["all"]
    assert ring["d2d"] == 3 * shared and none["d2d"] == 0
    assert none["h2d"] - ring["h2d"] == 3 * shared  # source rows from the host: ring `shared`, none 4x that


def test_the_budget_is_per_device(tmp_path):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 4, arrays)
    fit = dict(x=store.array("features"), y=store.array("labels"), sample_weight=store.array("train_mask"),
               epochs=1, verbose=0)
    with pytest.raises(MemoryBudgetError, match=r"per device \(of 2\) is too small .* smallest budget") as error:
        _model("gcn", store, devices=2, memory_budget="1MB").fit(**fit)
    smallest = int(re.search(r"the smallest budget that works is .*? \((\d+) bytes\)", str(error.value)).group(1))
    model = _model("gcn", store, devices=2, memory_budget=smallest)
    model.fit(**fit)
    assert "working set (estimate) per device" in model.explain(print_fn=None)


def test_every_device_owns_an_interval_of_the_store(tmp_path):
    graph, arrays = _problem("gcn")
    store = write_store(tmp_path / "store", graph, 2, arrays)
    with pytest.raises(ValueError, match="use chunks >= 4"):
        _model("gcn", store, devices=4)
