"""Topology: the sample machines, nvidia-smi and JSON input and their errors, paths, clusters."""

import json
import textwrap

import pytest

from ngra_tf.parallel import Link, Topology, TopologyError
from ngra_tf.parallel.topology import NVLINK_PER_LINK, PCIE3_X16, QPI, SAMPLES

SAMPLE_FILES = sorted(path.name for path in SAMPLES.iterdir())
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def smi(matrix, legend=LEGEND):
    return textwrap.dedent(matrix).lstrip("\n") + legend


def names(links):
    return [(link.a, link.b, direction) for link, direction in links]


def test_all_five_samples_are_there():
    assert SAMPLE_FILES == ["dgx-nvswitch-8gpu.txt", "nvlink-4gpu.txt", "paper-8gpu.json", "paper-8gpu.txt",
                            "single-switch-4gpu.txt"]


@pytest.mark.parametrize("file", SAMPLE_FILES)
def test_each_sample_loads_describes_and_round_trips(file):
    topology = Topology.load(SAMPLES / file)
    assert topology.devices and all(topology.kind[d] == "device" for d in topology.devices)
    assert topology.root == "host"
    text = topology.describe()
    assert all(device in text for device in topology.devices)
    again = Topology.from_json(topology.to_json())
    assert again.to_json() == topology.to_json()
    assert Topology.from_json(json.dumps(topology.to_json())).to_json() == topology.to_json()


def test_paper_box_is_figure_7():
    box = Topology.sample("paper-8gpu.txt")
    assert box.devices == tuple(f"GPU{i}" for i in range(8))
    assert box.children("host") == ["switch0", "switch1", "socket1"]
    assert box.children("socket1") == ["switch2", "switch3"]
    assert [box.children(f"switch{i}") for i in range(4)] == [["GPU0", "GPU1"], ["GPU2", "GPU3"],
                                                              ["GPU4", "GPU5"], ["GPU6", "GPU7"]]
    assert box.uplink["socket1"] == Link("host", "socket1", "qpi", QPI)
    assert box.uplink["GPU5"] == Link("switch2", "GPU5", "pcie", PCIE3_X16)
    assert box.ancestors("GPU6") == ["switch3", "socket1", "host"]
    assert box.ancestors("host") == []
    assert box.peers == []


def test_paper_box_text_and_json_give_the_same_tree():
    assert Topology.sample("paper-8gpu.txt").to_json() == Topology.sample("paper-8gpu.json").to_json()


def test_single_switch_sample_is_the_default_tree():
    sample, default = Topology.sample("single-switch-4gpu").to_json(), Topology.single_switch(4).to_json()
    assert sample["tree"] == default["tree"] and sample["devices"] == default["devices"]


def test_nvlink_pairs_become_peers_under_a_pcie_tree():
    box = Topology.sample("nvlink-4gpu")
    assert box.children("host") == ["GPU0", "GPU1", "GPU2", "GPU3"]  # NODE: each on its own root port
    assert box.peers == [Link("GPU0", "GPU1", "nvlink", 4 * NVLINK_PER_LINK),
                         Link("GPU2", "GPU3", "nvlink", 4 * NVLINK_PER_LINK)]
    text = (SAMPLES / "nvlink-4gpu.txt").read_text()
    assert Topology.parse_nvidia_smi(text, nvlink_per_link=25.0).peers[0].bandwidth == 100.0


def test_dgx_sockets_come_from_numa_affinity_and_nics_are_ignored():
    box = Topology.sample("dgx-nvswitch-8gpu")
    assert box.devices == tuple(f"GPU{i}" for i in range(8))
    assert box.children("host") == ["GPU0", "GPU1", "GPU2", "GPU3", "socket1"]
    assert box.children("socket1") == ["GPU4", "GPU5", "GPU6", "GPU7"]
    assert len(box.peers) == 28 and {link.bandwidth for link in box.peers} == {12 * NVLINK_PER_LINK}
    assert not any("NIC" in node for node in box.kind)
    assert "every pair of devices" in box.describe()


def test_pxb_nests_switches_and_terminal_underlining_is_ignored():
    text = smi("""
        \t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\x1b[0m
        GPU0\t X \tPIX\tPXB\tPXB\t0-7
        GPU1\tPIX\t X \tPXB\tPXB\t0-7
        GPU2\tPXB\tPXB\t X \tPIX\t0-7
        GPU3\tPXB\tPXB\tPIX\t X \t0-7
        """)
    box = Topology.parse_nvidia_smi(text)
    assert box.children("host") == ["switch0"]
    assert box.children("switch0") == ["switch1", "switch2"]
    assert box.ancestors("GPU3") == ["switch2", "switch0", "host"]


def test_one_gpu_and_the_old_soc_name():
    assert Topology.parse_nvidia_smi("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n").children("host") == ["GPU0"]
    old = smi("""
        \tGPU0\tGPU1\tCPU Affinity
        GPU0\t X \tSOC\t0-7
        GPU1\tSOC\t X \t8-15
        """)
    assert Topology.parse_nvidia_smi(old).ancestors("GPU1") == ["socket1", "host"]


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("\n\n   \n", 1, "empty"),
    ("GPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X \t0-7\n", 1, "header"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X\n", 3, "GPU1 has 2 fields, expected 3"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPCI\t X \t0-7\n", 3, "unknown relation 'PCI'"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV0\t0-7\nGPU1\tNV0\t X \t0-7\n", 2, "unknown relation 'NV0'"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPHB\t X \t0-7\n", 3, "must be symmetric"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n", 1, "GPU1 in the header but no row"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\tPIX\t X \t0-7\nGPU1\t X \tPIX\t0-7\n", 2, "diagonal"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU0\t X \tPIX\t0-7\n", 3, "a second row for GPU0"),
    ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\nGPU9\t X \t0-7\n", 3, "not a column"),
    ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPIX\tPHB\t0-7\nGPU1\tPIX\t X \tPIX\t0-7\n"
     "GPU2\tPHB\tPIX\t X \t0-7\n", 2, "not a tree"),
])
def test_malformed_nvidia_smi_output_names_the_line(text, line, words):
    with pytest.raises(TopologyError, match=f"topo.txt line {line}: .*{words}"):
        Topology.parse_nvidia_smi(text + LEGEND if text.strip() else text, source="topo.txt")


def test_load_names_the_file(tmp_path):
    path = tmp_path / "box.txt"
    path.write_text("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X\n")
    with pytest.raises(TopologyError, match=r"box.txt line 3"):
        Topology.load(path)
    with pytest.raises(TopologyError, match="no sample topology 'nope'.*paper-8gpu"):
        Topology.sample("nope")


def _paper_json():
    return json.loads((SAMPLES / "paper-8gpu.json").read_text())


def _node(obj, name):
    if obj.get("name") == name:
        return obj
    return next((found for child in obj.get("children", []) if (found := _node(child, name))), None)


def _edited(edit):
    obj = _paper_json()
    edit(obj)
    return obj


@pytest.mark.parametrize("edit, words", [
    (lambda o: _node(o["tree"], "switch1").update(kind="swtich"), r"node host > switch1: unknown kind 'swtich'"),
    (lambda o: _node(o["tree"], "GPU3").update(name="GPU2"), r"node host > switch1 > GPU2: a second node"),
    (lambda o: _node(o["tree"], "GPU5")["link"].update(bandwidth=-3), r"host > socket1 > switch2 > GPU5: bandwidth"),
    (lambda o: _node(o["tree"], "GPU5")["link"].update(bandwidth=0), r"GPU5: bandwidth must be a positive"),
    (lambda o: _node(o["tree"], "GPU5")["link"].update(kind="usb"), r"GPU5: unknown link kind 'usb'"),
    (lambda o: _node(o["tree"], "GPU0").update(children=[{"name": "x", "kind": "device", "link": {
        "kind": "pcie", "bandwidth": 1}}]), r"node host > switch0 > GPU0: a device must be a leaf"),
    (lambda o: _node(o["tree"], "switch3").update(children=[]), r"node host > socket1 > switch3: a switch with no"),
    (lambda o: _node(o["tree"], "GPU1").pop("link"), r"node host > switch0 > GPU1: every node but the root"),
    (lambda o: o["tree"].update(link={"kind": "pcie", "bandwidth": 1}), r"node host: the root"),
    (lambda o: o["tree"].update(kind="switch"), r"the root 'host' must be host memory"),
    (lambda o: o["tree"].update(children=[]), r"node host: a host with no devices"),
    (lambda o: o.update(peers=[{"a": "GPU0", "b": "GPU9", "kind": "nvlink", "bandwidth": 20}]),
     r"peer link 0 \(GPU0 - GPU9\): 'GPU9' is not a device"),
    (lambda o: o.update(peers=[{"a": "GPU0", "b": "GPU1", "kind": "nvlink"}]), r"peers\[0\]: expected an object"),
    (lambda o: o.update(devices=["GPU0"]), r"devices \['GPU0'\] are not the device leaves"),
    (lambda o: o.update(extra=1), r"top level: unknown keys \['extra'\]"),
])
def test_bad_json_names_the_node(edit, words):
    with pytest.raises(TopologyError, match=f"<json>: .*{words}"):
        Topology.from_json(_edited(edit))


def test_a_tree_made_in_code_is_checked_too():
    kind = {"host": "host", "a": "switch", "b": "switch", "GPU0": "device"}
    cycle = {"a": Link("b", "a", "pcie", 1.0), "b": Link("a", "b", "pcie", 1.0),
             "GPU0": Link("host", "GPU0", "pcie", 1.0)}
    with pytest.raises(TopologyError, match="box: node '(a|b)' is its own ancestor"):
        Topology("box", kind, cycle)
    with pytest.raises(TopologyError, match=r"box: a tree has one root .*\['host', 'a'\]"):
        Topology("box", kind, {"b": Link("a", "b", "pcie", 1.0), "GPU0": Link("b", "GPU0", "pcie", 1.0)})
    with pytest.raises(TopologyError, match="box: node 'GPU0': its link up must be Link"):
        Topology("box", {"host": "host", "GPU0": "device"}, {"GPU0": Link("GPU0", "host", "pcie", 1.0)})


def test_bad_json_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "box.json"
    path.write_text('{"name": "x",\n "tree": {"name": "host",, }}')
    with pytest.raises(TopologyError, match=r"box.json line 2: not JSON"):
        Topology.load(path)


def test_paths_cross_the_tree_up_then_down():
    box = Topology.sample("paper-8gpu")
    assert names(box.path("GPU0", "GPU1")) == [("switch0", "GPU0", "up"), ("switch0", "GPU1", "down")]
    assert names(box.path("GPU0", "GPU4")) == [("switch0", "GPU0", "up"), ("host", "switch0", "up"),
                                               ("host", "socket1", "down"), ("socket1", "switch2", "down"),
                                               ("switch2", "GPU4", "down")]
    assert names(box.path("host", "GPU5")) == [("host", "socket1", "down"), ("socket1", "switch2", "down"),
                                               ("switch2", "GPU5", "down")]
    assert names(box.path("GPU5", "host")) == [("switch2", "GPU5", "up"), ("socket1", "switch2", "up"),
                                               ("host", "socket1", "up")]
    assert box.path("GPU3", "GPU3") == []
    with pytest.raises(TopologyError, match="no node 'GPU8'"):
        box.path("GPU0", "GPU8")


def test_paths_take_a_peer_link_when_one_joins_the_ends():
    box = Topology.sample("nvlink-4gpu")
    link = box.peers[0]
    assert box.path("GPU0", "GPU1") == [(link, "a->b")]
    assert box.path("GPU1", "GPU0") == [(link, "b->a")]
    assert names(box.path("GPU1", "GPU2")) == [("host", "GPU1", "up"), ("host", "GPU2", "down")]


def test_subtree_keeps_the_chosen_devices_and_what_is_above_them():
    box = Topology.sample("paper-8gpu").subtree(["GPU2", "GPU0", "GPU4"])
    assert box.devices == ("GPU0", "GPU2", "GPU4")
    assert box.children("host") == ["switch0", "switch1", "socket1"]
    assert box.children("switch0") == ["GPU0"]
    assert box.children("socket1") == ["switch2"]
    assert len(Topology.sample("dgx-nvswitch-8gpu").subtree(["GPU0", "GPU1", "GPU5"]).peers) == 3
    with pytest.raises(TopologyError, match=r"not devices of this topology: \['switch0', 'GPU9'\]"):
        Topology.sample("paper-8gpu").subtree(["GPU0", "switch0", "GPU9"])


def test_single_switch():
    box = Topology.single_switch(3, pcie=16.0)
    assert box.devices == ("GPU0", "GPU1", "GPU2")
    assert box.children("host") == ["switch0"] and box.uplink["GPU2"].bandwidth == 16.0
    with pytest.raises(TopologyError, match="positive"):
        Topology.single_switch(0)


def test_cluster_hangs_every_other_host_under_machine_0():
    box = Topology.sample("nvlink-4gpu")
    cluster = Topology.cluster([box, Topology.single_switch(2)], network=3.0, names=["a", "b"])
    assert cluster.root == "a/host"
    assert cluster.devices == ("a/GPU0", "a/GPU1", "a/GPU2", "a/GPU3", "b/GPU0", "b/GPU1")
    assert cluster.uplink["b/host"] == Link("a/host", "b/host", "network", 3.0)
    assert cluster.kind["b/host"] == "host"
    assert cluster.peers[0] == Link("a/GPU0", "a/GPU1", "nvlink", 4 * NVLINK_PER_LINK)
    assert names(cluster.path("a/GPU3", "b/GPU0")) == [("a/host", "a/GPU3", "up"), ("a/host", "b/host", "down"),
                                                       ("b/host", "b/switch0", "down"),
                                                       ("b/switch0", "b/GPU0", "down")]
    assert Topology.cluster([box, box]).devices[4] == "w1/GPU0"
    with pytest.raises(TopologyError, match="distinct names"):
        Topology.cluster([box, box], names=["x", "x"])
