"""Randomized malformed inputs to the raw ops, bypassing the Python checks.

Every call must succeed or raise tf.errors.InvalidArgumentError (or, for an
invalid attr or dtype, the TypeError/ValueError of TF's attr validation); the
process must never crash. Inputs start from a valid random graph and are
then mangled one array at a time; when nothing was mangled the call must
succeed, and a fused gather must match the numpy oracle.

Usage: python fuzz_worker.py MAX_EXAMPLES. Prints the outcome counts, then "cases=N".
"""

import collections
import sys

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngra_tf.graph import Adjacency
from ngra_tf.ops import PROGRAMS, REDUCES, library
from ngra_testlib import oracle_fused_gather

LIB = library()
assert LIB is not None
OPS = ("fused_gather", "fused_gather_grad", "gather", "scatter", "gather_grad_arg", "copy", "copy_stats")
BAD_INDEX = st.integers(-3, 9)


class Case:
    """Draws one case's inputs, remembering whether any was mangled."""

    def __init__(self, data):
        self.data = data
        self.mangled = False  # some input is (probably) invalid
        self.bad_attr = False  # an attr or dtype TF itself must reject
        self.reads_argedge = False
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        self.pristine = data.draw(st.integers(0, 2), label="pristine") == 0  # a third: nothing mangled

    def must_succeed(self):
        return not (self.mangled or self.bad_attr or self.reads_argedge)

    def draw(self, strategy, label=None):
        return self.data.draw(strategy, label=label)

    def choice(self, valid, invalid, label):
        """A valid choice usually; sometimes one TF must reject."""
        if not self.pristine and self.draw(st.integers(0, 9), label=f"{label}?") == 0:
            self.bad_attr = True
            return self.draw(st.sampled_from(invalid), label=label)
        return self.draw(st.sampled_from(valid), label=label)

    def index(self, valid, dtype, label):
        a = np.asarray(valid, np.int64)
        modes = ["valid"] if self.pristine else ["valid"] * 12 + ["mutate", "random", "matrix", "empty"]
        mode = self.draw(st.sampled_from(modes), label=label)
        if mode == "mutate" and a.size:
            a = a.copy()
            a.flat[self.draw(st.integers(0, a.size - 1))] = self.draw(BAD_INDEX)
        elif mode == "random":
            a = np.array(self.draw(st.lists(BAD_INDEX, max_size=8)), np.int64)
        elif mode == "matrix":
            a = a.reshape(1, -1)
        elif mode == "empty":
            a = np.zeros(0, np.int64)
        self.mangled |= mode != "valid" and not np.array_equal(a, valid)
        return tf.constant(a.astype(dtype))

    def floats(self, shape, dtype, label):
        shape = list(shape)
        modes = ["valid"] if self.pristine else ["valid"] * 8 + ["rows", "width", "rank", "empty"]
        mode = self.draw(st.sampled_from(modes), label=label)
        if mode == "rows" and shape:
            shape[0] = self.draw(st.integers(0, 5))
        elif mode == "width" and shape:
            shape[-1] = self.draw(st.integers(0, 4))
        elif mode == "rank":
            shape = self.draw(st.lists(st.integers(0, 3), max_size=3))
        elif mode == "empty":
            shape = [0]
        self.mangled |= mode != "valid"
        return tf.constant(self.rng.uniform(-3, 3, shape).astype(dtype))


def random_adjacency(case):
    num_src, num_dst = case.draw(st.integers(0, 4)), case.draw(st.integers(0, 4))
    num_edges = case.draw(st.integers(0, 6)) if num_src and num_dst else 0
    src = case.rng.integers(0, max(num_src, 1), num_edges)
    dst = case.rng.integers(0, max(num_dst, 1), num_edges)
    adjacency, _ = Adjacency.from_coo(src, dst, num_src, num_dst)
    return adjacency


def fused_inputs(case, adjacency, T, Tindex):
    """(the eleven NgraFusedGather inputs, init and plan last, program, reduce)."""
    program = case.choice(list(PROGRAMS), ["gcn", ""], "program")
    reduce = case.choice(list(REDUCES), ["prod"], "reduce")
    # The operand shapes follow some program, not always the one in the attr.
    others = [] if case.pristine else list(PROGRAMS)
    shaped_as = case.draw(st.sampled_from([program] * 4 + others)) if program in PROGRAMS else "copy_src"
    case.mangled |= shaped_as != program
    spec = PROGRAMS[shaped_as]
    width = case.draw(st.integers(0, 4))
    types = case.draw(st.integers(1, 3))
    slots = {0: [], 2: [2], None: [types]}[spec.src_slots]
    E = adjacency.num_edges
    heads = case.draw(st.sampled_from([h for h in (1, 2, 4) if width % h == 0] or [1]))
    weight_shape = case.draw(st.sampled_from([[E], [E, heads], [E, width]])) if spec.uses_weight else [0]
    valid_types = case.rng.integers(0, types, E) if spec.uses_type else np.zeros(0)
    inputs = [
        case.floats([adjacency.num_src] + slots + [width], T, "x_src"),
        case.floats([adjacency.num_dst, width] if spec.uses_dst else [0], T, "x_dst"),
        case.floats(weight_shape if width or len(weight_shape) == 1 else [E], T, "edge_weight"),
        case.index(valid_types, np.int32, "edge_type"),
        case.index(adjacency.csc_indptr, Tindex, "csc_indptr"),
        case.index(adjacency.csc_src, Tindex, "csc_src"),
        case.index(adjacency.csr_indptr, Tindex, "csr_indptr"),
        case.index(adjacency.csr_dst, Tindex, "csr_dst"),
        case.index(adjacency.csr_edge, Tindex, "csr_edge"),
        initial_accumulator(case, adjacency.num_dst, width, reduce, T),
        # The CPU kernels take no plan from NgraPrepareGraph (it is empty there): any bytes are ignored.
        tf.constant(case.rng.integers(-128, 128, case.draw(st.sampled_from([0, 0, 7, 64])), dtype=np.int8)),
    ]
    return inputs, program, reduce


def initial_accumulator(case, num_dst, width, reduce, T):
    """A gather's init input: usually absent (empty), else shaped like the output (never valid with mean)."""
    if not case.draw(st.booleans(), label="init?"):
        return tf.zeros([0], T)
    init = case.floats([num_dst, width], T, "init")
    case.mangled |= reduce == "mean" and init.shape.num_elements() > 0
    return init


def check_fused_result(adjacency, inputs, program, reduce, out):
    """The oracle's answer for a valid call; per-head weights need heads in the feature shape."""
    x_src, x_dst, weight, types = (t.numpy() for t in inputs[:4])
    init = inputs[9].numpy()
    width = x_src.shape[-1]
    if program == "src_mul_edge" and weight.ndim == 2:
        heads = weight.shape[1]
        x_src = x_src.reshape(len(x_src), heads, width // heads)
    expected = oracle_fused_gather(program, reduce, adjacency, x_src, x_dst,
                                   types if program == "type_select" else weight, init if init.size else None)
    np.testing.assert_allclose(out.numpy(), expected.reshape(adjacency.num_dst, width), rtol=1e-4, atol=1e-4)


def run_case(case):
    op = case.draw(st.sampled_from(OPS), label="op")
    T = case.choice([np.float32, np.float64], [np.float16, np.int32], "T")
    Tindex = case.choice([np.int32, np.int64], [np.uint8], "Tindex")
    adjacency = random_adjacency(case)
    if op in ("fused_gather", "fused_gather_grad"):
        inputs, program, reduce = fused_inputs(case, adjacency, T, Tindex)
        if op == "fused_gather":
            out, _ = LIB.ngra_fused_gather(*inputs, program=program, reduce=reduce)
            return lambda: check_fused_result(adjacency, inputs, program, reduce, out)
        width = inputs[0].shape[-1] if inputs[0].shape.rank else 0
        grad = case.floats([adjacency.num_dst, width], T, "grad")
        argedge = case.index(case.rng.integers(-1, max(adjacency.num_edges, 1), (adjacency.num_dst, width))
                             if reduce in ("max", "min") else np.zeros(0), Tindex, "argedge")
        wrt = case.choice(["x_src", "x_dst", "edge_weight"], ["edge_type"], "wrt")
        spec = PROGRAMS.get(program)
        case.mangled |= spec is not None and ((wrt == "x_dst" and not spec.uses_dst) or
                                              (wrt == "edge_weight" and not spec.uses_weight))
        case.reads_argedge = reduce in ("max", "min")
        LIB.ngra_fused_gather_grad(grad, argedge, *inputs[:9], inputs[10], program=program, reduce=reduce, wrt=wrt)
    elif op == "gather":
        width = case.draw(st.integers(0, 3))
        values = case.floats([adjacency.num_edges, width], T, "values")
        edge_ids = case.draw(st.sampled_from([np.zeros(0), adjacency.csr_edge]), label="ids")
        reduce = case.choice(list(REDUCES), ["prod"], "reduce")
        LIB.ngra_gather(values, case.index(adjacency.csc_indptr, Tindex, "indptr"),
                        case.index(edge_ids, Tindex, "edge_ids"),
                        initial_accumulator(case, adjacency.num_dst, width, reduce, T), reduce=reduce)
    elif op == "scatter":
        x = case.floats([adjacency.num_src, case.draw(st.integers(0, 3))], T, "x")
        LIB.ngra_scatter(x, case.index(adjacency.csr_indptr, Tindex, "indptr"),
                         case.index(adjacency.csr_edge, Tindex, "edge_ids"))
    elif op == "gather_grad_arg":
        width = case.draw(st.integers(1, 3))
        grad = case.floats([adjacency.num_dst, width], T, "grad")
        argedge = case.rng.integers(-1, max(adjacency.num_edges, 1), (adjacency.num_dst, width))
        case.reads_argedge = True  # (and random winners are rarely edges of their own segment)
        LIB.ngra_gather_grad_arg(grad, case.index(argedge, Tindex, "argedge"),
                                 case.index(adjacency.csc_indptr, Tindex, "indptr"),
                                 case.index(np.zeros(0), Tindex, "edge_ids"))
    elif op == "copy":
        dtype = case.draw(st.sampled_from([np.float32, np.int64, np.bool_, np.uint8, object]))
        shape = case.draw(st.lists(st.integers(0, 3), max_size=3))
        x = case.rng.integers(0, 2, shape).astype(dtype if dtype is not object else str).astype(dtype)
        kind = case.draw(st.sampled_from(["h2d", "d2h", "d2d"]))
        y = getattr(LIB, f"ngra_copy_{kind}")(tf.constant(x))
        np.testing.assert_array_equal(y.numpy(), tf.constant(x).numpy())
    else:
        reset = case.draw(st.sampled_from([np.bool_(False), np.array([True]), np.zeros((2, 1), bool)]))
        case.mangled |= reset.ndim != 0
        LIB.ngra_copy_stats(tf.constant(reset))
    return None


OUTCOMES = collections.Counter()  # ok, rejected, checked (valid and matched the oracle)


def fuzz(max_examples):
    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        case = Case(data)
        try:
            check = run_case(case)
        except tf.errors.InvalidArgumentError:
            if case.must_succeed():
                raise
            OUTCOMES["rejected"] += 1
            return
        except (TypeError, ValueError):
            if not case.bad_attr:
                raise
            OUTCOMES["rejected"] += 1
            return
        OUTCOMES["ok"] += 1
        if check is not None and case.must_succeed():
            check()
            OUTCOMES["checked"] += 1

    one()


if __name__ == "__main__":
    fuzz(int(sys.argv[1]))
    print(" ".join(f"{k}={v}" for k, v in sorted(OUTCOMES.items())))
    print(f"cases={OUTCOMES['ok'] + OUTCOMES['rejected']}")
