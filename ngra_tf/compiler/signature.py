"""Signatures: when two layers (or two prologues) compute the same function of their own weights.

The runtime traces a stage's loops once per *signature* and calls them with
each layer's variables as arguments, so what is compiled grows with the
number of distinct signatures, not with depth. Two traced graphs have the
same signature when they are the same graph up to names: the same ops in
the same order with the same attributes and wiring, their captured
variables at the same positions of their owners' variable lists (so a
caller's variables bind positionally), and equal captured constants. Any
other capture (a tensor of another graph, a resource that is not one of the
layer's variables) makes the signature unique to its owner, which is always
correct and merely not shared.
"""

from __future__ import annotations

import hashlib

import numpy as np
import tensorflow as tf


def graph_signature(graph, external: dict, variables, inputs=()) -> str:
    """A digest of `graph` up to names (see the module doc).

    external: {captured placeholder name: the outer tensor}; variables: the
    owner's variables (Keras or tf.Variables), in the order a caller passes
    them; inputs: the graph's input placeholders, in order.
    """
    position = {}
    for k, op in enumerate(graph.get_operations()):
        position[op.name] = k
    variable_at = {}
    for k, variable in enumerate(variables):
        handle = getattr(getattr(variable, "value", variable), "handle", None)
        if handle is not None:
            variable_at[id(handle)] = k
    input_at = {t.name: k for k, t in enumerate(inputs)}
    digest = hashlib.sha256()
    for op in graph.get_operations():
        attrs = sorted((key, value.SerializeToString(deterministic=True))
                       for key, value in op.node_def.attr.items() if not key.startswith("_"))
        wiring = [(position[t.op.name], t.value_index) for t in op.inputs]
        controls = sorted(position[c.name] for c in op.control_inputs)
        role = ()
        if op.type == "Placeholder":
            name = op.outputs[0].name
            role = ("input", input_at[name]) if name in input_at else \
                ("capture", _capture(external.get(name), variable_at, op))
        digest.update(repr((op.type, attrs, wiring, controls, role)).encode())
    return digest.hexdigest()


def _capture(outer, variable_at, op):
    """What a captured placeholder stands for, as far as sharing goes."""
    if outer is None:
        return ("unknown", op.name, id(op.graph))
    if id(outer) in variable_at:
        return ("variable", variable_at[id(outer)])
    if outer.dtype != tf.resource and hasattr(outer, "numpy"):
        try:
            value = np.asarray(outer.numpy())
        except (AttributeError, NotImplementedError, TypeError, ValueError):  # a symbolic tensor
            return ("own", id(outer))
        return ("constant", str(value.dtype), value.shape, hashlib.sha256(value.tobytes()).hexdigest())
    return ("own", id(outer))  # anything else: this owner's alone


def variable_specs(variables) -> tuple:
    """The shapes, dtypes and trainability of variables, in order (part of a signature)."""
    found = []
    for variable in variables:
        inner = getattr(variable, "value", variable)
        found.append((tuple(inner.shape.as_list()), inner.dtype.name, bool(getattr(variable, "trainable", True)),
                      "seed_generator_state" in variable.name))
    return tuple(found)


__all__ = ["graph_signature", "program_signature", "variable_specs"]


def program_signature(program, variables) -> str:
    """A compiled layer program's signature: its two traced stages, reducers and rewrites, and its layer's
    variables (whose positions its captures refer to)."""
    parts = [graph_signature(trace.graph, trace.external, variables, list(trace.inputs.values()))
             for trace in (program.edge, program.vertex)]
    parts += [repr(tuple(program.reduces)), repr(sorted(program.rewrites)), repr(variable_specs(variables))]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()
