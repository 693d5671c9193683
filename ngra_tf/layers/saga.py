"""SAGA-NN as a Keras layer: users write apply_edge and apply_vertex; the
system does Scatter and Gather (NGra §2).

    class MyConv(ngra_tf.SAGALayer):
        accumulator = "sum"
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 16))
        def apply_edge(self, edge):                 # one message per edge
            return edge.src * edge.data[:, None]
        def apply_vertex(self, vertex, accum):      # the new vertex state
            return tf.nn.relu(accum @ self.w)

A layer is called on vertex features with the graph it runs over:
`layer(x, graph=graph)`; ngra_tf.GraphModel does that for a whole model.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from ngra_tf.compiler.edges import NO_EDGE_DATA, check_dropout
from ngra_tf.compiler.program import LayerProgram, compile_layer, parse_rewrites
from ngra_tf.graph.partition import Partition
from ngra_tf.keras_compat import in_symbolic_build, training_context
from ngra_tf.ops import propagation
from ngra_tf.ops.softmax import edge_softmax
from ngra_tf.runtime.executor import Executor
from ngra_tf.runtime.residency import InMemory
from ngra_tf.runtime.stages import INPUT, Stage

# Accumulators: how Gather combines a vertex's messages. "a|b" applies each
# and concatenates the results along the last axis (our reading of NGra's
# "concatenation" accumulator).
ACCUMULATORS = propagation.REDUCES


def parse_accumulator(accumulator: str) -> tuple[str, ...]:
    """'sum|max' -> ('sum', 'max'), validated."""
    if not isinstance(accumulator, str) or not accumulator:
        raise ValueError(f"accumulator must be a string such as 'sum' or 'sum|max', got {accumulator!r}")
    parts = tuple(part.strip() for part in accumulator.split("|"))
    for part in parts:
        if part not in ACCUMULATORS:
            raise ValueError(f"accumulator {accumulator!r} has unknown part {part!r}; "
                             f"choose from {', '.join(ACCUMULATORS)}, joined with '|'")
    return parts


class EdgeView:
    """What apply_edge sees: one row per edge of a Graph, in stored (CSC) order.

    `src` and `dst` are the features of each edge's endpoints (scattered on
    first use), `data` is the graph's edge data (float data cast to the
    vertices' dtype), `ids` each edge's position in the user's order,
    `softmax(scores)` normalises per-edge scores over each destination's
    in-edges, and `dropout(values, rate, seed)` drops per edge while training
    (this view only runs the probe: it checks the arguments and draws nothing).
    """

    def __init__(self, graph, vertex):
        self.graph = graph
        self.adjacency = graph.adjacency  # what the ops run on: stored order, like stored_edge_data
        self._vertex = vertex
        self._src = self._dst = None

    @property
    def src(self):
        if self._src is None:
            with tf.name_scope("Scatter"):
                self._src = propagation.scatter(self.adjacency, self._vertex)
        return self._src

    @property
    def dst(self):
        if self._dst is None:
            with tf.name_scope("Scatter"):
                self._dst = propagation.scatter_side(self.adjacency, self._vertex, "dst")
        return self._dst

    @property
    def data(self):
        if self.graph.stored_edge_data is None:
            raise ValueError(NO_EDGE_DATA)
        data = self.graph.edge_data_tensor()
        # Float data (weights) comes in the vertices' dtype, so that
        # edge.src * edge.data works whatever precision the graph was built
        # with (numpy defaults to float64); integer data (types) is kept.
        if data.dtype.is_floating and data.dtype != self._vertex.dtype:
            data = tf.cast(data, self._vertex.dtype)
        return data

    @property
    def num_edges(self):
        return self.graph.num_edges

    @property
    def ids(self):
        """Each edge's position in the user's order (int64)."""
        return tf.constant(self.graph.edge_order, tf.int64)

    def softmax(self, scores):
        """softmax of per-edge scores over each destination's in-edges."""
        return edge_softmax(self.adjacency, scores)

    def dropout(self, values, rate, seed):
        """The values as they are (the probe measures shapes; compiled layers drop: TracedEdgeView.dropout),
        once the arguments are checked."""
        check_dropout(rate, seed)
        return values


def _whole(graph):
    """A Graph as a one-chunk partition (cached on the graph)."""
    if not hasattr(graph, "partition"):
        raise TypeError(f"graph must be an ngra_tf.Graph or a Partition, got {type(graph).__name__}")
    return graph.partition(1)


class SAGALayer(keras.layers.Layer):
    """A graph layer in SAGA-NN form: Scatter -> ApplyEdge -> Gather -> ApplyVertex.

    Subclasses override apply_edge and/or apply_vertex and set `accumulator`
    (a class attribute or the constructor argument). Parameters are ordinary
    Keras weights made in build().
    """

    accumulator = "sum"
    probe_edge_data = ((), "float32")  # (shape after the edge axis, dtype) of edge data before a graph is seen

    def __init__(self, accumulator: str | None = None, **kwargs):
        super().__init__(**kwargs)
        # The propagation ops are custom kernels with no XLA lowering: tell
        # Keras, so that jit_compile="auto" (XLA on GPU machines) stays off
        # and jit_compile=True falls back with a warning instead of failing.
        self.supports_jit = False
        if accumulator is not None:
            self.accumulator = accumulator
        self._reduces = parse_accumulator(self.accumulator)
        self._edge_signature = None  # (trailing shape, dtype) of the last graph's edge data
        self._programs = {}  # compiled programs by input signature and options
        self._probed = False
        self.program = None  # the last compiled program (explain() shows it)

    # ---- the user's two stages ----

    def apply_edge(self, edge: EdgeView):
        """The message of every edge, shaped [num_edges, ...]. Default: edge.src."""
        return edge.src

    def apply_vertex(self, vertex, accum):
        """The new state of every vertex from its input row and its accumulated messages."""
        return accum

    # ---- the system's part ----

    def build(self, input_shape):
        # Subclasses make their weights here; sublayers build on first call.
        super().build(input_shape)

    def call(self, inputs, graph=None, training=None, schedule="ngra", rewrites=True, ring=None):
        """The layer over `graph` (a Graph, or a Partition to run chunk by chunk).

        The first call for a given input signature traces apply_edge and
        apply_vertex and compiles them (ngra_tf.compiler); `schedule` orders
        the chunk steps and `rewrites` picks the rewrites (True: all).
        `ring` (ngra_tf.parallel.DeviceRing) spreads the chunk steps over
        several devices.
        """
        if graph is None:
            raise ValueError(f"{type(self).__name__} must be called with the graph it runs over: "
                             "layer(x, graph=graph), or inside an ngra_tf.GraphModel")
        partition = graph if isinstance(graph, Partition) else _whole(graph)
        if in_symbolic_build():  # Keras only wants the output's shape (a subclassed model's first call)
            shape = self.compute_output_shape(tuple(inputs.shape))
            return tf.zeros([tf.shape(inputs)[0]] + list(shape[1:]), self.compute_dtype)
        return self._executor(partition, schedule, rewrites, ring)(inputs, training)

    def _executor(self, partition, schedule, rewrites, ring):
        """The executor of this layer alone over `partition` (made once per partition and options)."""
        key = (id(partition), schedule, parse_rewrites(rewrites), id(ring))
        cache = self.__dict__.setdefault("_executors", {})
        if key not in cache:
            executor = Executor([Stage((INPUT,), None, self, self.name)], InMemory(partition), schedule, rewrites,
                                compute_dtype=self.compute_dtype, ring=ring)
            cache[key] = (partition, ring, executor)  # the partition and ring are kept so that their ids stay theirs
        return cache[key][2]

    def compiled(self, inputs, graph, rewrites=True, training=None) -> LayerProgram:
        """The compiled program for vertex rows like `inputs` over a graph like `graph` (cached)."""
        rows = inputs.shape[0]
        if rows is not None and rows != graph.num_vertices:
            raise ValueError(f"{self.name}: the input has {rows} rows but the graph has "
                             f"{graph.num_vertices} vertices")
        data = graph.stored_edge_data  # only its shape and dtype matter
        if data is not None:
            self._edge_signature = (data.shape[1:], data.dtype)
        vertex_spec = tf.TensorSpec([None] + list(inputs.shape[1:]), inputs.dtype)
        data_spec = None
        if data is not None:
            dtype = tf.as_dtype(data.dtype)
            data_spec = tf.TensorSpec([None] + list(data.shape[1:]), inputs.dtype if dtype.is_floating else dtype)
        key = (vertex_spec, data_spec, parse_rewrites(rewrites), bool(training))
        if key not in self._programs:
            if not self._probed:
                self.compute_output_shape(tuple(inputs.shape))  # builds sublayers, eagerly
            with training_context(self, training):
                self._programs[key] = compile_layer(self, vertex_spec, data_spec, rewrites, bool(training))
        self.program = self._programs[key]
        return self.program

    def explain(self) -> str:
        """What the compiler made of this layer: typing, hoisting, fusion, narrowing."""
        if self.program is None:
            return f"layer {self.name}: not compiled yet (call it, or build the model, first)"
        return "\n".join(self.program.describe())

    def _call_direct(self, inputs, graph):
        """The four stages over the whole graph, as written: no tracing, no chunks.

        Used on the probe graph to build sublayers and measure the output shape.
        """
        edge = EdgeView(graph, inputs)
        messages = self.apply_edge(edge)
        gathered = [propagation.gather(edge.adjacency, messages, reduce=r) for r in self._reduces]
        accum = gathered[0] if len(gathered) == 1 else tf.concat(gathered, axis=-1)
        return self.apply_vertex(inputs, accum)

    def compute_output_shape(self, input_shape):
        """Found by running the layer on a two-vertex probe graph.

        apply_edge and apply_vertex are arbitrary code, so the shape is
        measured rather than derived. The probe's edge data copies the shape
        and dtype of the last graph the layer ran on, or before any, the
        class's `probe_edge_data` (zeros: valid as a weight and as an edge type).
        """
        import numpy as np  # noqa: PLC0415  Only the probe needs numpy.

        from ngra_tf.graph.graph import Graph  # noqa: PLC0415  graph imports layers' users.

        shape, dtype = self._edge_signature or self.probe_edge_data
        probe = Graph.from_edges([0, 1, 0], [1, 0, 0], 2, edge_data=np.zeros((3,) + tuple(shape), dtype))
        with tf.init_scope():
            if not self.built:
                self.build(tuple(input_shape))
            out = self._call_direct(tf.zeros((2,) + tuple(input_shape[1:]), self.compute_dtype), probe)
        self._probed = True
        return (input_shape[0],) + tuple(out.shape[1:])

    def get_config(self):
        config = super().get_config()
        config["accumulator"] = self.accumulator
        return config
