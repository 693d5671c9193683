"""GraphModel: a Keras model over one fixed graph, trained full-graph.

    model = ngra_tf.GraphModel(graph, [GCN(16, activation="relu"), keras.layers.Dropout(0.5), GCN(7)],
                               chunks=4)  # optional: 4 x 4 edge chunks, NGra's schedule, all rewrites
    model.compile(optimizer="adam", loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    model.fit(features, labels, sample_weight=train_mask, epochs=200,
              validation_data=(features, labels, val_mask))

Row i of features, labels and masks is vertex i. Every fit/evaluate/predict
step sees the whole graph as one batch (nothing is sliced or shuffled),
because a graph layer needs all of a vertex's neighbours; a tf.data.Dataset
whose elements are such whole-graph batches is accepted too. The mask is the sample weight: vertices outside it do not count.
SAGA layers get the graph; other Keras layers (Dropout, Dense, ...) act per
vertex. The graph is saved with the model (as a Keras asset), so
`keras.models.load_model` gives back a working model.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from ngra_tf.compiler import SCHEDULES, parse_rewrites
from ngra_tf.graph.graph import Graph
from ngra_tf.layers.saga import SAGALayer

_GRAPH_ASSET = "graph.npz"


def masked_loss(from_logits: bool = True):
    """Sparse categorical cross-entropy averaged over the masked vertices only.

    ("sum_over_batch_size" would divide by every vertex of the graph, shrinking
    the loss by the mask's density and skewing it against regularisers.)
    """
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits,
                                                      reduction="mean_with_sample_weight")


@keras.saving.register_keras_serializable(package="ngra_tf")
class GraphModel(keras.Model):
    """A stack of layers over `graph`; SAGA layers propagate, others act per vertex."""

    def __init__(self, graph: Graph | None, layers, chunks: int = 1, schedule: str = "ngra", rewrites=True,
                 **kwargs):
        super().__init__(**kwargs)
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"graph must be an ngra_tf.Graph, got {type(graph).__name__}")
        if isinstance(chunks, bool) or int(chunks) != chunks or chunks < 1:
            raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
        self.chunks, self.schedule = int(chunks), schedule
        self.rewrites = sorted(parse_rewrites(rewrites))  # validated; a list keeps the config JSON-friendly
        self.graph = graph
        self.graph_layers = list(layers)
        if not self.graph_layers:
            raise ValueError("a GraphModel needs at least one layer")
        self._pending_input_shape = None

    @property
    def partition(self):
        """The graph cut into chunks x chunks edge chunks (made once, then cached by the graph)."""
        if self.graph is None:
            raise ValueError("this GraphModel has no graph; pass one to the constructor")
        return self.graph.partition(self.chunks)

    def call(self, features, training=None):
        partition = self.partition
        x = features
        for layer in self.graph_layers:
            if isinstance(layer, SAGALayer):
                x = layer(x, graph=partition, training=training, schedule=self.schedule, rewrites=self.rewrites)
            else:
                x = layer(x, training=training)
        return x

    def explain(self, print_fn=print) -> str:
        """Prints (and returns) the plan: chunks, schedule, and per SAGA layer its
        typing, what was hoisted, whether the edge stage was fused (or why not)
        and whether it propagates at a narrower width."""
        if not self.built:
            raise ValueError("explain() describes a built model: call model.build(features.shape), "
                             "fit, evaluate or predict first")
        p, g = self.partition, self.graph
        nonempty = int((p.edge_counts > 0).sum())
        lines = [f"{self.name}: {g.num_vertices} vertices, {g.num_edges} edges, "
                 f"{p.num_parts}x{p.num_parts} chunks ({nonempty} non-empty, edge imbalance "
                 f"{p.imbalance_after:.2f}), schedule {self.schedule}"]
        lines += [layer.explain() for layer in self.graph_layers if isinstance(layer, SAGALayer)]
        text = "\n".join(lines)
        if print_fn is not None:
            print_fn(text)
        return text

    # ---- full-graph training ----

    def _check(self, x, y=None, sample_weight=None, what="fit"):
        n = self.graph.num_vertices
        rows = getattr(x, "shape", None)
        if rows is None or len(rows) == 0 or rows[0] != n:
            raise ValueError(f"{what}: features must have one row per vertex ({n}), got shape {rows}")
        for name, value in (("labels", y), ("sample_weight (the vertex mask)", sample_weight)):
            if value is not None and np.shape(value)[0] != n:
                raise ValueError(f"{what}: {name} must have one entry per vertex ({n}), "
                                 f"got shape {np.shape(value)}")
        if y is not None and self.built:
            classes = self.compute_output_shape(tuple(x.shape))[-1]
            labels = np.asarray(y)
            if np.issubdtype(labels.dtype, np.integer) and labels.size and classes is not None:
                low, high = int(labels.min()), int(labels.max())
                if low < 0 or high >= classes:
                    raise ValueError(f"{what}: labels must lie in [0, {classes}) for a model with "
                                     f"{classes} outputs, got {low if low < 0 else high}")

    def _whole_graph(self, kwargs, *names):
        for name in ("batch_size",) + names:
            if kwargs.pop(name, None) not in (None, self.graph.num_vertices):
                raise ValueError(f"a GraphModel trains on the whole graph: leave {name} unset")
        return kwargs

    def _graph_batch(self, x, y=None, sample_weight=None):
        """(x, y, sample_weight) as a dataset of one element, the whole graph.

        The arrays become tensors once per fit/evaluate/predict call. Given
        arrays, Keras would instead slice a fresh batch out of them every
        epoch (a copy of all the features, the larger part of a Cora epoch).
        fit repeats the training set, one step per epoch, so that one
        iterator serves every epoch. The validation set stays finite: Keras
        makes it a new iterator every epoch, and a repeated dataset left
        behind each time slowed G-GCN's reddit-small epochs by a second.
        """
        if y is None and sample_weight is not None:
            raise ValueError("sample_weight (the vertex mask) needs labels")
        x = tf.convert_to_tensor(x)
        if x.dtype.is_floating and x.dtype != self.compute_dtype:
            x = tf.cast(x, self.compute_dtype)
        parts = [x]
        if y is not None:
            parts.append(tf.convert_to_tensor(y))
        if sample_weight is not None:  # a bool mask counts as 0 / 1
            parts.append(tf.cast(sample_weight, tf.float32))
        return tf.data.Dataset.from_tensors(tuple(parts))

    def fit(self, x=None, y=None, sample_weight=None, validation_data=None, **kwargs):
        kwargs = self._whole_graph(kwargs, "validation_batch_size")
        kwargs["shuffle"] = False
        if not isinstance(x, tf.data.Dataset):
            self._build_for(x)
            self._check(x, y, sample_weight, "fit")
            x, y, sample_weight = self._graph_batch(x, y, sample_weight).repeat(), None, None
            kwargs["steps_per_epoch"] = kwargs.get("steps_per_epoch") or 1
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            self._check(validation_data[0], *validation_data[1:3], what="fit (validation_data)")
            validation_data = self._graph_batch(*validation_data)
        return super().fit(x, y, sample_weight=sample_weight, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, sample_weight=None, **kwargs):
        kwargs = self._whole_graph(kwargs)
        # fit's per-epoch validation passes its own (already checked) dataset.
        if not isinstance(x, tf.data.Dataset) and not kwargs.get("_use_cached_eval_dataset"):
            self._build_for(x)
            self._check(x, y, sample_weight, "evaluate")
            x, y, sample_weight = self._graph_batch(x, y, sample_weight), None, None
        return super().evaluate(x, y, sample_weight=sample_weight, **kwargs)

    def predict(self, x, **kwargs):
        kwargs = self._whole_graph(kwargs)
        if not isinstance(x, tf.data.Dataset):
            self._build_for(x)
            self._check(x, what="predict")
            x = self._graph_batch(x)
        return super().predict(x, **kwargs)

    def _build_for(self, x):
        if not self.built and getattr(x, "shape", None) is not None and len(x.shape) >= 1:
            self.build(tuple(x.shape))

    def build(self, input_shape):
        # One forward pass on zeros builds every layer with its true shapes
        # (self.call, not self(): __call__ would come back here to build).
        self._input_shape = tuple(input_shape)
        self.call(tf.zeros(self._input_shape, dtype=self.compute_dtype))
        self.built = True

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        for layer in self.graph_layers:
            shape = tuple(layer.compute_output_shape(shape))
        return shape

    # ---- saving: layers in the config, the graph as an asset ----

    def get_config(self):
        return {
            "name": self.name,
            "layers": [keras.saving.serialize_keras_object(layer) for layer in self.graph_layers],
            "chunks": self.chunks,
            "schedule": self.schedule,
            "rewrites": list(self.rewrites),
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        layers = [keras.saving.deserialize_keras_object(c, custom_objects=custom_objects)
                  for c in config["layers"]]
        return cls(None, layers, chunks=config.get("chunks", 1), schedule=config.get("schedule", "ngra"),
                   rewrites=config.get("rewrites", True), name=config.get("name"))

    def get_build_config(self):
        return {"input_shape": self._input_shape} if self.built else {}

    def build_from_config(self, config):
        # The graph arrives with the assets, after this; build then.
        self._pending_input_shape = config.get("input_shape")

    def compile_from_config(self, config):
        if self._pending_input_shape is None:
            return super().compile_from_config(config)
        # Loading: Keras has marked the model built, but its layers get their
        # weights only in load_assets, once the graph has arrived. Keras's own
        # compile_from_config would build the optimizer now, with no slots,
        # and the saved optimizer state would then be skipped; load_assets
        # builds the optimizer after the layers instead.
        self.compile(**keras.saving.deserialize_keras_object(config))

    def save_assets(self, dir_path):
        g = self.graph
        arrays = {"src": g.src, "dst": g.dst, "num_vertices": np.int64(g.num_vertices)}
        if g.edge_data is not None:
            arrays["edge_data"] = g.edge_data
        np.savez(os.path.join(dir_path, _GRAPH_ASSET), **arrays)

    def load_assets(self, dir_path):
        with np.load(os.path.join(dir_path, _GRAPH_ASSET)) as stored:
            data = stored["edge_data"] if "edge_data" in stored else None
            # src, dst and edge_data were saved in the user's order; from_edges rebuilds the same edge order.
            self.graph = Graph.from_edges(stored["src"], stored["dst"], int(stored["num_vertices"]), data)
        if self._pending_input_shape is not None:
            self.build(tuple(self._pending_input_shape))
            # Compiled before it was built, the optimizer has no slots yet to load into.
            optimizer = getattr(self, "optimizer", None)
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.trainable_variables)
