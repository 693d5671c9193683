"""Pure-TensorFlow references of the propagation ops: tf.gather + segment ops.

They materialise every per-edge tensor, which is exactly what the compiled
kernels avoid; tests compare the kernels against them, and they run in place
of the kernels when the op library cannot be loaded. Arguments are already
normalised by ngra_tf.ops.propagation: x_src is [Vs, F] ([Vs, K, F] for
gates and type_select), x_dst [Vd, F] or None, weight [E] or [E, W] or None.
"""

import tensorflow as tf


def segment_reduce(values, segment_ids, num_segments, reduce, init=None):
    """Reduces rows of `values` by segment; empty segments give 0.

    With init ([num_segments, ...]; not with mean), each segment's reduction
    starts from its row of init: sum adds it; max/min compare with it first
    (init wins ties and takes their gradient); an empty segment gives init.
    """
    if reduce == "sum":
        total = tf.math.unsorted_segment_sum(values, segment_ids, num_segments)
        return total if init is None else init + total
    if reduce == "mean":
        if init is not None:
            raise ValueError("init cannot be used with reduce='mean'")
        return tf.math.unsorted_segment_mean(values, segment_ids, num_segments)
    reducer = {"max": tf.math.unsorted_segment_max, "min": tf.math.unsorted_segment_min}[reduce]
    result = reducer(values, segment_ids, num_segments)
    count = tf.math.unsorted_segment_sum(tf.ones_like(segment_ids), segment_ids, num_segments)
    present = tf.reshape(count > 0, [-1] + [1] * (len(values.shape) - 1))
    if init is None:
        return tf.where(present, result, tf.zeros_like(result))
    # tf.maximum / tf.minimum send a tie's gradient to their first argument.
    combine = tf.maximum if reduce == "max" else tf.minimum
    return tf.where(present, combine(init, result), init)


def scatter(x, ids):
    return tf.gather(x, ids)


def gather(values, dst, num_dst, reduce, init=None, return_argedge=False):
    """The reduced rows; with return_argedge, (result, argedge) with argedge as the kernels give it."""
    result = segment_reduce(values, dst, num_dst, reduce, init)
    if not return_argedge:
        return result
    return result, argedges(values, dst, num_dst, reduce, result, init)


def argedges(values, dst, num_dst, reduce, result, init=None):
    """The kernels' winning edge per result element: for max/min the first edge (by id) whose value
    is the result, -1 where none is or where init holds it (init wins ties); empty for sum and mean."""
    if reduce not in ("max", "min"):
        return tf.zeros([0], dst.dtype)
    values = tf.reshape(values, [tf.shape(values)[0], -1])
    result = tf.reshape(result, [tf.shape(result)[0], -1])
    edge = tf.range(tf.shape(values, out_type=dst.dtype)[0], dtype=dst.dtype)[:, None]
    none = tf.shape(values, out_type=dst.dtype)[0]
    wins = tf.equal(values, tf.gather(result, dst)) | (tf.math.is_nan(values) & tf.math.is_nan(tf.gather(result, dst)))
    first = tf.math.unsorted_segment_min(tf.where(wins, edge, none), dst, num_dst)
    found = first < none
    if init is not None:
        init = tf.reshape(init, tf.shape(result))
        found &= ~(tf.equal(init, result) | (tf.math.is_nan(init) & tf.math.is_nan(result)))
    return tf.where(found, first, -tf.ones_like(first))


def gather_grad(grad, dst, reduce, argedge=None):
    """d values of gather(values, dst, ..., reduce) given d result: the kernels' gradient semantics
    (max/min: all of an element's gradient to its argedge edge)."""
    if reduce in ("sum", "mean"):
        if reduce == "mean":
            num_dst = tf.shape(grad, out_type=dst.dtype)[0]
            degree = tf.math.unsorted_segment_sum(tf.ones_like(dst), dst, num_dst)
            grad = grad / tf.cast(tf.reshape(tf.maximum(degree, 1), [-1] + [1] * (grad.shape.rank - 1)), grad.dtype)
        return tf.gather(grad, dst)
    edge = tf.range(tf.shape(dst, out_type=dst.dtype)[0], dtype=dst.dtype)
    flat = tf.reshape(grad, [tf.shape(grad)[0], -1])
    owner = tf.gather(tf.reshape(argedge, tf.shape(flat)), dst)
    picked = tf.where(tf.equal(owner, edge[:, None]), tf.gather(flat, dst), tf.zeros_like(tf.gather(flat, dst)))
    return tf.reshape(picked, tf.concat([tf.shape(dst), tf.shape(grad)[1:]], 0))


_ACTIVATIONS = {"gate_sigmoid": tf.sigmoid, "gate_tanh": tf.tanh, "gate_relu": tf.nn.relu}


def messages(src, dst, x_src, x_dst, weight, types, program):
    """The per-edge messages of a fused-gather program, [E, F]."""
    if program == "type_select":
        return tf.gather_nd(x_src, tf.stack([tf.cast(src, tf.int64), tf.cast(types, tf.int64)], axis=1))
    s = tf.gather(x_src, src)
    t = None if x_dst is None else tf.gather(x_dst, dst)
    if program == "copy_src":
        return s
    if program == "src_mul_edge":
        num_edges, width = tf.shape(s)[0], s.shape[-1]
        weight = weight[:, None] if weight.shape.rank == 1 else weight
        blocks = weight.shape[-1]
        grouped = tf.reshape(s, [num_edges, blocks, width // blocks]) * weight[:, :, None]
        return tf.reshape(grouped, [num_edges, width])
    if program == "src_add_dst":
        return s + t
    if program == "src_sub_dst":
        return s - t
    if program == "src_mul_dst":
        return s * t
    if program in _ACTIVATIONS:
        return _ACTIVATIONS[program](s[:, 0] + t) * s[:, 1]
    raise ValueError(f"unknown program {program!r}")


def fused_gather(src, dst, num_dst, x_src, x_dst, weight, types, program, reduce, init=None, return_argedge=False):
    return gather(messages(src, dst, x_src, x_dst, weight, types, program), dst, num_dst, reduce, init,
                  return_argedge)
