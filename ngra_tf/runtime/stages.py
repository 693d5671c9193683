"""Stages: a model's graph of layers cut where the executor keeps rows.

The executor keeps (in memory, or in the host tier from a store) the rows of
a few values of a model: its input, every graph layer's output, a per-vertex
value read by more than one layer, and the model's output. Everything else
is per-vertex work between kept values, and runs fused into the step that
reads it. A *stage* computes one kept value:

    inputs      the kept values it reads (INPUT, or an earlier stage's index)
    prologue    the per-vertex layers from those to its graph layer's input (or to its output when it has no
                graph layer): a Keras functional model over `inputs`, or None when the graph layer reads its one
                input as is
    graph_layer the SAGA layer it ends with (None: the stage is per-vertex only)

A model is any Keras functional model with one input and one output (the
sequential case is a list of layers, `sequential_network`); `stages_of`
cuts it into stages in topological order, the last one computing the output.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from ngra_tf.compiler.kernels import tf_variable as variable_of
from ngra_tf.compiler.signature import graph_signature
from ngra_tf.keras_compat import functional_calls

INPUT = "input"  # the key of the model's input rows


@dataclasses.dataclass
class Stage:
    """Per-vertex layers (the prologue) over kept values, and the graph layer they feed (see the module doc)."""

    inputs: tuple
    prologue: object = None
    graph_layer: object = None
    name: str = ""

    @property
    def layers(self):
        return self.prologue_layers + ([self.graph_layer] if self.graph_layer is not None else [])

    @property
    def prologue_layers(self):
        if self.prologue is None:
            return []
        return [op for op in self.prologue.operations if not isinstance(op, keras.layers.InputLayer)]

    def weights(self):
        return _unique(w for layer in self.layers for w in layer.trainable_variables)

    def prologue_weights(self):
        return _unique(w for layer in self.prologue_layers for w in layer.trainable_variables)

    def seeds(self):
        """The seed-generator states of its prologue's layers (dropout), as tf.Variables."""
        return [variable_of(v) for layer in self.prologue_layers for v in layer.variables
                if "seed_generator_state" in v.path]

    def row_shape(self, input_row_shape):
        """The shape of a row its prologue makes (its graph layer's input), given its first input's."""
        if self.prologue is None:
            return tuple(input_row_shape)
        return tuple(self.prologue.outputs[0].shape[1:])

    def prologue_of(self, xs, training):
        """The prologue on rows of its inputs (a list, one tensor per input, in `inputs`' order)."""
        if self.prologue is None:
            return xs[0]
        y = self.prologue(list(xs) if len(xs) > 1 else xs[0], training=training)
        # Keras's functional call, traced, loses the row count of what it computes from sparse rows (and a
        # sparse output's whole shape): the traced stages would see rows unlike those of their other callers.
        y.set_shape([xs[0].shape[0]] + list(self.prologue.outputs[0].shape[1:]))
        return y

    def prologue_signature(self, specs, training) -> str:
        """The prologue's signature on inputs like `specs` (ngra_tf.compiler.signature): stages whose prologues
        compute the same function of their own variables share the loops that run them."""
        if self.prologue is None:
            return "none"
        key = (tuple((type(s).__name__, tuple(s.shape.as_list()), s.dtype.name) for s in specs), bool(training))
        cache = self.__dict__.setdefault("_signatures", {})
        if key not in cache:
            prologue = self.prologue
            traced = tf.function(lambda *xs: prologue(list(xs) if len(xs) > 1 else xs[0], training=training),
                                 autograph=False).get_concrete_function(*specs)
            graph = traced.graph
            external = {internal.name: outer for outer, internal in graph.captures}
            inputs = graph.inputs[:len(tf.nest.flatten(specs, expand_composites=True))]  # (a sparse spec: three)
            cache[key] = graph_signature(graph, external, prologue.variables, inputs)
        return cache[key]

    def without_prologue(self, key):
        """The stage's graph layer alone, reading the kept value `key` (what its prologue made)."""
        return dataclasses.replace(self, inputs=(key,), prologue=None)


def sequential_network(layers, input_shape, dtype, sparse=False) -> keras.Model:
    """A list of layers as a functional model: each layer reads the previous one's output (sparse: the input
    rows are a tf.SparseTensor)."""
    x = keras.Input(shape=tuple(input_shape[1:]), dtype=dtype, sparse=sparse)
    y = x
    for layer in layers:
        y = layer(y)
    return keras.Model(x, y)


def stages_of(network, is_graph_layer, where="GraphModel") -> list:
    """The stages of a Keras functional model (see the module doc), in an order that runs."""
    inputs, outputs = list(network.inputs), list(network.outputs)
    if len(inputs) != 1 or len(outputs) != 1:
        raise ValueError(f"{where}: a graph model has one input (the vertex features) and one output (a row per "
                         f"vertex); {network.name} has {len(inputs)} inputs and {len(outputs)} outputs")
    calls = functional_calls(network)
    producer, readers, called = {}, {}, set()
    for op, op_inputs, op_outputs in calls:
        if id(op) in called:
            raise ValueError(f"{where}: the layer {op.name} is called more than once; make one layer per call, "
                             "the executor runs each layer once")
        called.add(id(op))
        if len(op_outputs) != 1:
            raise ValueError(f"{where}: the layer {op.name} returns {len(op_outputs)} tensors; a layer of a graph "
                             "model returns one row per vertex")
        producer[id(op_outputs[0])] = (op, op_inputs)
        for tensor in op_inputs:
            readers[id(tensor)] = readers.get(id(tensor), 0) + 1
        if isinstance(op, keras.Model) and any(is_graph_layer(inner) for inner in op._flatten_layers()):
            raise ValueError(f"{where}: the nested model {op.name} holds graph layers; call its layers in the "
                             "outer model instead, so that the executor sees every graph layer")
    output = outputs[0]
    if id(output) not in producer:
        raise ValueError(f"{where}: the model's output is its input; it needs at least one layer")
    kept = {id(inputs[0]), id(output)}
    for op, _, (out,) in calls:
        if is_graph_layer(op) or readers.get(id(out), 0) > 1:
            kept.add(id(out))
    keys = {id(inputs[0]): INPUT}
    stages = []
    for op, op_inputs, (out,) in calls:
        if id(out) not in kept:
            continue
        graph_layer = op if is_graph_layer(op) else None
        target = op_inputs[0] if graph_layer is not None else out
        if graph_layer is not None and id(target) in kept:
            stage_inputs, prologue = [target], None
        else:
            stage_inputs = _frontier(target, producer, kept)
            prologue = keras.Model(stage_inputs if len(stage_inputs) > 1 else stage_inputs[0], target,
                                   name=f"{op.name}_prologue")
        stages.append(Stage(tuple(keys[id(t)] for t in stage_inputs), prologue, graph_layer, op.name))
        keys[id(out)] = len(stages) - 1
    return stages


def _frontier(target, producer, kept):
    """The kept tensors that `target` is computed from by per-vertex layers alone, in the order first met
    (depth first, arguments left to right)."""
    found, seen = [], set()

    def visit(tensor):
        for source in producer[id(tensor)][1]:
            if id(source) in seen:
                continue
            seen.add(id(source))
            if id(source) in kept or id(source) not in producer:
                found.append(source)
            else:
                visit(source)

    visit(target)
    return found


def _unique(variables):
    seen, found = set(), []
    for w in variables:
        if id(variable_of(w)) not in seen:
            seen.add(id(variable_of(w)))
            found.append(w)
    return found


__all__ = ["INPUT", "Stage", "sequential_network", "stages_of", "variable_of"]
