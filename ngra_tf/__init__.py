"""ngra-tf: NGra-style graph neural networks on large graphs, for TensorFlow 2."""

from ngra_tf import callbacks, layers, ops
from ngra_tf.graph import Adjacency, Chunk, Graph, Partition, datasets
from ngra_tf.layers import SAGALayer
from ngra_tf.model import GraphModel, masked_loss
from ngra_tf import recipes  # noqa: E402  (builds on GraphModel)
from ngra_tf import runtime, store  # noqa: E402  (the executor; stores of partitioned graphs)

__version__ = "0.1.0"

__all__ = ["Adjacency", "Chunk", "Graph", "GraphModel", "Partition", "SAGALayer", "callbacks", "datasets", "layers",
           "masked_loss", "ops", "recipes", "runtime", "store"]
