"""Ready-made node-classification models: the graph each layer type expects,
the layer stack, and training settings that work on citation graphs.

    graph = recipes.prepare_graph("gcn", dataset.graph)
    model = recipes.build_model("gcn", graph, num_classes=7, hidden=16)
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from ngra_tf import layers
from ngra_tf.graph.graph import Graph
from ngra_tf.model import GraphModel

# Edge types for GG-NN: which way an edge ran in the input.
FORWARD, REVERSE, SELF_LOOP = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Recipe:
    hidden: int  # units of the hidden graph layer (per head for GAT)
    learning_rate: float
    epochs: int
    weight_decay: float  # L2 on the first graph layer's kernels
    dropout: float
    patience: int | None  # early stopping on validation loss; None trains all epochs


RECIPES = {
    "gcn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "commnet": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "mpgcn": Recipe(64, 0.01, 200, 5e-4, 0.5, None),
    "ggcn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "ggnn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "gat": Recipe(8, 0.005, 1000, 5e-4, 0.6, 100),
}


def prepare_graph(model: str, graph: Graph) -> Graph:
    """The graph a model runs over: symmetrised, with self loops, and the edge
    data its layers read (GCN weights for gcn, edge types for ggnn)."""
    _check_name(model)
    if model == "ggnn":
        # Keep direction as an edge type instead of erasing it.
        plain = graph.remove_self_loops().remove_duplicates()
        n = graph.num_vertices
        loops = np.arange(n)
        forward = plain.adjacency  # stored order: any order will do, and this one needs no permuting
        src = np.concatenate([forward.src, forward.dst, loops])
        dst = np.concatenate([forward.dst, forward.src, loops])
        types = np.concatenate([np.full(plain.num_edges, FORWARD), np.full(plain.num_edges, REVERSE),
                                np.full(n, SELF_LOOP)]).astype(np.int32)
        return Graph.from_edges(src, dst, n, edge_data=types)
    symmetric = graph.symmetrize().remove_self_loops().add_self_loops()
    if model == "gcn":
        return symmetric.with_edge_data(symmetric.gcn_norm())
    return Graph(symmetric.adjacency, None, symmetric.edge_order)


def build_model(model: str, graph: Graph, num_classes: int, hidden: int | None = None,
                recipe: Recipe | None = None, **options) -> GraphModel:
    """A two-graph-layer classifier producing logits (hidden: the recipe's by default).

    options go to GraphModel: chunks, schedule, rewrites."""
    _check_name(model)
    recipe = recipe or RECIPES[model]
    hidden = hidden or recipe.hidden
    l2 = keras.regularizers.L2(recipe.weight_decay) if recipe.weight_decay else None
    drop = recipe.dropout
    if model == "gcn":
        stack = [layers.GCN(hidden, activation="relu", kernel_regularizer=l2), layers.GCN(num_classes)]
    elif model == "commnet":
        stack = [layers.CommNet(hidden, activation="relu", kernel_regularizer=l2), layers.CommNet(num_classes)]
    elif model == "mpgcn":
        stack = [layers.MaxPoolGCN(hidden, activation="relu", kernel_regularizer=l2),
                 layers.MaxPoolGCN(num_classes)]
    elif model == "ggcn":
        # The gates are square in the input width: project the features first.
        stack = [keras.layers.Dense(hidden, activation="relu", kernel_regularizer=l2),
                 layers.GatedGCN(hidden, activation="relu"), layers.GatedGCN(num_classes)]
    elif model == "ggnn":
        stack = [keras.layers.Dense(hidden, activation="relu", kernel_regularizer=l2),
                 layers.GGNN(hidden, num_edge_types=3), layers.GGNN(hidden, num_edge_types=3),
                 keras.layers.Dense(num_classes)]
    else:  # gat
        stack = [layers.GAT(hidden, heads=8, activation="elu", attention_dropout=drop, kernel_regularizer=l2),
                 layers.GAT(num_classes, heads=1, concat_heads=False, attention_dropout=drop,
                            kernel_regularizer=l2)]
    # Dropout before every graph layer (Kipf & Welling; Velickovic et al.).
    with_dropout = []
    for layer in stack:
        if isinstance(layer, layers.SAGALayer) or layer is stack[0]:
            with_dropout.append(keras.layers.Dropout(drop))
        with_dropout.append(layer)
    return GraphModel(graph, with_dropout, name=model, **options)


def _check_name(model):
    if model not in RECIPES:
        raise ValueError(f"model must be one of {', '.join(RECIPES)}; got {model!r}")
