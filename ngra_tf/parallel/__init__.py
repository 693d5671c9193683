"""Several devices: the machine's bandwidth tree and where each vertex chunk is loaded and forwarded (NGra §4)."""

from ngra_tf.parallel.placement import PLACEMENTS, Placement, chain_groups, fat_tree_loaders, place, ring_order
from ngra_tf.parallel.topology import Link, Topology, TopologyError
from ngra_tf.parallel.ring import DeviceRing, resolve_devices, same_device, split_cpu, traffic
from ngra_tf.parallel.cluster import EVERYWHERE, JOB, cluster_spec, connect, lost_worker, processes, serve

__all__ = ["DeviceRing", "EVERYWHERE", "JOB", "Link", "PLACEMENTS", "Placement", "Topology", "TopologyError",
           "chain_groups", "cluster_spec", "connect", "fat_tree_loaders", "lost_worker", "place", "processes",
           "resolve_devices", "ring_order", "same_device", "serve", "split_cpu", "traffic"]
