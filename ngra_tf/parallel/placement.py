"""Who loads each vertex chunk from host memory, and who forwards it to whom (NGra §4.2).

Every device of a layer needs every vertex chunk. Loading them all from the
host on every device makes the shared upper links the bottleneck, so:
- "ring" (NGra): the devices form one ring in depth-first tree order; each
  chunk enters at a loader and goes once round the ring by device-to-device
  copies. The loaders are the leaves of the maximal bandwidth fat-tree
  (`fat_tree_loaders`), taking chunks in turn.
- "chain" (NeuGraph, ATC'19): the devices under one PCIe switch form a chain,
  a "virtual GPU"; each chain loads every chunk once and passes it along.
- "none": every device loads every chunk itself, the baseline.

All of this is computed on the part of the tree that holds the chosen
devices, so 2 of a box's 8 GPUs are placed as the 2-GPU machine they form.
"""

from __future__ import annotations

import dataclasses
import math

from ngra_tf.parallel.topology import Topology

PLACEMENTS = ("ring", "chain", "none")


def _tree(topology: Topology, devices) -> Topology:
    return topology if devices is None else topology.subtree(devices)


def fat_tree_loaders(topology: Topology, devices=None) -> tuple:
    """The devices that load from the host: the leaves of the maximal bandwidth fat-tree.

    Bottom-up, each node is offered its children's loaders, each at its rate:
    the least bandwidth on its way up to the node. A node other than the root
    keeps them, fastest first (then in device order), while their summed rate
    fits in its own link up, and always keeps at least one; so no two loaders
    share a link that one of them alone would fill. Returns them in device order.
    """
    tree = _tree(topology, devices)
    order = tree.devices

    def loaders_at(node):
        if tree.kind[node] == "device":
            return [(math.inf, node)]
        offered = [(min(rate, tree.uplink[child].bandwidth), device)
                   for child in tree.children(node) for rate, device in loaders_at(child)]
        if node == tree.root:
            return offered
        kept, total, capacity = [], 0.0, tree.uplink[node].bandwidth
        for rate, device in sorted(offered, key=lambda offer: (-offer[0], order.index(offer[1]))):
            if not kept or total + rate <= capacity * (1 + 1e-9):
                kept.append((rate, device))
                total += rate
        return kept

    loaders = {device for _, device in loaders_at(tree.root)}
    return tuple(device for device in order if device in loaders)


def ring_order(topology: Topology, devices=None) -> tuple:
    """The devices in depth-first tree order, read as a ring (the last forwards to the first).

    Neighbours are as close in the tree as they can be, and going once round
    crosses every link of the tree joining the devices exactly once each way:
    since links are full duplex, the ring's copies never share bandwidth.
    Peer links are used where they join neighbours, but do not choose the order.
    """
    tree = _tree(topology, devices)
    return tuple(node for node in tree.depth_first() if tree.kind[node] == "device")


def chain_groups(topology: Topology, devices=None) -> tuple:
    """NeuGraph's chains: the devices under each lowest PCIe switch, in ring order; any other device alone."""
    tree = _tree(topology, devices)
    chains = {}
    for device in ring_order(tree):
        parent = tree.parent[device]
        chains.setdefault(parent if tree.kind[parent] == "switch" else device, []).append(device)
    return tuple(tuple(chain) for chain in chains.values())


def place(topology: Topology, kind="ring", devices=None) -> "Placement":
    """The placement `kind` (one of PLACEMENTS) on `devices` (default: all of the topology's)."""
    if kind not in PLACEMENTS:
        raise ValueError(f"unknown placement {kind!r}; expected one of {', '.join(PLACEMENTS)}")
    if devices is not None:
        devices = list(devices)
        if not devices:
            raise ValueError("no devices to place on")
        unknown = [device for device in devices if device not in topology.devices]
        if unknown:
            raise ValueError(f"not devices of {topology.name}: {unknown}; it has {list(topology.devices)}")
    tree = _tree(topology, devices)
    if kind == "ring":
        order = ring_order(tree)
        loaders = set(fat_tree_loaders(tree))
        return Placement(kind, topology, order, tuple(d for d in order if d in loaders), (order,))
    if kind == "chain":
        groups = chain_groups(tree)
        return Placement(kind, topology, sum(groups, ()), tuple(group[0] for group in groups), groups)
    return Placement(kind, topology, tree.devices, tree.devices, tuple((device,) for device in tree.devices))


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a layer's vertex chunks enter from the host and how they travel between devices."""

    kind: str  # one of PLACEMENTS
    topology: Topology = dataclasses.field(repr=False)
    devices: tuple  # in ring (or chain) order
    loaders: tuple  # the devices that load from the host
    groups: tuple  # tuples of devices: the ring, the chains, or each device alone

    def routes(self, chunk: int) -> tuple:
        """How vertex chunk `chunk` travels: one route per group, covering every device once.

        route[0] loads the chunk from the host; route[k] copies it from
        route[k - 1]. On a ring the loaders take chunks in turn, and the route
        is the ring starting at the chunk's loader.
        """
        if not isinstance(chunk, int) or chunk < 0:
            raise ValueError(f"chunk must be an index >= 0, got {chunk!r}")
        if self.kind != "ring":
            return self.groups
        start = self.devices.index(self.loaders[chunk % len(self.loaders)])
        return (self.devices[start:] + self.devices[:start],)

    def traffic(self, num_chunks: int, chunk_bytes=1) -> dict:
        """The bytes moved to stream `num_chunks` chunks of `chunk_bytes` each through every device once.

        {"host": host-to-device bytes, "d2d": device-to-device bytes,
         "per_device": {device: {"h2d": ..., "d2d_in": ..., "d2d_out": ...}}}
        """
        per_device = {device: {"h2d": 0, "d2d_in": 0, "d2d_out": 0} for device in self.devices}
        for chunk in range(num_chunks):
            for route in self.routes(chunk):
                per_device[route[0]]["h2d"] += chunk_bytes
                for sender, receiver in zip(route, route[1:]):
                    per_device[sender]["d2d_out"] += chunk_bytes
                    per_device[receiver]["d2d_in"] += chunk_bytes
        return {"host": sum(counts["h2d"] for counts in per_device.values()),
                "d2d": sum(counts["d2d_in"] for counts in per_device.values()),
                "per_device": per_device}

    def describe(self, num_chunks=None, chunk_bytes=None) -> str:
        """Who loads which chunks, who forwards to whom, and the host traffic against "none"."""
        lines = [f"{self.kind} placement on {self.topology.name}, {len(self.devices)} devices: "
                 + " ".join(self.devices)]
        if self.kind == "ring":
            lines.append("  loaders (maximal bandwidth fat-tree): " + " ".join(self.loaders))
            turns = len(self.loaders)
            for turn in range(turns):
                chunks = (f"chunks {_listed(range(turn, num_chunks, turns))}" if num_chunks is not None
                          else f"chunk k, k % {turns} == {turn}")
                lines.append(f"  {chunks}: " + " -> ".join(self.routes(turn)[0]))
        elif self.kind == "chain":
            lines.extend("  chain " + " -> ".join(group) + ": loads every chunk" for group in self.groups)
        else:
            lines.append("  every device loads every chunk from the host")
        loads, everyone = len(self.routes(0)), len(self.devices)
        lines.append(f"  host -> device: each chunk loaded {loads}x (none: {everyone}x; ratio {loads / everyone:.3g})")
        if num_chunks is not None:
            traffic, unit = self.traffic(num_chunks, chunk_bytes or 1), "bytes" if chunk_bytes else "chunks"
            lines.append(f"  {num_chunks} chunks: host -> device {traffic['host']:,} {unit}, "
                         f"device -> device {traffic['d2d']:,} {unit}")
        return "\n".join(lines)

    __str__ = describe


def _listed(chunks) -> str:
    """0, 2, 4 -- or 0, 2, 4, ..., 98 for long ranges."""
    chunks = list(chunks)
    if not chunks:
        return "(none)"
    if len(chunks) > 6:
        return ", ".join(map(str, chunks[:3])) + ", ..., " + str(chunks[-1])
    return ", ".join(map(str, chunks))
