"""Registered gradients of the compiled ops (ngra_tf.ops imports this module).

Each gradient is another kernel over the same index arrays (as in DGL): a
sum gather's adjoint is a scatter over the same segments and vice versa; a
fused gather is differentiated by NgraFusedGatherGrad, walking CSR for x_src
and CSC for x_dst and the edge weights. A gather's initial accumulator
(init, the last input) gets the whole gradient for sum, and for max/min the
gradient of the elements no edge won (argedge -1; NgraInitGrad). None of
them reads init or the forward output, so the forward op may reduce into
init's buffer.
"""

import tensorflow as tf

from ngra_tf.ops._loader import library
from ngra_tf.ops.edge_code import softmax_init_grad, src_walk_takes_dst
from ngra_tf.ops.propagation import PROGRAMS, empty_operand


def _attr(op, name):
    value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def _skipped(op):
    """Inputs whose gradient nobody asked for (known in eager mode only)."""
    return set(getattr(op, "skip_input_indices", None) or ())


def _mean_scaled(grad, indptr):
    """grad / in-degree per segment row, as a mean gather's gradient needs."""
    degree = tf.cast(tf.maximum(indptr[1:] - indptr[:-1], 1), grad.dtype)
    return grad / tf.reshape(degree, [-1] + [1] * (grad.shape.rank - 1))


def _init_grad(op, grad, reduce, index):
    """d/d init (input `index`): grad, masked to where no edge won for max/min; None without init."""
    init = op.inputs[index]
    if init.shape.num_elements() == 0 or index in _skipped(op):
        return None
    d_init = library().ngra_init_grad(grad, op.outputs[1]) if reduce in ("max", "min") else grad
    if init.shape.num_elements() is None:  # may be empty (absent) at run time
        d_init = tf.cond(tf.size(init) > 0, lambda: d_init, lambda: tf.zeros_like(init))
    return d_init


@tf.RegisterGradient("NgraGather")
def _gather_grad(op, grad, _):
    values, indptr, edge_ids, _ = op.inputs
    reduce = _attr(op, "reduce")
    d_init = _init_grad(op, grad, reduce, 3)
    if reduce in ("max", "min"):
        d_values = library().ngra_gather_grad_arg(grad, op.outputs[1], indptr, edge_ids)
    else:
        if reduce == "mean":
            grad = _mean_scaled(grad, indptr)
        d_values = library().ngra_scatter(grad, indptr, edge_ids)
    d_values.set_shape(values.shape)
    return [d_values, None, None, d_init]


@tf.RegisterGradient("NgraScatter")
def _scatter_grad(op, grad):
    x, indptr, edge_ids = op.inputs
    d_x, _ = library().ngra_gather(grad, indptr, edge_ids, empty_operand(grad.dtype), reduce="sum")
    d_x.set_shape(x.shape)
    return [d_x, None, None]


@tf.RegisterGradient("NgraFusedGather")
def _fused_gather_grad(op, grad, _):
    program, reduce = _attr(op, "program"), _attr(op, "reduce")
    spec = PROGRAMS[program]
    skipped = _skipped(op)
    args = [grad, op.outputs[1], *list(op.inputs)[:9], op.inputs[-1]]  # operands, index arrays, plan; not init

    def wrt(name, index, used):
        if not used or index in skipped:
            return None
        d = library().ngra_fused_gather_grad(*args, program=program, reduce=reduce, wrt=name)
        d.set_shape(op.inputs[index].shape)
        return d

    return [
        wrt("x_src", 0, True),
        wrt("x_dst", 1, spec.uses_dst),
        wrt("edge_weight", 2, spec.uses_weight),
    ] + [None] * 6 + [_init_grad(op, grad, reduce, 9), None]


@tf.RegisterGradient("NgraEdgeCode")
def _edge_code_grad(op, grad, _):
    reduce = _attr(op, "reduce")
    attrs = {name: _attr(op, name) for name in ("code", "value", "score", "kernel", "cuda_kernel")}
    skipped = _skipped(op)
    softmax = reduce == "softmax"
    operands = list(op.inputs)[:11]  # not init
    state = op.outputs[0] if softmax else empty_operand(grad.dtype)
    args = [grad, op.outputs[1], state, *operands, op.inputs[-1]]  # and the plan

    loads = set(attrs["code"][0::4])  # opcodes: 0 source, 1 destination, 2 edge, 3 typed source

    def wanted(index):
        return index not in skipped and bool(loads & ({0, 3}, {1}, {2})[index])

    def wrt(name, index):
        if not wanted(index):
            return None
        d = library().ngra_edge_code_grad(*args, reduce=reduce, wrt=name, **attrs)[0]
        d.set_shape(op.inputs[index].shape)
        return d

    if wanted(0) and wanted(1) and src_walk_takes_dst(op.inputs[0], op.inputs[1], attrs["code"][0::4]):
        d_src, d_dst = library().ngra_edge_code_grad(*args, reduce=reduce, wrt="x_src_and_dst", **attrs)
        d_src.set_shape(op.inputs[0].shape)
        d_dst.set_shape(op.inputs[1].shape)
    else:
        d_src, d_dst = wrt("x_src", 0), wrt("x_dst", 1)

    init = op.inputs[11]
    if softmax:
        width = op.inputs[5].shape[1]
        d_init = None
        if init.shape.num_elements() != 0 and 11 not in skipped:
            d_init = softmax_init_grad(grad, init, op.outputs[0], width if width is not None else
                                       tf.shape(op.inputs[5])[1])
    else:
        d_init = _init_grad(op, grad, reduce, 11)
    return [d_src, d_dst, wrt("edge_data", 2)] + [None] * 8 + [d_init, None]


# Copies: the gradient travels back the way the data came.
@tf.RegisterGradient("NgraCopyH2D")
def _h2d_grad(op, grad):
    return library().ngra_copy_d2h(grad)


@tf.RegisterGradient("NgraCopyD2H")
def _d2h_grad(op, grad):
    return library().ngra_copy_h2d(grad)


@tf.RegisterGradient("NgraCopyD2D")
def _d2d_grad(op, grad):
    return library().ngra_copy_d2d(grad)


# The gradient ops themselves are not differentiated again. TensorFlow may still build their gradients
# (tf.while_loop does so eagerly under a persistent or nested tape, in case a second derivative is asked
# for); each then fails only if it is run, naming the op, instead of failing every such tape.
def _second_order_unsupported(op, *grads):
    def fail(tensor):
        if not tensor.dtype.is_floating:
            return None
        check = tf.debugging.Assert(False, [f"ngra_tf: {op.type} (the gradient of a propagation op) has no "
                                            "gradient of its own: second derivatives through graph layers are "
                                            "not supported"])
        with tf.control_dependencies([check]):
            return tf.zeros_like(tensor)

    return [fail(t) for t in op.inputs]


for _name in ("NgraFusedGatherGrad", "NgraEdgeCodeGrad", "NgraGatherGradArg", "NgraInitGrad"):
    tf.RegisterGradient(_name)(_second_order_unsupported)
