"""The streaming simulator: hand-computable transfers and pipelines, then NGra Fig. 16's shape."""

import pytest

from ngra_tf.parallel import PLACEMENTS, Topology, place
from ngra_tf.parallel.simulate import Engine, fair_rates, layer, load_s, simulate, speedups, sweep
from ngra_tf.parallel.topology import SAMPLES

GB = 1e9
PCIE = 12e9  # the bandwidth Topology.single_switch gives its links
PAPER = Topology.sample("paper-8gpu")


def run_flows(flows, capacity):
    """Starts every (resources, bytes) flow at time 0; returns each one's completion time."""
    engine, ends = Engine(capacity), {}
    for index, (resources, nbytes) in enumerate(flows):
        engine.transfer(resources, nbytes, lambda index=index: ends.setdefault(index, engine.now))
    engine.run(lambda: None)
    return [ends[index] for index in range(len(flows))]


def test_one_transfer_takes_its_bytes_over_the_bandwidth():
    assert run_flows([(["link"], 3 * GB)], lambda link: 2 * GB) == pytest.approx([1.5])


def test_two_transfers_on_one_link_take_twice_as_long_and_on_two_links_run_side_by_side():
    assert run_flows([(["link"], GB)] * 2, lambda link: GB) == pytest.approx([2.0, 2.0])
    assert run_flows([(["a"], GB), (["b"], GB)], lambda link: GB) == pytest.approx([1.0, 1.0])


def test_a_link_is_full_duplex_its_two_directions_do_not_slow_each_other():
    topology = Topology.single_switch(2)
    there, back = topology.path("GPU0", "GPU1"), topology.path("GPU1", "GPU0")
    capacity = lambda resource: resource[0].bandwidth * GB  # noqa: E731
    assert run_flows([(there, PCIE), (back, PCIE)], capacity) == pytest.approx([1.0, 1.0])
    assert run_flows([(there, PCIE), (there, PCIE)], capacity) == pytest.approx([2.0, 2.0])


def test_rates_are_max_min_fair():
    # a is held to 1 by its own link, so b gets the rest of the shared one (equal split would give it 5)
    assert fair_rates([["slow", "shared"], ["shared"]], {"slow": 1.0, "shared": 10.0}.get) == [1.0, 9.0]
    # a finished flow frees its share: the second flow speeds up to the whole link for its last 1 GB
    assert run_flows([(["link"], GB), (["link"], 2 * GB)], lambda link: GB) == pytest.approx([2.0, 3.0])


def test_one_device_overlaps_loads_with_compute():
    ring = place(Topology.single_switch(1), "ring")
    load, compute = 64e6 / PCIE, 0.01  # compute > load: only the first load shows
    run = simulate(ring, 10, 64e6, compute)
    assert run.time_s == pytest.approx(load + 10 * compute)
    assert run.busy_s == {"GPU0": pytest.approx(0.1)} and run.idle_s["GPU0"] == pytest.approx(load)
    assert run.host_bytes == 10 * 64e6 and run.d2d_bytes == 0
    # without prefetch every load waits for the compute before it
    assert simulate(ring, 10, 64e6, compute, buffer=1).time_s == pytest.approx(10 * (load + compute))


def test_none_with_two_devices_under_one_switch_is_bound_by_its_uplink():
    topology = Topology.single_switch(2)
    load = 64e6 / PCIE
    run = simulate(place(topology, "none"), 10, 64e6, load / 100)
    assert run.time_s == pytest.approx(10 * 2 * load + load / 100)  # each load at half the uplink
    uplink = (topology.uplink["switch0"], "down")
    assert run.link_bytes[uplink] == 20 * 64e6 and run.time_s * PCIE == pytest.approx(20 * 64e6, rel=0.01)


def test_ring_of_two_is_twice_as_fast_when_compute_bound():
    topology, tile = Topology.single_switch(2), 5 * 64e6 / PCIE
    one = layer(place(topology, "ring", ["GPU0"]), 16, 64e6, tile)
    two = layer(place(topology, "ring"), 16, 64e6, tile)
    assert one.time_s / two.time_s == pytest.approx(2, rel=0.02)
    assert two.busy_s == {"GPU0": pytest.approx(128 * tile), "GPU1": pytest.approx(128 * tile)}
    assert two.host_bytes == one.host_bytes / 2 == 128 * 64e6  # GPU1 gets every chunk from GPU0


class Relabelled:
    """A placement whose chunks are dealt one loader on, with routes and devices listed in reverse."""

    def __init__(self, placement):
        self.topology, self.inner = placement.topology, placement
        self.devices = tuple(reversed(placement.devices))

    def routes(self, chunk):
        return tuple(reversed(self.inner.routes(chunk + 1)))


@pytest.mark.parametrize("kind", PLACEMENTS)
def test_results_do_not_depend_on_how_chunks_are_dealt_or_listed(kind):
    placement = place(PAPER, kind, PAPER.devices[:4])  # GPU0/1 and GPU2/3 mirror each other
    tile = 1.06 * load_s(PAPER, 64e6)
    runs = [simulate(p, 32, 64e6, tile) for p in (placement, placement, Relabelled(placement))]
    assert runs[0] == runs[1]  # deterministic
    assert runs[2].time_s == pytest.approx(runs[0].time_s)
    assert runs[2].host_bytes == runs[0].host_bytes and runs[2].d2d_bytes == runs[0].d2d_bytes


@pytest.mark.parametrize("name", sorted({path.stem for path in SAMPLES.iterdir()}))
def test_every_placement_completes_with_any_buffer_and_moves_what_the_placement_says(name):
    topology = Topology.sample(name)
    for kind in PLACEMENTS:
        for count in sorted({1, 2, len(topology.devices) - 1, len(topology.devices)}):
            placement = place(topology, kind, topology.devices[:count])
            traffic = placement.traffic(7, 1e6)
            for buffer in (1, 2, 3):
                run = simulate(placement, 7, 1e6, 1e-4, buffer)
                assert run.host_bytes == traffic["host"] and run.d2d_bytes == traffic["d2d"]
                assert all(busy == pytest.approx(7e-4) for busy in run.busy_s.values())


def test_bad_arguments_are_refused():
    ring = place(Topology.single_switch(2), "ring")
    with pytest.raises(ValueError, match="at least 1"):
        simulate(ring, 0, 1e6, 1e-3)
    with pytest.raises(ValueError, match="at least 1"):
        layer(ring, 0, 1e6, 1e-3)

    class Partial:
        topology, devices = ring.topology, ring.devices

        def routes(self, chunk):
            return (("GPU0",),)

    with pytest.raises(ValueError, match="routes miss"):
        simulate(Partial(), 2, 1e6, 1e-3)


def test_the_defaults_reproduce_ngra_figure_16_on_the_paper_machine():
    """1 -> 2 GPUs: non-ring 1.06x, ring 1.93x; near-linear ring within a socket; less per GPU across QPI."""
    speedup = speedups(sweep(PAPER))
    assert speedup["none"][2] == pytest.approx(1.06, abs=0.1)
    assert speedup["ring"][2] == pytest.approx(1.93, abs=0.1)
    assert speedup["ring"][4] >= 3.5
    assert speedup["ring"][8] / 8 < speedup["ring"][4] / 4
    assert speedup["ring"][8] > speedup["chain"][8] > speedup["none"][8]  # sharing pays most across QPI


def test_sweep_always_runs_one_device_for_the_baseline():
    results = sweep(Topology.single_switch(4), counts=(4,), kinds=("ring",), intervals=4)
    assert set(results["ring"]) == {1, 4}
    assert speedups(results)["ring"][1] == 1.0
