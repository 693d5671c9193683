"""Placement: fat-tree loaders, ring and chain routes, host traffic, and the ring's duplex property."""

from collections import Counter

import pytest

from ngra_tf.parallel import PLACEMENTS, Topology, chain_groups, fat_tree_loaders, place, ring_order

PAPER = Topology.sample("paper-8gpu")
FOUR = ("GPU0", "GPU1", "GPU2", "GPU3")


def ring_crossings(topology, ring):
    """How often the ring's hops (last to first included) cross each (link, direction)."""
    hops = zip(ring, ring[1:] + ring[:1])
    return Counter(crossing for a, b in hops for crossing in topology.path(a, b))


def once_each_way(topology, *children):
    """Each link up from `children` crossed once up and once down."""
    return Counter({(topology.uplink[child], way): 1 for child in children for way in ("up", "down")})


def test_paper_four_gpus_load_on_gpu0_and_gpu2_and_ring_as_in_figure_8():
    assert fat_tree_loaders(PAPER, FOUR) == ("GPU0", "GPU2")
    assert ring_order(PAPER, FOUR) == FOUR
    ring = place(PAPER, "ring", FOUR)
    assert ring.loaders == ("GPU0", "GPU2")
    assert ring.routes(0) == (("GPU0", "GPU1", "GPU2", "GPU3"),)
    assert ring.routes(1) == (("GPU2", "GPU3", "GPU0", "GPU1"),)
    assert ring.routes(4) == ring.routes(0)


def test_fat_tree_loaders_on_the_whole_paper_box_and_other_machines():
    # socket 1's two switches would share the QPI link, which one alone fills: one loader there
    assert fat_tree_loaders(PAPER) == ("GPU0", "GPU2", "GPU4")
    assert fat_tree_loaders(PAPER, ["GPU1", "GPU3", "GPU5"]) == ("GPU1", "GPU3", "GPU5")
    assert fat_tree_loaders(Topology.single_switch(4)) == ("GPU0",)
    assert fat_tree_loaders(Topology.sample("nvlink-4gpu")) == FOUR  # each on its own root port
    assert fat_tree_loaders(Topology.sample("dgx-nvswitch-8gpu")) == ("GPU0", "GPU1", "GPU2", "GPU3", "GPU4")


def test_fat_tree_keeps_loaders_whose_rates_fit_the_link_up():
    wide = Topology.from_json({"tree": {"name": "host", "kind": "host", "children": [
        {"name": "sw", "kind": "switch", "link": {"kind": "pcie", "bandwidth": 24.0}, "children": [
            {"name": f"d{i}", "kind": "device", "link": {"kind": "pcie", "bandwidth": 12.0}} for i in range(3)]}]}})
    assert fat_tree_loaders(wide) == ("d0", "d1")


def test_chain_groups_are_the_devices_under_each_switch():
    assert chain_groups(PAPER) == (("GPU0", "GPU1"), ("GPU2", "GPU3"), ("GPU4", "GPU5"), ("GPU6", "GPU7"))
    assert chain_groups(PAPER, ["GPU0", "GPU2", "GPU3"]) == (("GPU0",), ("GPU2", "GPU3"))
    assert chain_groups(Topology.sample("nvlink-4gpu")) == tuple((d,) for d in FOUR)  # no switches
    chain = place(PAPER, "chain")
    assert chain.loaders == ("GPU0", "GPU2", "GPU4", "GPU6")
    assert chain.routes(3) == chain.groups


def test_none_loads_everything_everywhere():
    none = place(PAPER, "none", ["GPU3", "GPU1"])
    assert none.devices == none.loaders == ("GPU1", "GPU3")
    assert none.routes(0) == (("GPU1",), ("GPU3",))


@pytest.mark.parametrize("kind", PLACEMENTS)
@pytest.mark.parametrize("devices", [None, FOUR, ("GPU0", "GPU1"), ("GPU5",), ("GPU6", "GPU0", "GPU3")])
def test_every_device_gets_every_chunk_once(kind, devices):
    placement = place(PAPER, kind, devices)
    expected = sorted(devices or PAPER.devices)
    assert sorted(placement.devices) == expected
    for chunk in range(7):
        routes = placement.routes(chunk)
        assert sorted(device for route in routes for device in route) == expected
        assert {route[0] for route in routes} <= set(placement.loaders)


@pytest.mark.parametrize("kind", PLACEMENTS)
def test_one_device_is_one_route(kind):
    placement = place(PAPER, kind, ["GPU6"])
    assert placement.routes(0) == placement.routes(5) == (("GPU6",),)
    assert placement.traffic(3, 10)["host"] == 30


def test_host_traffic_is_one_load_per_route():
    chunks, size = 10, 1000
    ring, chain, none = (place(PAPER, kind).traffic(chunks, size) for kind in PLACEMENTS)
    assert ring["host"] == chunks * size
    assert chain["host"] == chunks * size * 4  # four switches
    assert none["host"] == chunks * size * 8
    assert ring["d2d"] == chunks * size * 7 and chain["d2d"] == chunks * size * 4 and none["d2d"] == 0
    per_device = ring["per_device"]
    assert sum(per_device[d]["h2d"] for d in ("GPU0", "GPU2", "GPU4")) == chunks * size
    assert per_device["GPU1"]["h2d"] == 0 and per_device["GPU1"]["d2d_in"] == chunks * size
    assert per_device["GPU7"]["d2d_out"] == 6 * size  # all but chunks 0, 3, 6, 9, which end there
    assert chain["per_device"]["GPU0"] == {"h2d": chunks * size, "d2d_in": 0, "d2d_out": chunks * size}


def test_the_ring_crosses_every_tree_link_once_each_way():
    every_link = [node for node in PAPER.kind if node != "host"]
    assert ring_crossings(PAPER, ring_order(PAPER)) == once_each_way(PAPER, *every_link)
    assert ring_crossings(PAPER, ring_order(PAPER, FOUR)) == once_each_way(PAPER, *FOUR, "switch0", "switch1")
    assert ring_crossings(PAPER, ring_order(PAPER, ["GPU0", "GPU1"])) == once_each_way(PAPER, "GPU0", "GPU1")
    assert ring_crossings(PAPER, ring_order(PAPER, ["GPU2"])) == Counter()


def test_a_cluster_ring_spans_both_machines_crossing_the_network_once_each_way():
    cluster = Topology.cluster([Topology.single_switch(2), Topology.single_switch(2)])
    ring = place(cluster, "ring")
    assert ring.devices == ("w0/GPU0", "w0/GPU1", "w1/GPU0", "w1/GPU1")
    assert ring.loaders == ("w0/GPU0", "w1/GPU0")
    crossings = ring_crossings(cluster, ring.devices)
    assert crossings[cluster.uplink["w1/host"], "down"] == crossings[cluster.uplink["w1/host"], "up"] == 1
    assert crossings == once_each_way(cluster, *[node for node in cluster.kind if node != "w0/host"])
    assert place(cluster, "chain").groups == (("w0/GPU0", "w0/GPU1"), ("w1/GPU0", "w1/GPU1"))


def test_describe_says_who_loads_and_forwards():
    text = str(place(PAPER, "ring", FOUR))
    assert "loaders (maximal bandwidth fat-tree): GPU0 GPU2" in text
    assert "GPU2 -> GPU3 -> GPU0 -> GPU1" in text
    assert "ratio 0.25" in text
    assert "chunks 1, 3, 5: GPU2" in place(PAPER, "ring", FOUR).describe(num_chunks=6)
    assert "host -> device 8,000 bytes" in place(PAPER, "chain", FOUR).describe(4, 1000)
    assert "chain GPU0 -> GPU1: loads every chunk" in str(place(PAPER, "chain"))
    assert "every device loads every chunk" in str(place(PAPER, "none"))


def test_bad_requests_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown placement 'tree'; expected one of ring, chain, none"):
        place(PAPER, "tree")
    with pytest.raises(ValueError, match=r"not devices of paper-8gpu: \['GPU8'\]"):
        place(PAPER, "ring", ["GPU0", "GPU8"])
    with pytest.raises(ValueError, match="no devices"):
        place(PAPER, "ring", [])
    with pytest.raises(ValueError, match="distinct"):
        place(PAPER, "ring", ["GPU0", "GPU0"])
    with pytest.raises(ValueError, match="chunk must be an index"):
        place(PAPER).routes(-1)
