"""Ready-made node-classification models: the graph each layer type expects,
the model, and training settings that work on citation graphs.

    graph = recipes.prepare_graph("gcn", dataset.graph)
    model = recipes.build_model("gcn", graph, num_classes=7, hidden=16)

The NGra paper's models and GAT are stacks of two graph layers (a list of
layers); GraphSAGE and GIN too. The others are functional models with skip
edges (ngra_tf.GraphModel runs any Keras functional model):

    resgcn  a deep residual GCN (ROC): h <- h + GCN(h) on every hidden layer
    jknet   a jumping-knowledge net (Xu et al.): every GCN layer's output, concatenated, then Dense
    appnp   APPNP (Klicpera et al.): an MLP, then K propagation steps z <- (1 - alpha) A z + alpha h
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
    # On the first graph layer's kernels, as Kipf & Welling and PyG mean it: a loss term weight_decay / 2 * sum(w^2),
    # whose gradient is weight_decay * w (torch's Adam(weight_decay=)). Keras's L2(l) is l * sum(w^2): twice that.
    weight_decay: float
    dropout: float
    patience: int | None  # early stopping on validation loss; None trains all epochs


RECIPES = {
    "gcn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "commnet": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "mpgcn": Recipe(64, 0.01, 200, 5e-4, 0.5, None),
    "ggcn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "ggnn": Recipe(16, 0.01, 200, 5e-4, 0.5, None),
    "gat": Recipe(8, 0.005, 1000, 5e-4, 0.6, 100),
    # Up to 400 epochs, stopped 50 after the best validation loss (its weights restored): on Cora each gains 1-2
    # points over 200 fixed epochs (docs/results/accuracy.md).
    "sage": Recipe(64, 0.01, 400, 5e-4, 0.5, 50),
    "gin": Recipe(64, 0.005, 400, 5e-4, 0.6, 50),  # the sum aggregator is noisier: smaller steps, more dropout
    "appnp": Recipe(64, 0.01, 400, 5e-3, 0.5, 50),
    "resgcn": Recipe(64, 0.01, 400, 5e-4, 0.5, 50),
    "jknet": Recipe(64, 0.01, 400, 5e-4, 0.5, 50),
    "rgcn": Recipe(16, 0.01, 400, 5e-4, 0.5, 50),  # relations: GG-NN's three directions
}


def fan_in_uniform():
    """PyTorch's nn.Linear initialisation, U(+-1 / sqrt(fan_in)), as PyG's GIN starts: the GIN recipe's. GIN
    sums its neighbours' rows (36 on average on Amazon Computers) through two MLP layers per graph layer; with
    Keras's glorot, 2.4x wider there, training collapsed on some seeds (26.6-60.4 % over 5; 62.0-72.1 % with
    this). On Cora glorot did 1.8 points better (77.6 against 75.8 % over 10 seeds; PyG 75.5 %):
    docs/results/accuracy.md."""
    return keras.initializers.VarianceScaling(1 / 3, mode="fan_in", distribution="uniform")


# Models over GCN's normalised adjacency (edge weights), and those over the plain symmetric graph without self
# loops (their root or eps term is the vertex's own row).
GCN_WEIGHTED = ("gcn", "appnp", "resgcn", "jknet")
NO_SELF_LOOPS = ("sage", "gin")
# Functional models: they need the features' width.
FUNCTIONAL = ("appnp", "resgcn", "jknet")


def prepare_graph(model: str, graph: Graph) -> Graph:
    """The graph a model runs over: symmetrised, with self loops, and the edge
    data its layers read (GCN weights for gcn, edge types for ggnn)."""
    _check_name(model)
    if model in ("ggnn", "rgcn"):
        # Keep direction as an edge type instead of erasing it (R-GCN: a relation, and its normalisation).
        plain = graph.remove_self_loops().remove_duplicates()
        n = graph.num_vertices
        loops = np.arange(n)
        forward = plain.adjacency  # stored order: any order will do, and this one needs no permuting
        src = np.concatenate([forward.src, forward.dst, loops])
        dst = np.concatenate([forward.dst, forward.src, loops])
        types = np.concatenate([np.full(plain.num_edges, FORWARD), np.full(plain.num_edges, REVERSE),
                                np.full(n, SELF_LOOP)]).astype(np.int32)
        typed = Graph.from_edges(src, dst, n, edge_data=types)
        return typed if model == "ggnn" else typed.with_edge_data(layers.relational_edge_data(typed, types))
    plain = graph.symmetrize().remove_self_loops()
    if model in NO_SELF_LOOPS:
        return Graph(plain.adjacency, None, plain.edge_order)
    symmetric = plain.add_self_loops()
    if model in GCN_WEIGHTED:
        return symmetric.with_edge_data(symmetric.gcn_norm())
    return Graph(symmetric.adjacency, None, symmetric.edge_order)


def build_model(model: str, graph, num_classes: int, hidden: int | None = None, recipe: Recipe | None = None,
                num_features: int | None = None, depth: int | None = None, k: int = 10, alpha: float = 0.1,
                attention_dropout: float | None = None, sparse: bool = False, **options) -> GraphModel:
    """A classifier producing logits (hidden: the recipe's by default).

    num_features (the input width) is needed by the functional models (resgcn, jknet, appnp) when `graph`
    is a Graph; a store knows it. depth: graph layers of resgcn (4) and jknet (3); k, alpha: APPNP's
    propagation steps and teleport probability; attention_dropout: GAT's on the attention weights (default: the
    recipe's dropout; the attention fuses either way, see GAT). sparse: the functional models take sparse features (the
    others take what they are given). options go to GraphModel: chunks, schedule, rewrites, ...
    """
    _check_name(model)
    recipe = recipe or RECIPES[model]
    hidden = hidden or recipe.hidden
    l2 = keras.regularizers.L2(recipe.weight_decay / 2) if recipe.weight_decay else None
    drop = recipe.dropout
    if model in FUNCTIONAL:
        if num_features is None and hasattr(graph, "vertex_spec"):
            num_features = int(np.prod(graph.vertex_spec("features")[0]))
        if num_features is None:
            raise ValueError(f"build_model({model!r}, ...) makes a functional model: pass num_features, the width "
                             "of the vertex features")
        network = _functional(model, int(num_features), num_classes, hidden, drop, l2, depth, k, alpha, sparse)
        return GraphModel(graph, network, name=model, **options)
    if model == "gcn":
        stack = [layers.GCN(hidden, activation="relu", kernel_regularizer=l2), layers.GCN(num_classes)]
    elif model == "commnet":
        stack = [layers.CommNet(hidden, activation="relu", kernel_regularizer=l2), layers.CommNet(num_classes)]
    elif model == "mpgcn":
        stack = [layers.MaxPoolGCN(hidden, activation="relu", kernel_regularizer=l2),
                 layers.MaxPoolGCN(num_classes)]
    elif model == "sage":
        stack = [layers.GraphSAGE(hidden, activation="relu", kernel_regularizer=l2), layers.GraphSAGE(num_classes)]
    elif model == "gin":
        stack = [layers.GIN(hidden, train_eps=True, activation="relu", kernel_regularizer=l2,
                            kernel_initializer=fan_in_uniform()),
                 layers.GIN(num_classes, hidden=hidden, train_eps=True, kernel_initializer=fan_in_uniform())]
    elif model == "ggcn":
        # The gates are square in the input width: project the features first.
        stack = [keras.layers.Dense(hidden, activation="relu", kernel_regularizer=l2),
                 layers.GatedGCN(hidden, activation="relu"), layers.GatedGCN(num_classes)]
    elif model == "rgcn":
        relations = len((FORWARD, REVERSE, SELF_LOOP))
        stack = [layers.RGCN(hidden, relations, activation="relu", kernel_regularizer=l2),
                 layers.RGCN(num_classes, relations)]
    elif model == "ggnn":
        stack = [keras.layers.Dense(hidden, activation="relu", kernel_regularizer=l2),
                 layers.GGNN(hidden, num_edge_types=3), layers.GGNN(hidden, num_edge_types=3),
                 keras.layers.Dense(num_classes)]
    else:  # gat
        attention = drop if attention_dropout is None else attention_dropout
        stack = [layers.GAT(hidden, heads=8, activation="elu", attention_dropout=attention, kernel_regularizer=l2),
                 layers.GAT(num_classes, heads=1, concat_heads=False, attention_dropout=attention,
                            kernel_regularizer=l2)]
    # Dropout before every graph layer (Kipf & Welling; Velickovic et al.).
    with_dropout = []
    for layer in stack:
        if isinstance(layer, layers.SAGALayer) or layer is stack[0]:
            with_dropout.append(layers.Dropout(drop))
        with_dropout.append(layer)
    return GraphModel(graph, with_dropout, name=model, **options)


class TrainingMemory:
    """The working set of training recipes' models over stores of one graph, as the trainer estimates it
    (GraphModel.memory_plan): what tools/partition_graph.py picks P by, so that examples/train.py accepts the
    store it writes under the same --memory_budget. Callable on a store's Shape: (bytes, what they sum) of the
    model that needs the most."""

    def __init__(self, models=("gcn",), hidden: int | None = None):
        for model in models:
            _check_name(model)
        if not models:
            raise ValueError("name at least one model to size the chunks for")
        self.models, self.hidden = tuple(models), hidden
        self._built = {}  # (model, vertices, features shape, classes) -> the model, built once

    def __call__(self, shape) -> tuple:
        plans = [(model, self._model(model, shape).memory_plan(shape)) for model in self.models]
        model, plan = max(plans, key=lambda found: found[1].working_set)
        hidden = "" if self.hidden is None else f" (hidden {self.hidden})"
        return plan.working_set, f"{model}{hidden} needs {plan.formula()}"

    def _model(self, model, shape):
        width = int(np.prod(shape.vertex_spec("features")[0], dtype=np.int64))
        key = (model, shape.num_vertices, width, shape.num_classes())
        if key not in self._built:
            self._built[key] = build_model(model, None, num_classes=shape.num_classes(), hidden=self.hidden,
                                           num_features=width, sparse=shape.is_sparse("features"))
        return self._built[key]


def callbacks(recipe: Recipe) -> list:
    """The Keras callbacks a recipe trains with: early stopping on the validation loss, the best weights
    restored (none when recipe.patience is None)."""
    if not recipe.patience:
        return []
    return [keras.callbacks.EarlyStopping("val_loss", patience=recipe.patience, restore_best_weights=True)]


def _functional(model, num_features, num_classes, hidden, drop, l2, depth, k, alpha, sparse) -> keras.Model:
    """The functional recipes, with dropout before every layer that has weights."""
    x = keras.Input(shape=(num_features,), name="features", sparse=sparse)
    dropout = layers.Dropout  # (it also takes sparse features)
    if model == "appnp":
        h = keras.layers.Dense(hidden, activation="relu", kernel_regularizer=l2)(dropout(drop)(x))
        h = keras.layers.Dense(num_classes)(dropout(drop)(h))
        z = h
        for _ in range(k):
            z = keras.layers.Add()([keras.layers.Rescaling(1 - alpha)(layers.GCNPropagate()(z)),
                                    keras.layers.Rescaling(alpha)(h)])
        return keras.Model(x, z, name=model)
    depth = depth or (4 if model == "resgcn" else 3)
    if depth < 2:
        raise ValueError(f"depth must be at least 2 graph layers for {model}, got {depth}")
    if model == "resgcn":
        h = layers.GCN(hidden, activation="relu", kernel_regularizer=l2)(dropout(drop)(x))
        for _ in range(depth - 2):
            h = keras.layers.Add()([h, layers.GCN(hidden, activation="relu")(dropout(drop)(h))])
        return keras.Model(x, layers.GCN(num_classes)(dropout(drop)(h)), name=model)
    # jknet: jumping knowledge by concatenation.
    outputs, h = [], x
    for i in range(depth):
        h = layers.GCN(hidden, activation="relu", kernel_regularizer=l2 if i == 0 else None)(dropout(drop)(h))
        outputs.append(h)
    y = keras.layers.Dense(num_classes)(dropout(drop)(keras.layers.Concatenate()(outputs)))
    return keras.Model(x, y, name=model)


def _check_name(model):
    if model not in RECIPES:
        raise ValueError(f"model must be one of {', '.join(RECIPES)}; got {model!r}")
