"""Graphs and their 2-D partitions: numpy/scipy in, immutable."""

from ngra_tf.graph.adjacency import Adjacency
from ngra_tf.graph.graph import Graph
from ngra_tf.graph.partition import Chunk, Partition
from ngra_tf.graph import datasets, synthetic  # noqa: E402  (they build Graphs)

__all__ = ["Adjacency", "Chunk", "Graph", "Partition", "datasets", "synthetic"]
