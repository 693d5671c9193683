"""SAGA-NN layers: the base class, the five models of the NGra paper, and GAT."""

from ngra_tf.layers.commnet import CommNet
from ngra_tf.layers.gat import GAT
from ngra_tf.layers.gcn import GCN
from ngra_tf.layers.ggcn import GatedGCN
from ngra_tf.layers.ggnn import GGNN
from ngra_tf.layers.mpgcn import MaxPoolGCN
from ngra_tf.layers.saga import ACCUMULATORS, EdgeView, SAGALayer, parse_accumulator

__all__ = ["ACCUMULATORS", "CommNet", "EdgeView", "GAT", "GCN", "GGNN", "GatedGCN", "MaxPoolGCN", "SAGALayer",
           "parse_accumulator"]
