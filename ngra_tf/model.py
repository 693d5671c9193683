"""GraphModel: a Keras model over one fixed graph, trained full-graph.

    x = keras.Input(shape=(1433,))
    h = GCN(16, activation="relu")(x)
    y = GCN(7)(keras.layers.Add()([keras.layers.Dropout(0.5)(h), keras.layers.Dense(16)(x)]))
    model = ngra_tf.GraphModel(graph, keras.Model(x, y),
                               chunks=4)  # optional: 4 x 4 edge chunks, NGra's schedule, all rewrites
    model.compile(optimizer="adam", loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    model.fit(features, labels, sample_weight=train_mask, epochs=200,
              validation_data=(features, labels, val_mask))

The model is a Keras functional model (one input, the vertex features; one
output, a row per vertex) of SAGA layers and per-vertex layers, wired any
way the functional API allows, or a list of layers applied in turn (the
sequential case).

Row i of features, labels and masks is vertex i. Features may be sparse (a
scipy.sparse matrix or a tf.SparseTensor, such as bag-of-words rows): in
memory they stay sparse up to the first matmul that reads them, which runs as
a sparse-dense product (a model built from a list of layers takes them as they
come; a functional model's keras.Input needs sparse=True). Every fit/evaluate/predict
step sees the whole graph as one batch (nothing is sliced or shuffled),
because a graph layer needs all of a vertex's neighbours; a tf.data.Dataset
whose elements are such whole-graph batches is accepted too. The mask is the
sample weight: vertices outside it do not count.
SAGA layers get the graph; other Keras layers (Dropout, Dense, Add, ...) act
per vertex. The graph is saved with the model (as a Keras asset), so
`keras.models.load_model` gives back a working model.

In place of a Graph, a model may take a chunk store (ngra_tf.store.open_store):
its features, labels and masks stay on disk and every step streams chunks and
intervals through a memory budget (the same executor, ngra_tf.runtime.executor,
over ngra_tf.runtime.residency.Streamed):

    store = ngra_tf.store.open_store("reddit.store")
    model = ngra_tf.GraphModel(store, [GCN(128, activation="relu"), GCN(41)], memory_budget="256MB")
    model.compile(...)
    model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"))

A saved store-backed model refers to its store by path; it does not copy it.

Given `devices` (a count, or TF device names), the graph layers' chunk steps
are spread over several devices, each owning some destination intervals,
and vertex rows travel between them as `placement` says (NGra's ring by
default; ngra_tf.parallel):

    model = ngra_tf.GraphModel(graph, layers, chunks=8, devices=4, placement="ring")

A store-backed model streams over the devices the same way, with
memory_budget per device.
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref

import keras
import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from ngra_tf.compiler import parse_rewrites
from ngra_tf.compiler.replay import sparse_zeros
from ngra_tf.graph.graph import Graph
from ngra_tf import parallel, tf_compat
from ngra_tf.layers.saga import SAGALayer
from ngra_tf.runtime import faults, resident
from ngra_tf.runtime.plan import budget, compile_layer
from ngra_tf.store import integrity, memory
from ngra_tf.runtime.executor import SPILL_POLICIES, TILE_BYTES, Executor
from ngra_tf.runtime.residency import InMemory, StoreShapes, Streamed, copies_to, input_spec
from ngra_tf.runtime.stages import sequential_network, stages_of
from ngra_tf.runtime.plan.tables import check_schedule
from ngra_tf.store.store import Store, VertexArray, open_store

_GRAPH_ASSET = "graph.npz"
_STORE_ASSET = "store.json"


def masked_loss(from_logits: bool = True):
    """Sparse categorical cross-entropy averaged over the masked vertices only.

    ("sum_over_batch_size" would divide by every vertex of the graph, shrinking
    the loss by the mask's density and skewing it against regularisers.)
    """
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits,
                                                      reduction="mean_with_sample_weight")


class _ReleaseFreeMemory(keras.callbacks.Callback):
    """After each epoch of a store-backed fit: freed heap pages go back to the OS (resident.release_free_memory)."""

    def on_epoch_end(self, epoch, logs=None):
        resident.release_free_memory()


@keras.saving.register_keras_serializable(package="ngra_tf")
class GraphModel(keras.Model):
    """A model of layers over `graph`; SAGA layers propagate, others act per vertex."""

    def __init__(self, graph: Graph | Store | None, layers, chunks: int | None = None, schedule: str = "ngra",
                 rewrites=True, memory_budget=None, spill: str = "spill", overlap: bool = True,
                 spill_dir=None, selective: float = 0.0, devices=None, placement="ring", topology=None,
                 **kwargs):
        super().__init__(**kwargs)
        if graph is not None and not isinstance(graph, (Graph, Store)):
            raise TypeError(f"graph must be an ngra_tf.Graph or a store (ngra_tf.store.open_store), "
                            f"got {type(graph).__name__}")
        store = graph if isinstance(graph, Store) else None
        if chunks is None:
            chunks = store.num_parts if store is not None else 1
        if isinstance(chunks, bool) or int(chunks) != chunks or chunks < 1:
            raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
        if store is not None and chunks != store.num_parts:
            raise ValueError(f"chunks={chunks}, but the store {store.path} is partitioned into {store.num_parts}: "
                             f"leave chunks unset, or convert the graph again with --chunks={chunks}")
        check_schedule(schedule)
        if spill not in SPILL_POLICIES:
            raise ValueError(f"spill must be one of {', '.join(SPILL_POLICIES)}; got {spill!r}")
        if memory_budget is not None and store is None:
            raise ValueError("memory_budget applies to a store-backed model: convert the graph into a store "
                             "(tools/partition_graph.py, or ngra_tf.store.write_store) and pass the store")
        self.chunks, self.schedule = int(chunks), schedule
        self.rewrites = sorted(parse_rewrites(rewrites))  # validated; a list keeps the config JSON-friendly
        self.memory_budget = None if memory_budget is None else memory.parse_size(memory_budget)
        if isinstance(selective, bool) or not 0.0 <= float(selective or 0.0) <= 1.0:
            raise ValueError(f"selective must be a fraction in [0, 1] (0: off), got {selective!r}")
        self.spill, self.overlap, self.spill_dir = spill, bool(overlap), spill_dir
        self.selective = float(selective or 0.0)
        self.graph = None if store is not None else graph
        self.store = store
        self.network, self.graph_layers = None, None
        if isinstance(layers, keras.Model):
            if isinstance(layers, GraphModel) or getattr(layers, "inputs", None) is None:
                raise TypeError(f"the model of a GraphModel is a Keras functional model (keras.Model(inputs, "
                                f"outputs)) or a list of layers; got {type(layers).__name__} {layers.name}, "
                                "which has no functional graph")
            self.network = layers
        else:
            self.graph_layers = list(layers)
            if not self.graph_layers:
                raise ValueError("a GraphModel needs at least one layer")
        self._chain = None  # graph_layers as a functional model (made by build, once the input shape is known)
        self._stages = None  # the network cut into the executor's stages (made once)
        if self.network is not None:
            self.stages()  # a model that cannot run fails now, naming the layer
        self._pending_input_shape = None
        self._sparse_input = False  # whether the layers were built for sparse features (set by fit and co)
        self._executor = None
        self._running_depth = 0  # nested fit / evaluate / predict calls (see _running)
        # Custom gradients TensorFlow registered while this model traced its steps (Keras's optimizer registers one
        # per train function): released with the model, or they would keep its traced graphs (tf_compat).
        self._gradients = []
        weakref.finalize(self, tf_compat.forget_gradients, self._gradients)
        self._features = "features"  # the store's vertex array a store-backed model reads as its input
        self.devices, self.placement, self.topology = devices, placement, topology
        self.ring = None
        if devices is not None:
            self.ring = parallel.DeviceRing(devices, placement, topology)
            if graph is not None:  # (a loaded model gets its graph later, with its assets)
                self.ring.check(self.partition)

    @property
    def partition(self):
        """The graph cut into chunks x chunks edge chunks (made once, then cached by the graph)."""
        if self.store is not None:
            return self.store.partition()
        if self.graph is None:
            raise ValueError("this GraphModel has no graph; pass one to the constructor")
        return self.graph.partition(self.chunks)

    @property
    def num_vertices(self) -> int:
        return (self.store if self.store is not None else self.graph).num_vertices

    def call(self, features, training=None):
        if self.store is not None and (not hasattr(features, "dtype") or features.dtype != tf.string):
            raise ValueError("a store-backed GraphModel runs through fit, evaluate and predict, given "
                             "store.array(name) as its features; it is not called on a tensor")
        return self.executor()(features, training)

    def executor(self) -> Executor:
        """The executor of this model's stages over its graph or store (made once; a store-backed model's
        plan is checked against its memory budget first)."""
        if self._executor is None:
            stages = self.stages()
            if self.store is None:
                self._executor = Executor(stages, InMemory(self.partition), self.schedule, self.rewrites,
                                          compute_dtype=self.compute_dtype, ring=self.ring)
            else:
                residency = Streamed(self.store, self._features, spill_dir=self.spill_dir, selective=self.selective)
                plan = self._budget(stages, self.store, residency.graph, residency.partition, residency.copies(None),
                                    cache=not self.selective)
                plan.check()  # a budget that is too small fails before any work
                residency.host = "disk" if self.spill_dir is not None else plan.host
                residency.cache_plan, residency.cache_offsets = plan.cache, plan.cache_offsets
                self._executor = Executor(stages, residency, self.schedule, self.rewrites, spill=self.spill,
                                          compute_dtype=self.compute_dtype, ring=self.ring, overlap=self.overlap)
                self._memory_plan = plan
        return self._executor

    def _budget(self, stages, shape, graph, partition, copies: bool, cache: bool) -> budget.Budget:
        """The working-set estimate of this model's training steps over a store, or a store's Shape
        (ngra_tf.runtime.plan.budget), from its layers compiled for training and the store's shape: nothing is
        traced to measure it."""

        def layer(index, spec):
            return compile_layer(stages[index].graph_layer, spec, graph, self.rewrites, True, partition, self.schedule,
                                 self.ring)

        weights = sum(int(np.prod(v.shape)) * tf.as_dtype(self.compute_dtype).size for v in self.trainable_weights)
        return budget.Budget(stages, shape, layer, input_spec(shape, self._features, self.compute_dtype),
                             spill=self.spill, schedule=self.schedule, tile_bytes=TILE_BYTES, weights_bytes=weights,
                             ring=self.ring, copies=copies, cache=cache, budget=self.memory_budget,
                             features=self._features)

    def memory_plan(self, shape=None) -> budget.Budget:
        """A store-backed model's working-set estimate and host tier (ngra_tf.runtime.plan.budget).

        Given `shape` (an ngra_tf.store.Shape: a store, or one not yet written), the same estimate of this
        model's training over it, for a model made without a graph: what the converter picks P by
        (tools/partition_graph.py), so that the store it writes trains under its budget.
        """
        if shape is not None:
            if self.store is not None or self.graph is not None:
                raise ValueError("memory_plan(shape) estimates a model made without a graph (GraphModel(None, "
                                 "layers)) over a store's shape")
            if not self.built:
                self._sparse_input = shape.is_sparse(self._features)
                self.build((shape.num_vertices,) + tuple(shape.vertex_spec(self._features)[0]))
            return self._budget(self.stages(), shape, StoreShapes(shape), shape.partition(), copies_to(None),
                                cache=False)
        if self.store is None:
            raise ValueError("memory_plan() describes a store-backed model's budget; this model holds its graph "
                             "in memory")
        self.executor()
        return self._memory_plan

    def explain(self, print_fn=print) -> str:
        """Prints (and returns) the plan: chunks, schedule, and per SAGA layer its
        typing, what was hoisted, whether the edge stage was fused (or why not)
        and whether it propagates at a narrower width."""
        if not self.built:
            raise ValueError("explain() describes a built model: call model.build(features.shape), "
                             "fit, evaluate or predict first")
        p = self.partition
        g = self.store if self.store is not None else self.graph
        nonempty = int((p.edge_counts > 0).sum())
        lines = [f"{self.name}: {g.num_vertices} vertices, {g.num_edges} edges, "
                 f"{p.num_parts}x{p.num_parts} chunks ({nonempty} non-empty, edge imbalance "
                 f"{p.balance()['after']:.2f}), schedule {self.schedule}"]
        if self.store is not None:
            lines += self.memory_plan().describe()
        lines += self.executor().describe()
        if self.ring is not None:
            lines.append(self.ring.describe(p.num_parts))
        lines += [stage.graph_layer.explain() for stage in self.stages() if stage.graph_layer is not None]
        text = "\n".join(lines)
        if print_fn is not None:
            print_fn(text)
        return text

    # ---- full-graph training ----

    def _check(self, x, y=None, sample_weight=None, what="fit"):
        n = self.num_vertices
        rows = getattr(x, "shape", None)
        if rows is None or len(rows) == 0 or rows[0] != n:
            raise ValueError(f"{what}: features must have one row per vertex ({n}), got shape {rows}")
        for name, value in (("labels", y), ("sample_weight (the vertex mask)", sample_weight)):
            if value is not None and np.shape(value)[0] != n:
                raise ValueError(f"{what}: {name} must have one entry per vertex ({n}), "
                                 f"got shape {np.shape(value)}")
        if y is not None and self.built:
            self._check_labels(np.asarray(y), what)

    def _whole_graph(self, kwargs, *names):
        for name in ("batch_size",) + names:
            if kwargs.pop(name, None) not in (None, self.num_vertices):
                raise ValueError(f"a GraphModel trains on the whole graph: leave {name} unset")
        return kwargs

    def _graph_batch(self, x, y=None, sample_weight=None, converted=None):
        """(x, y, sample_weight) as a dataset of one element, the whole graph.

        The arrays become tensors once per fit/evaluate/predict call. Given
        arrays, Keras would instead slice a fresh batch out of them every
        epoch (a copy of all the features, the larger part of a Cora epoch).
        fit repeats the training set, one step per epoch, so that one
        iterator serves every epoch. The validation set stays finite: Keras
        makes it a new iterator every epoch, and a repeated dataset left
        behind each time slowed G-GCN's reddit-small epochs by a second.
        `converted` ({id(array): tensor}) makes fit's features and validation
        features one tensor when they are one array.
        """
        if y is None and sample_weight is not None:
            raise ValueError("sample_weight (the vertex mask) needs labels")
        converted = {} if converted is None else converted
        if id(x) not in converted:
            tensor = _features_tensor(x)
            if tensor.dtype.is_floating and tensor.dtype != self.compute_dtype:
                tensor = tf.cast(tensor, self.compute_dtype)
            converted[id(x)] = tensor
        parts = [converted[id(x)]]
        if y is not None:
            parts.append(tf.convert_to_tensor(y))
        if sample_weight is not None:  # a bool mask counts as 0 / 1
            parts.append(tf.cast(sample_weight, tf.float32))
        return tf.data.Dataset.from_tensors(tuple(parts))

    def fit(self, x=None, y=None, sample_weight=None, validation_data=None, **kwargs):
        kwargs = self._whole_graph(kwargs, "validation_batch_size")
        kwargs["shuffle"] = False
        converted = {}  # (the features and the validation features as one tensor when they are one array)
        if self.store is not None:
            x, y, sample_weight = self._stream_batch(x, y, sample_weight, "fit").repeat(), None, None
            kwargs["steps_per_epoch"] = kwargs.get("steps_per_epoch") or 1
            if validation_data is not None:
                validation_data = self._stream_batch(*validation_data, what="fit (validation_data)")
            # glibc keeps freed heap pages resident, so a long run's RSS would drift up (tools/soak.py).
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), _ReleaseFreeMemory()]
        elif not isinstance(x, tf.data.Dataset):
            self._build_for(x)
            self._check(x, y, sample_weight, "fit")
            x, y, sample_weight = self._graph_batch(x, y, sample_weight, converted).repeat(), None, None
            kwargs["steps_per_epoch"] = kwargs.get("steps_per_epoch") or 1
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            self._check(validation_data[0], *validation_data[1:3], what="fit (validation_data)")
            validation_data = self._graph_batch(*validation_data, converted=converted)
        with self._running():
            return super().fit(x, y, sample_weight=sample_weight, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, sample_weight=None, **kwargs):
        kwargs = self._whole_graph(kwargs)
        # A dataset passes through: fit's per-epoch validation hands back the one it made.
        if not isinstance(x, tf.data.Dataset):
            if self.store is not None:
                x, y, sample_weight = self._stream_batch(x, y, sample_weight, "evaluate"), None, None
            else:
                self._build_for(x)
                self._check(x, y, sample_weight, "evaluate")
                x, y, sample_weight = self._graph_batch(x, y, sample_weight), None, None
        with self._running():
            return super().evaluate(x, y, sample_weight=sample_weight, **kwargs)

    def predict(self, x, **kwargs):
        kwargs = self._whole_graph(kwargs)
        if self.store is not None:
            x = self._stream_batch(x, what="predict")
        elif not isinstance(x, tf.data.Dataset):
            self._build_for(x)
            self._check(x, what="predict")
            x = self._graph_batch(x)
        with self._running():
            return super().predict(x, **kwargs)

    @contextlib.contextmanager
    def _running(self):
        """Around fit / evaluate / predict (the outermost call: fit's validation runs evaluate inside it): the
        gradients registered while they trace are this model's (released with it); a store-backed model's spill
        files go when they return or fail. A failed step that names a spill or store file is raised as a
        faults.TrainingFault, which says what happened in one line."""
        outermost = not self._running_depth
        streamed = self.store is not None and self._executor is not None
        if outermost and streamed:
            self._executor.open()
        self._running_depth += 1
        try:
            with tf_compat.gradients_registered(self._gradients) if outermost else contextlib.nullcontext():
                yield
        except tf.errors.OpError as error:
            fault = self._executor.fault(error) if streamed else None
            if fault is None:
                raise
            raise fault from error
        finally:
            self._running_depth -= 1
            if outermost and streamed:
                self._executor.close()

    def _build_for(self, x):
        if not self.built and getattr(x, "shape", None) is not None and len(x.shape) >= 1:
            self._sparse_input = _is_sparse(x)
            self.build(tuple(x.shape))

    def _network(self) -> keras.Model:
        """The model's layers as a functional model: the user's, or graph_layers chained (once built)."""
        if self.network is not None:
            return self.network
        if self._chain is None:
            raise ValueError("this GraphModel is not built yet: call model.build(features.shape), fit, evaluate "
                             "or predict first")
        return self._chain

    def stages(self) -> list:
        """The model cut into the executor's stages (ngra_tf.runtime.stages), made once."""
        if self._stages is None:
            stages = stages_of(self._network(), lambda layer: isinstance(layer, SAGALayer), where=self.name)
            object.__setattr__(self, "_stages", stages)  # not tracked: their layers are the model's already
        return self._stages

    def build(self, input_shape):
        self._input_shape = tuple(input_shape)
        if self.network is not None:
            expected = tuple(self.network.inputs[0].shape[1:])
            if expected != self._input_shape[1:]:
                raise ValueError(f"{self.name}: the features have rows of shape {self._input_shape[1:]}, but the "
                                 f"model's input {self.network.inputs[0].name} takes rows of shape {expected}")
        elif self._chain is None:
            if self.store is not None:  # (a store's CSR features come as tf.SparseTensor rows)
                self._sparse_input = self.store.is_sparse(self._features)
            # Called on symbolic rows, the layers build with their true shapes (SAGA layers measure theirs on a
            # probe graph); a store's features are never read whole.
            object.__setattr__(self, "_chain", sequential_network(self.graph_layers, self._input_shape,
                                                                   self.compute_dtype, sparse=self._sparse_input))
            self.stages()
        if self.store is None and self.graph is not None:
            # One forward pass on zeros builds every layer with its true shapes
            # (self.call, not self(): __call__ would come back here to build).
            self.call(sparse_zeros(self._input_shape, self.compute_dtype) if self._sparse_input else
                      tf.zeros(self._input_shape, dtype=self.compute_dtype))
        self.built = True

    # ---- store-backed models: streamed steps ----

    def _stream_batch(self, x=None, y=None, sample_weight=None, what="fit"):
        """A one-element dataset (features name, labels, mask): labels and mask in the user's vertex order."""
        store = self.store
        if x is None:
            x = store.array("features")
        if not isinstance(x, VertexArray) or x.store is not store:
            raise ValueError(f"{what}: a store-backed model reads its features from its store: pass "
                             f"store.array(name) of {store.path}, got {type(x).__name__}")
        if y is None and sample_weight is not None:
            raise ValueError("sample_weight (the vertex mask) needs labels")
        if x.name != self._features:
            self._features, self._executor = x.name, None
        if self.network is not None and self.network.inputs[0].sparse != x.sparse:
            held, wanted = ("CSR", "keras.Input(..., sparse=True)") if x.sparse else ("dense", "a dense keras.Input")
            raise ValueError(f"{what}: {store.path} holds {x.name!r} as {held} rows, but the model's input "
                             f"{self.network.inputs[0].name} takes {'sparse' if not x.sparse else 'dense'} ones: "
                             f"build it with {wanted} (recipes.build_model(..., sparse={x.sparse}))")
        if not self.built:
            self.build(x.shape)
        self.executor()  # plans the steps now: a budget that is too small fails before any work
        parts = [tf.constant([x.name])]
        for name, value in (("labels", y), ("sample_weight (the vertex mask)", sample_weight)):
            if value is None:
                continue
            if isinstance(value, VertexArray):
                rows = value.read()
            else:
                rows = np.asarray(value)
                if rows.shape[:1] != (store.num_vertices,):
                    raise ValueError(f"{what}: {name} must have one entry per vertex ({store.num_vertices}), "
                                     f"got shape {rows.shape}")
            parts.append(tf.cast(rows, tf.float32) if "mask" in name else tf.convert_to_tensor(rows))
        if y is not None:
            self._check_labels(parts[1].numpy(), what)
        return tf.data.Dataset.from_tensors(tuple(parts))

    def _check_labels(self, labels, what):
        """Integer labels must name one of the model's outputs."""
        classes = self.compute_output_shape(self._input_shape)[-1]
        if np.issubdtype(labels.dtype, np.integer) and labels.size and classes is not None:
            low, high = int(labels.min()), int(labels.max())
            if low < 0 or high >= classes:
                raise ValueError(f"{what}: labels must lie in [0, {classes}) for a model with "
                                 f"{classes} outputs, got {low if low < 0 else high}")


    def compute_output_shape(self, input_shape):
        output = self._network().outputs[0] if self.network is not None or self._chain is not None else None
        if output is not None:
            return (tuple(input_shape)[0],) + tuple(output.shape[1:])
        shape = tuple(input_shape)
        for layer in self.graph_layers:
            shape = tuple(layer.compute_output_shape(shape))
        return shape

    # ---- saving: layers in the config, the graph as an asset ----

    def get_config(self):
        return {
            "name": self.name,
            **({"network": keras.saving.serialize_keras_object(self.network)} if self.network is not None else
               {"layers": [keras.saving.serialize_keras_object(layer) for layer in self.graph_layers]}),
            "chunks": self.chunks,
            "schedule": self.schedule,
            "rewrites": list(self.rewrites),
            # A store-backed model refers to its store (by absolute path); it does not copy it.
            "store": None if self.store is None else self.store.path,
            "memory_budget": self.memory_budget,
            "spill": self.spill,
            "overlap": self.overlap,
            "spill_dir": None if self.spill_dir is None else os.fspath(self.spill_dir),
            "selective": self.selective,
            "devices": self.devices,
            "placement": self.placement if isinstance(self.placement, str) else self.placement.kind,
            "topology": None if self.topology is None or isinstance(self.topology, str) else
            self.ring.topology.to_json(),
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if "network" in config:
            layers = keras.saving.deserialize_keras_object(config["network"], custom_objects=custom_objects)
        else:
            layers = [keras.saving.deserialize_keras_object(c, custom_objects=custom_objects)
                      for c in config["layers"]]
        store = None
        if config.get("store") is not None:
            try:
                store = open_store(config["store"])
            except ValueError as error:
                raise ValueError(f"this model was saved over the store {config['store']}, which cannot be opened "
                                 f"now: {error}") from None
        return cls(store, layers, chunks=config.get("chunks", 1), schedule=config.get("schedule", "ngra"),
                   rewrites=config.get("rewrites", True), memory_budget=config.get("memory_budget"),
                   spill=config.get("spill", "spill"), overlap=config.get("overlap", True),
                   spill_dir=config.get("spill_dir"), selective=config.get("selective", 0.0),
                   devices=config.get("devices"), placement=config.get("placement", "ring"),
                   topology=_topology(config.get("topology")), name=config.get("name"))

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
        if self.store is not None:  # the store itself stays where it is; record what it was, to check on load
            store = self.store
            integrity.write_json_atomically(os.path.join(dir_path, _STORE_ASSET), {
                "path": store.path, "num_vertices": store.num_vertices, "num_edges": store.num_edges,
                "num_parts": store.num_parts})
            return
        g = self.graph
        arrays = {"src": g.src, "dst": g.dst, "num_vertices": np.int64(g.num_vertices)}
        if g.edge_data is not None:
            arrays["edge_data"] = g.edge_data
        np.savez(os.path.join(dir_path, _GRAPH_ASSET), **arrays)

    def load_assets(self, dir_path):
        if self.store is None:
            self._load_graph(dir_path)
        else:
            with open(os.path.join(dir_path, _STORE_ASSET)) as stream:
                saved = json.load(stream)
            found = {key: getattr(self.store, key) for key in ("num_vertices", "num_edges", "num_parts")}
            if any(saved[key] != value for key, value in found.items()):
                raise ValueError(f"the store at {self.store.path} is not the one this model was saved with: "
                                 f"it has {found}, the model was trained over {saved}")
        if self._pending_input_shape is not None:
            self.build(tuple(self._pending_input_shape))
            # Compiled before it was built, the optimizer has no slots yet to load into.
            optimizer = getattr(self, "optimizer", None)
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.trainable_variables)

    def _load_graph(self, dir_path):
        with np.load(os.path.join(dir_path, _GRAPH_ASSET)) as stored:
            data = stored["edge_data"] if "edge_data" in stored else None
            # src, dst and edge_data were saved in the user's order; from_edges rebuilds the same edge order.
            self.graph = Graph.from_edges(stored["src"], stored["dst"], int(stored["num_vertices"]), data)


def _is_sparse(x) -> bool:
    return isinstance(x, tf.SparseTensor) or sp.issparse(x)


def _features_tensor(x):
    """Features as a tensor: a scipy.sparse matrix as a tf.SparseTensor (its entries in row-major order)."""
    if sp.issparse(x):
        coo = sp.coo_matrix(x)
        coo.sum_duplicates()  # (also sorts the entries row by row)
        return tf.SparseTensor(np.stack([coo.row, coo.col], axis=1).astype(np.int64), coo.data, coo.shape)
    return x if isinstance(x, tf.SparseTensor) else tf.convert_to_tensor(x)


def _topology(saved):
    """A saved topology: a path, or a Topology's JSON."""
    return parallel.Topology.from_json(saved) if isinstance(saved, dict) else saved
