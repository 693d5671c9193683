"""Several devices as a ring (NGra §4.2, Fig. 8): who owns which destination interval, how rows travel.

Work is split by destination interval: device `owner(j)` holds column j's
accumulators A[j], reduces every chunk C[i][j] into them and runs
ApplyVertex(A[j]), so no vertex's result is reduced on two devices. What
all devices share is the vertex data: interval i's rows enter the devices
once per route of the placement (ngra_tf.parallel.placement): the route's
first device loads them, each next one receives them from the one before
it (copy_d2d). `DeviceRing` answers owner(j) and routes(i) for the TF
device names; the executor (ngra_tf.runtime.ring_loops) runs the steps.

Devices are TF device names: GPUs, logical CPU devices (`split_cpu`), or a
TF cluster's (`/job:worker/task:k/device:...`, after
tf.config.experimental_connect_to_cluster).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ngra_tf.parallel import cluster
from ngra_tf.parallel.placement import PLACEMENTS, Placement, place
from ngra_tf.parallel.topology import Topology

HOST = "/CPU:0"


def split_cpu(count: int):
    """Splits the host CPU into `count` logical devices (/CPU:0 ... ), as tests and CPU-only runs do.

    Must run before TensorFlow initialises its devices (before any op runs).
    """
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * int(count))
    except RuntimeError as error:
        have = len(tf.config.list_logical_devices("CPU"))
        if have >= count:
            return
        raise RuntimeError(f"the CPU can no longer be split into {count} devices ({have} now): TensorFlow has "
                           "already initialised its devices; call ngra_tf.parallel.split_cpu first") from error


def resolve_devices(devices) -> list:
    """TF device names for `devices`: a count (the first GPUs, else logical CPU devices) or a list of names."""
    if isinstance(devices, bool) or devices is None:
        raise ValueError(f"devices must be a positive count or a list of device names, got {devices!r}")
    if isinstance(devices, (int, np.integer)):
        count = int(devices)
        if count < 1:
            raise ValueError(f"devices must be at least 1, got {count}")
        for kind in ("GPU", "CPU"):
            found = [d.name for d in tf.config.list_logical_devices(kind)]
            if kind == "GPU" and not found:
                continue
            if len(found) < count:
                hint = ("" if kind == "GPU" else " (on a CPU-only machine, call ngra_tf.parallel.split_cpu"
                        f"({count}) before TensorFlow starts, as examples/train.py --devices does)")
                raise ValueError(f"devices={count}, but this process has {len(found)} {kind} device(s){hint}")
            return found[:count]
    names = [str(d) for d in devices]
    if not names:
        raise ValueError("devices is an empty list")
    if len(set(names)) != len(names):
        raise ValueError(f"devices names a device twice: {names}")
    known = {_full(d.name) for d in tf.config.list_logical_devices()}
    for name in names:
        if _full(name) not in known:
            raise ValueError(f"devices: no device {name!r} in this process (it has: "
                             f"{', '.join(sorted(d.name for d in tf.config.list_logical_devices()))})")
    return names


class DeviceRing:
    """Devices, their placement (who loads, who forwards to whom) and who owns which destination interval.

    `placement` is "ring", "chain", "none" or a Placement; `topology` a
    Topology, a path (nvidia-smi topo -m text or JSON), or None: one PCIe
    switch over all devices. Topology leaf k is device k.
    """

    def __init__(self, devices, placement="ring", topology=None, host: str = HOST):
        self.devices = resolve_devices(devices)
        if topology is None:
            groups = cluster.machines(self.devices)
            if len(groups) > 1:
                self.devices = [d for group in groups for d in group]  # topology leaves come machine by machine
                topology = Topology.cluster([Topology.single_switch(len(g)) for g in groups], cluster.NETWORK_GBPS)
            else:
                topology = Topology.single_switch(len(self.devices))
        elif not isinstance(topology, Topology):
            topology = Topology.load(topology)
        leaves = topology.devices
        if len(leaves) < len(self.devices):
            raise ValueError(f"the topology {topology.name} has {len(leaves)} devices; {len(self.devices)} asked for")
        leaves = leaves[:len(self.devices)]
        if isinstance(placement, Placement):
            if set(placement.devices) != set(leaves):
                raise ValueError(f"the placement is over {placement.devices}, the devices are {leaves}")
        elif placement in PLACEMENTS:
            placement = place(topology, placement, devices=leaves)
        else:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)} or a Placement; got {placement!r}")
        self.placement, self.topology, self.host = placement, topology, host
        self.device_of = dict(zip(leaves, self.devices))
        self.order = [self.device_of[leaf] for leaf in placement.devices]  # ring (or chain) order
        self._routes = {}

    def owner(self, j: int) -> str:
        """The device that holds A[j]: intervals dealt round the ring (the partition balances their edges)."""
        return self.order[j % len(self.order)]

    def routes(self, part: int) -> tuple:
        """The routes interval `part`'s rows take: [loader, next, ...] as TF device names (the ring loops ask
        once per row step, so they are made once per interval)."""
        if part not in self._routes:
            self._routes[part] = tuple(tuple(self.device_of[leaf] for leaf in route)
                                       for route in self.placement.routes(part))
        return self._routes[part]

    def check(self, partition):
        if partition.num_parts < len(self.devices):
            raise ValueError(f"{partition.num_parts} chunks per side but {len(self.devices)} devices: every device "
                             f"owns destination intervals; use chunks >= {len(self.devices)}")

    def describe(self, num_parts: int | None = None) -> str:
        lines = [f"{len(self.devices)} devices, placement {self.placement.kind}: "
                 + ", ".join(f"{leaf}={device}" for leaf, device in self.device_of.items())]
        lines.append(self.placement.describe(num_parts))
        if num_parts:
            owned = {d: [j for j in range(num_parts) if self.owner(j) == d] for d in self.order}
            lines.append("destination intervals: " + "; ".join(f"{d}: {v}" for d, v in owned.items()))
        return "\n".join(lines)


def same_device(a: str, b: str) -> bool:
    """Whether two TF device names name one device ("/CPU:1" and "/job:localhost/replica:0/task:0/device:CPU:1")."""
    return _full(a) == _full(b)


def _full(name):
    spec = tf.DeviceSpec.from_string(name)
    return spec.replace(job=spec.job or "localhost", replica=spec.replica or 0, task=spec.task or 0,
                        device_index=spec.device_index or 0).to_string()


def traffic(stats) -> dict:
    """copy_stats() as {device: {"h2d": bytes, "d2d": bytes, "d2h": bytes}}, and the totals under "all"."""
    table = {}
    for (kind, device), count in stats.items():
        for name in (device, "all"):
            table.setdefault(name, {"h2d": 0, "d2d": 0, "d2h": 0})[kind] += count
    return table


__all__ = ["DeviceRing", "resolve_devices", "same_device", "split_cpu", "traffic"]
