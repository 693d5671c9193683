"""Compiled once per signature: the loops of every layer of the same signature are one traced function.

A model's stages run loops (chunk steps, row tiles, columns) whose bodies
read a layer's weights, its rows and its kept values. Traced per layer, what
is compiled grows with depth (a 16-layer model's first epoch was 8x a
2-layer one's). Here each loop is a tf.function traced once per *signature*
(the compiled program, its widths, the schedule: ngra_tf.compiler.signature)
and called with each layer's own variables, block states and spill-file
paths as arguments: the first caller's Python objects describe the loop, and
nothing of that caller is captured (a traced function that captured a
variable would apply one layer's weights to another's rows, so that is
checked when it is traced).

The functions are not inlined into their callers (`_noinline`): a call is
one op, and TensorFlow instantiates the body once, whatever the number of
call sites. Their ops are named under the signature's readable name (say
"GCN_602_64_forward/ForwardChunkSteps/FusedGather/..."), which is what a
profiler trace shows: every layer of that signature runs those ops.
"""

from __future__ import annotations

import tensorflow as tf


class SharedFunctions:
    """tf.functions by signature key, traced by their first caller (see the module doc)."""

    def __init__(self):
        self._functions = {}  # key -> (tf.function, its one trace, where its inputs and outputs had TensorArrays)

    def __len__(self):
        return len(self._functions)

    def keys(self):
        return list(self._functions)

    def graph(self, key) -> tf.Graph:
        """The graph `key`'s function was traced to: the ops every call of it runs."""
        return self._functions[key][1].graph

    def __call__(self, key, body, args, name="Shared"):
        """body(args) through the function of `key` (traced from `body` the first time the key is seen, its ops
        named under `name`).

        TensorArrays cross the call as their flow tensors, both ways, and strings as string tensors (either
        would retrace the function on every call).
        """
        in_dtypes = _array_dtypes(args)
        entry = self._functions.get(key)
        if entry is None:
            out_dtypes, traces = {}, []

            def flat(flat_args):
                traces.append(key)
                if len(traces) > 1:  # (every argument is a tensor of fixed spec: a retrace is a bug)
                    raise AssertionError(f"the shared loop {name} was traced again for other arguments")
                with tf.name_scope(name):
                    out = body(_arrays(in_dtypes, flat_args))
                out_dtypes["out"] = _array_dtypes(out)
                return _flows(out)

            flat.__name__ = name

            function = tf.function(flat, autograph=False, experimental_attributes={"_noinline": True})
            concrete = function.get_concrete_function(_flows(args))
            captured = [t for t in concrete.captured_inputs if t.dtype == tf.resource]
            if captured:
                raise AssertionError(f"the loop {key[0]} captured {len(captured)} resource(s) of its first caller; "
                                     "a shared loop must take every variable as an argument")
            entry = self._functions[key] = (function, concrete, in_dtypes, out_dtypes)
        function, _, traced_dtypes, out_dtypes = entry
        if traced_dtypes != in_dtypes:
            raise AssertionError(f"the loop {key[0]} was called with arguments unlike those it was traced with")
        return _arrays(out_dtypes["out"], function(tf.nest.map_structure(_opaque, _flows(args))))


def _array_dtypes(structure):
    return tf.nest.map_structure(lambda v: v.dtype if isinstance(v, tf.TensorArray) else None, structure)


def _flows(structure):
    """TensorArrays as their flows, and strings (file names) as tensors: a Python value in the arguments would
    retrace the function for every value."""
    return tf.nest.map_structure(lambda v: v.flow if isinstance(v, tf.TensorArray) else
                                 tf.constant(v, tf.string) if isinstance(v, str) else v, structure)


def _opaque(value):
    """A constant argument as a value Grappler does not fold: given a constant, its function optimizer
    specialises the function for that call site (a copy of the body per layer: a 16-layer residual GCN's
    steps peaked 245 MiB higher)."""
    if isinstance(value, tf.Tensor) and not tf.executing_eagerly() and value.op.type == "Const":
        return tf.raw_ops.PlaceholderWithDefault(input=value, shape=value.shape)
    return value


def _arrays(dtypes, structure):
    """TensorArrays again where `dtypes` has a dtype (their flows in `structure`)."""
    return tf.nest.map_structure(
        lambda dtype, v: v if dtype is None else tf.TensorArray(dtype, flow=v, infer_shape=False), dtypes, structure)


__all__ = ["SharedFunctions"]
