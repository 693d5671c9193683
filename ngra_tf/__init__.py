"""ngra-tf: NGra-style graph neural networks on large graphs, for TensorFlow 2."""

from ngra_tf import ops
from ngra_tf.graph import Adjacency, Chunk, Graph, Partition

__version__ = "0.1.0"

__all__ = ["Adjacency", "Chunk", "Graph", "Partition", "ops"]
