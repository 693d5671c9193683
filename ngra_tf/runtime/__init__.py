"""Where a graph's data lives while it trains, and what that costs in memory.

Stores (`open_store`, `write_store`; `convert` and tools/partition_graph.py
write them from a stream of edges) keep a partitioned graph on disk, read a
chunk or an interval at a time.
"""

from ngra_tf.runtime.store import Store, StorePartition, open_store, write_store

__all__ = ["Store", "StorePartition", "open_store", "write_store"]
