"""SAGA-NN layers: the base class, the five models of the NGra paper, GAT, GraphSAGE, GIN, R-GCN and
APPNP's propagation step; and a Dropout that also takes sparse features."""

from ngra_tf.layers.commnet import CommNet
from ngra_tf.layers.dropout import Dropout
from ngra_tf.layers.gat import GAT
from ngra_tf.layers.gcn import GCN
from ngra_tf.layers.ggcn import GatedGCN
from ngra_tf.layers.ggnn import GGNN
from ngra_tf.layers.gin import GIN
from ngra_tf.layers.graphsage import GraphSAGE
from ngra_tf.layers.mpgcn import MaxPoolGCN
from ngra_tf.layers.propagate import GCNPropagate
from ngra_tf.layers.rgcn import RGCN, relational_edge_data
from ngra_tf.layers.saga import ACCUMULATORS, EdgeView, SAGALayer, parse_accumulator

__all__ = ["ACCUMULATORS", "CommNet", "Dropout", "EdgeView", "GAT", "GCN", "GCNPropagate", "GGNN", "GIN", "GatedGCN",
           "GraphSAGE", "MaxPoolGCN", "RGCN", "SAGALayer", "parse_accumulator", "relational_edge_data"]
