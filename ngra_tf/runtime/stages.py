"""Stages: a model's layers grouped as the executor runs them.

A stage is the per-vertex layers (its prologue: Dropout, Dense, ...) that lead
to one graph layer, or the per-vertex layers after the last graph layer.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class Stage:
    """Per-vertex layers (the prologue) and the graph layer they feed (None after the last one)."""

    prologue: list
    graph_layer: object = None

    @property
    def name(self):
        """Its graph layer's name (the last per-vertex layer's after the last graph layer): a name scope."""
        return self.layers[-1].name

    @property
    def layers(self):
        return list(self.prologue) + ([self.graph_layer] if self.graph_layer is not None else [])

    def weights(self):
        seen, found = set(), []
        for layer in self.layers:
            for w in layer.trainable_variables:
                if id(variable_of(w)) not in seen:
                    seen.add(id(variable_of(w)))
                    found.append(w)
        return found

    def seeds(self):
        """The seed-generator states of its prologue's layers (dropout), as tf.Variables."""
        return [variable_of(v) for layer in self.prologue for v in layer.variables if "seed_generator_state" in v.path]

    def prologue_of(self, x, training):
        for layer in self.prologue:
            x = layer(x, training=training)
        return x


def stages_of(layers, is_graph_layer) -> list:
    """Layers as stages: each graph layer with the per-vertex layers before it, and a last stage of the
    per-vertex layers after the last graph layer (if any)."""
    stages, prologue = [], []
    for layer in layers:
        if is_graph_layer(layer):
            stages.append(Stage(prologue, layer))
            prologue = []
        else:
            prologue.append(layer)
    if prologue:
        stages.append(Stage(prologue))
    return stages


def variable_of(v):
    """The tf.Variable behind a Keras variable (or the variable itself)."""
    inner = getattr(v, "value", None)
    return inner if isinstance(inner, tf.Variable) else v


__all__ = ["Stage", "stages_of", "variable_of"]
