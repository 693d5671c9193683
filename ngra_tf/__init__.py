"""ngra-tf: NGra-style graph neural networks on large graphs, for TensorFlow 2."""

from ngra_tf import layers, ops
from ngra_tf.graph import Adjacency, Chunk, Graph, Partition
from ngra_tf.layers import SAGALayer
from ngra_tf.model import GraphModel, masked_loss

__version__ = "0.1.0"

__all__ = ["Adjacency", "Chunk", "Graph", "GraphModel", "Partition", "SAGALayer", "layers", "masked_loss", "ops"]
