"""Edge programs for the generated-code checks, without TensorFlow: random ones (every opcode, in forms whose
domain is safe), G-GCN's gate and GAT's attention, and the case file of ops/tests/generated_code_check.cc
(each program as the compile-time instruction list the GPU's generated kernels unroll).

    python3 tools/generated_cases.py OUT.inc [--seeds=FIRST:LAST] [--gates=4,16]

tests/ops/test_generated.py and test_generated_cuda.py draw their programs here; tools/build_cuda.py
--generated-check writes the case file it builds the GPU check from, and tools/bench_cuda.py its gate. A GPU
machine without TensorFlow can run all three: ngra_tf's TF-free modules (edge_program, generated) are then
loaded by path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module(name):
    """ngra_tf.ops.<name>: imported where ngra_tf imports (it needs TensorFlow), else loaded by path."""
    try:
        return importlib.import_module(f"ngra_tf.ops.{name}")
    except ImportError:
        path = os.path.join(ROOT, "ngra_tf", "ops", f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"ngra_tf_ops_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module


edge_program, generated = _module("edge_program"), _module("generated")

CONSTANTS = (0.5, 0.2, 1.5, -0.75, 2.0, 25.0)
UNARY, BINARY = edge_program.UNARY, edge_program.BINARY
NUM_TYPES = 3


class Builder:
    """A random EdgeCode: loads through contiguous, one-entry, per-head, reversed and random tables (typed
    source loads among them), then random ops in forms whose domain is safe."""

    def __init__(self, rng, width):
        self.rng, self.width = rng, width
        self.slot = width + 1
        self.src_width, self.dst_width, self.edge_width = NUM_TYPES * self.slot + 3, width + 2, 2
        self.tables, self.ins = [], []

    def table(self, bound, kind):
        w, rng = self.width, self.rng
        if kind == "c" and bound >= w:
            t = int(rng.integers(0, bound - w + 1)) + np.arange(w)
        elif kind == "u":
            t = np.full(w, int(rng.integers(bound)))
        elif kind == "heads":
            t = (np.arange(w) // 4) % bound
        elif kind == "reversed":
            t = (w - 1 - np.arange(w)) % bound
        else:
            t = rng.integers(0, bound, w)
        self.tables.append(t.astype(np.int32))
        return len(self.tables) - 1

    def emit(self, op, a=0, b=0, k=-1):
        self.ins.append((op, int(a), int(b), int(k)))
        return len(self.ins) - 1

    def const(self, value):
        return self.emit("const", k=CONSTANTS.index(value))

    def unary(self, op, x):
        """op applied where its domain is safe: sqrt(softplus(x) + 0.5), log1p(sigmoid(x)), ..."""
        if op in ("sqrt", "rsqrt", "log", "reciprocal", "pow_const"):
            x = self.emit("add", self.emit("softplus", x), self.const(0.5))
        elif op == "log1p":
            x = self.emit("sigmoid", x)
        elif op in ("exp", "expm1"):
            x = self.emit("tanh", x)
        k = CONSTANTS.index(0.2) if op == "leaky_relu" else CONSTANTS.index(1.5) if op == "pow_const" else -1
        return self.emit(op, x, 0, k)

    def binary(self, op, a, b):
        if op == "div":
            b = self.emit("add", self.emit("softplus", b), self.const(0.5))
        return self.emit(op, a, b)

    def draw(self, attention=False, big_exp=False, heads=False):
        """heads: most loads per head, so that whole chains of ops are the same over each head's run of
        features (a score, its weight and their adjoints, computed once per run by generated code)."""
        rng = self.rng
        kinds = ["heads", "heads", "heads", "u", "c"] if heads else ["c", "u", "heads", "reversed", "random"]
        regs = [self.emit("load_src", self.table(self.src_width, kinds[rng.integers(5)])) for _ in range(2)]
        regs.append(self.emit("load_src", self.table(self.src_width, "c")))
        if rng.random() < 0.7:
            regs.append(self.emit("load_src_typed", self.table(self.slot, rng.choice(["c", "u", "random"])), self.slot))
        if rng.random() < 0.8:
            dst_kinds = ["heads", "heads", "u"] if heads else ["c", "heads", "u"]
            regs.append(self.emit("load_dst", self.table(self.dst_width, rng.choice(dst_kinds))))
        if rng.random() < 0.7:
            regs.append(self.emit("load_edge", self.table(self.edge_width, rng.choice(["u", "random"]))))
        regs.append(self.const(-0.75))
        for _ in range(int(rng.integers(4, 9))):
            if rng.random() < 0.45:
                regs.append(self.unary(UNARY[rng.integers(len(UNARY))], regs[rng.integers(len(regs))]))
            else:
                a, b = (regs[i] for i in rng.integers(len(regs), size=2))
                regs.append(self.binary(BINARY[rng.integers(len(BINARY))], a, b))
        value = self.emit("add", regs[-1], self.emit("mul", regs[-2], regs[-3]))
        if big_exp:  # exponentials up to e^75: float32's range, where a polynomial exp is least accurate
            value = self.emit("mul", value, self.emit("exp", self.emit("mul", regs[0], self.const(25.0))))
        score = -1
        if attention:
            score = regs[int(rng.integers(len(regs)))] if rng.random() < 0.8 else value
        return edge_program.EdgeCode(tuple(self.ins), CONSTANTS, np.stack(self.tables), value, score)



def gate(width):
    """G-GCN's gate, tanh(a[src] + b[dst]) * c[src], over source rows [a | c] (bench_cuda's gate pass)."""
    f = np.arange(width, dtype=np.int32)
    return edge_program.EdgeCode((("load_src", 0, 0, -1), ("load_dst", 1, 0, -1), ("add", 0, 1, -1),
                                  ("tanh", 2, 0, -1), ("load_src", 2, 0, -1), ("mul", 3, 4, -1)), (),
                                 np.stack([f, f, width + f]), 5)


def head_gate(width, heads=2):
    """GAT's score as a gate: leaky_relu(s[src, head] + t[dst, head], 0.2) * the source row (registers the same
    over each head's run of features, for any reduce)."""
    f = np.arange(width, dtype=np.int32)
    head = (f * heads // width).astype(np.int32)
    return edge_program.EdgeCode((("load_src", 0, 0, -1), ("load_src", 1, 0, -1), ("load_dst", 2, 0, -1),
                                  ("add", 1, 2, -1), ("leaky_relu", 3, 0, 0), ("mul", 4, 0, -1)), (0.2,),
                                 np.stack([f, width + head, head]), 5)


def attention(width, heads=2):
    """GAT: leaky_relu(s[src, head] + t[dst, head], 0.2) as the score, the source row as the value."""
    f = np.arange(width, dtype=np.int32)
    head = (f * heads // width).astype(np.int32)
    return edge_program.EdgeCode((("load_src", 0, 0, -1), ("load_src", 1, 0, -1), ("load_dst", 2, 0, -1),
                                  ("add", 1, 2, -1), ("leaky_relu", 3, 0, 0)), (0.2,),
                                 np.stack([f, width + head, head]), 0, 4)


def case(name, code, src_width, dst_width, edge_width, slot_types=NUM_TYPES):
    """One case struct of the file generated_code_check.cc includes: the program without its score (Plain) and
    with it (Softmax; a program without one scores itself), its tables, constants and operand widths."""
    plain = edge_program.EdgeCode(code.instructions, code.constants, code.tables, code.value, -1)
    if code.score < 0:
        code = edge_program.EdgeCode(code.instructions, code.constants, code.tables, code.value, code.value)
    tables = ", ".join(str(v) for v in np.asarray(code.tables, np.int32).ravel())
    constants = ", ".join(repr(float(v)) for v in code.constants) or "0.0"
    body = [generated.cuda_program(plain, "Plain"), generated.cuda_program(code, "Softmax")]
    return "\n".join([
        f"struct {name} {{",
        *("  " + line for text in body for line in text.splitlines()),
        f'  static constexpr const char* kName = "{name}";',
        f"  static constexpr int64_t kWidth = {code.width}, kSrcWidth = {src_width}, kDstWidth = {dst_width}, "
        f"kEdgeWidth = {edge_width};",
        f"  static constexpr int kSlotTypes = {slot_types}, kNumTables = {len(code.tables)};",
        f"  static constexpr int32_t kTables[] = {{{tables}}};",
        f"  static constexpr double kConstants[] = {{{constants}}};",
        "};", ""])


def cases(seeds, gates=(4,)):
    """The case file: the gate at each width in `gates`, GAT's attention, and a random program per seed (its
    width cycling through 1, 5, 12, 17)."""
    out, names = [], []
    for width in gates:
        out.append(case(f"Gate{width}", gate(width), 2 * width, width, 1))
        names.append(f"Gate{width}")
    out.append(case("Attention", attention(8), 10, 2, 1))
    names.append("Attention")
    for seed in seeds:
        builder = Builder(np.random.default_rng(1000 + seed), width=[1, 5, 12, 17][seed % 4])
        out.append(case(f"Random{seed}", builder.draw(attention=True), builder.src_width, builder.dst_width,
                        builder.edge_width))
        names.append(f"Random{seed}")
    return "\n".join(out) + f"\nusing Cases = CaseList<{', '.join(names)}>;\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the case file to write")
    parser.add_argument("--seeds", default="0:12", help="random programs' seeds, FIRST:LAST (LAST excluded)")
    parser.add_argument("--gates", default="1,4,16", help="the gate's widths, comma-separated")
    args = parser.parse_args(argv)
    first, last = (int(v) for v in args.seeds.split(":"))
    with open(args.out, "w") as f:
        f.write(cases(range(first, last), tuple(int(w) for w in args.gates.split(","))))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
