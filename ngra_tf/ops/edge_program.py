"""An edge program's instructions, constants and tables (ngra_tf.ops.edge_code runs them): no TensorFlow here,
so that tools without it (tools/bench_cuda.py on a GPU machine) can write a program's generated code."""

from __future__ import annotations

import dataclasses

import numpy as np

# The order of EdgeOpcode in ops/kernels/edge_code.h (tests/ops/test_generated.py checks it).
LOADS = ("load_src", "load_dst", "load_edge", "load_src_typed")
UNARY = ("neg", "abs", "square", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "reciprocal", "tanh", "sigmoid",
         "relu", "leaky_relu", "elu", "selu", "softplus", "softsign", "pow_const")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "squared_difference")
OPCODES = {name: code for code, name in enumerate(LOADS + ("const",) + UNARY + BINARY)}
MAX_INSTRUCTIONS = 64


@dataclasses.dataclass(frozen=True)
class EdgeCode:
    """A compiled element-wise edge stage (see the module doc).

    instructions: (opcode name, a, b, k) per instruction: a load's table row and
    typed slot stride in a, b; an op's operand registers in a, b; k indexes
    `constants` (a constant, LeakyRelu's alpha, a power's exponent) or is -1.
    """

    instructions: tuple
    constants: tuple
    tables: np.ndarray  # int32 [num_tables, width]
    value: int
    score: int = -1

    @property
    def width(self) -> int:
        return int(self.tables.shape[1])

    @property
    def attention(self) -> bool:
        return self.score >= 0

    def reads(self, side: str) -> bool:
        """Whether a load reads `side`: "src" (typed or not), "dst", "edge" or "type"."""
        kinds = {"src": ("load_src", "load_src_typed"), "dst": ("load_dst",), "edge": ("load_edge",),
                 "type": ("load_src_typed",)}[side]
        return any(op in kinds for op, *_ in self.instructions)

    def attrs(self) -> dict:
        return {"code": [int(v) for op, a, b, k in self.instructions for v in (OPCODES[op], a, b, k)],
                "value": self.value, "score": self.score}

    def expression(self) -> str:
        """The message as a formula over S (source rows), D (destination rows), E (edge rows)."""
        names = []
        sides = {"load_src": "S", "load_src_typed": "S[type]", "load_dst": "D", "load_edge": "E"}
        for op, a, b, k in self.instructions:
            if op in sides:
                names.append(f"{sides[op]}{a}")
            elif op == "const":
                names.append(f"{self.constants[k]:g}")
            elif op in BINARY:
                symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(op)
                names.append(f"({names[a]} {symbol} {names[b]})" if symbol else f"{op}({names[a]}, {names[b]})")
            elif k >= 0:
                names.append(f"{op}({names[a]}, {self.constants[k]:g})")
            else:
                names.append(f"{op}({names[a]})")
        if self.attention:
            return f"softmax({names[self.score]}) * {names[self.value]}"
        return names[self.value]
