"""The ops of a traced graph, with those of the functions it runs (loop bodies, branches), for tests that
look at what was compiled."""

import tensorflow as tf

_FUNCTION_ATTRS = ("body", "cond", "then_branch", "else_branch", "branches", "f")


def graph_ops(graph):
    """Every op of `graph` and, depth first, of the functions its ops call."""
    found, seen = [], set()

    def walk(g):
        for op in g.get_operations():
            found.append(op)
            for attr in _FUNCTION_ATTRS:
                try:
                    value = op.get_attr(attr)
                except ValueError:
                    continue
                for name in [f.name for f in value] if isinstance(value, list) else [value.name]:
                    function = graph._get_function(name) or g._get_function(name)
                    if name not in seen and function is not None:
                        seen.add(name)
                        walk(function.graph)

    walk(graph)
    return found


def traced_ops(fn, *args):
    """graph_ops of fn traced as a tf.function for args (tensors or TensorSpecs)."""
    return graph_ops(tf.function(fn, autograph=False).get_concrete_function(*args).graph)
