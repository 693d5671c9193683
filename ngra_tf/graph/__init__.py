"""Graphs and their 2-D partitions: numpy/scipy in, immutable."""

from ngra_tf.graph.adjacency import Adjacency
from ngra_tf.graph.graph import Graph
from ngra_tf.graph.partition import Chunk, Partition

__all__ = ["Adjacency", "Chunk", "Graph", "Partition"]
