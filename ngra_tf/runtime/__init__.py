"""Where a graph's data lives while it trains, and what that costs in memory.

Stores (`open_store`, `write_store`; `convert` and tools/partition_graph.py
write them from a stream of edges) keep a partitioned graph on disk, read a
chunk or an interval at a time. A GraphModel given a store trains from it
through `stream.Streamer`: one step's chunk and rows on the device tier,
the rest in the host tier (`tiers`) or the store, under a memory budget
(`budget.Plan`, measured by `resident`).
"""

from ngra_tf.runtime.store import Store, StorePartition, VertexArray, open_store, write_store

__all__ = ["Store", "StorePartition", "VertexArray", "open_store", "write_store"]
