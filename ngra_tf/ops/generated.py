"""Generated edge code: each edge program as C++ of its own, compiled once and cached on disk.

The interpreter (ops/kernels/edge_code_walks.h) runs a program one
instruction at a time over a tile of features. For each program signature
(its instructions, the shapes of its tables, the reduce, dtype and index type)
this module writes the program as straight-line C++ instead:

- the forward is one loop over the tile's features with every register a
  local, so the compiler keeps them in vector registers;
- what depends only on the edge (a per-edge weight, a score that one table
  entry broadcasts) is computed once per edge, outside that loop, and what
  is the same over each head's run of features (its score) once per run;
- each gradient walk recomputes the forward and runs its adjoint in the same
  loop, for the registers that reach the operand being differentiated only;
  the adjoints of per-edge and per-head registers are summed over the edge's
  or the head's features and taken back through their ops once (a head's
  softmax weight: one exponential per head, not per feature).

The source is compiled with the compiler and flags that built the op library
(recorded beside it at build time) into a shared library that the edge-code
kernels load (`kernel` attribute; ops/cc/generated_code.h). The walks,
seeds, reductions and threading are the interpreter's own, instantiated with
the generated program; a library is used only when its signature is the
call's, so a stale file runs the interpreter rather than wrong code.

Libraries are cached in NGRA_TF_KERNEL_CACHE (default
~/.cache/ngra_tf/kernels), keyed by a hash of the source, the compiler's
version, the flags, the CPU that -march=native stands for and the kernel
headers. Two processes compiling the same program each write a file of their
own and rename it into place, so a reader only ever sees a whole library; a
file that the op library would not load (cut short, overwritten, another
program's) is compiled again, with a warning, and so is a GPU module that
could not serve (module_problem). Without a compiler, or when
compiling fails, the interpreter runs and `status()` says why in one line.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import warnings

import numpy as np

CACHE_ENV = "NGRA_TF_KERNEL_CACHE"
DISABLE_ENV = "NGRA_TF_GENERATED_CODE"  # "0": always interpret (A/B benchmarks, the fallback's tests)
_HERE = os.path.dirname(os.path.abspath(__file__))
_HEADERS = ("platform.h", "edge_code.h", "edge_code_walks.h", "propagate.h", "programs.h", "reducers.h",
            "segments.h")
ABI = 3  # kCodeCallAbi in ops/kernels/edge_code_walks.h
CODE_REDUCES = ("sum", "mean", "max", "min", "softmax")  # the order of CodeReduce in ops/kernels/edge_code_walks.h



def enumerator(name: str) -> str:
    """An EdgeCode opcode's C++ enumerator in ops/kernels/edge_code.h: leaky_relu -> kLeakyRelu."""
    return "k" + "".join(part.capitalize() for part in name.split("_"))


_SIDES = {"load_src": 0, "load_src_typed": 0, "load_dst": 1, "load_edge": 2}  # kLoadSrc, kLoadDst, kLoadEdge
SRC_AND_DST = 4  # kLoadSrcAndDst: one walk over sources for both, the destination's share in a row per edge
_ROWS = {"load_src": "src", "load_src_typed": "typed", "load_dst": "dst", "load_edge": "edge"}  # each load's row
_lock = threading.Lock()
_failure: str | None = None  # why the last compile failed, for status()


# ---- the program's shape ----

def table_shapes(tables: np.ndarray, read) -> str:
    """Per table: "c" (entry f is the first + f), "u" (one entry for every feature), "8", "4" or "2" (the same
    entry over each aligned run of that many features: attention's heads), "g" (any), "-" (no load reads it);
    the kernel derives the same string from the call's tables (ParseCodeArgs, RunsShape)."""
    shapes = []
    for t, row in enumerate(np.asarray(tables)):
        if t not in read:
            shapes.append("-")
        elif row.size > 0 and np.array_equal(row, row[0] + np.arange(row.size)):
            shapes.append("c")
        elif row.size > 0 and np.all(row == row[0]):
            shapes.append("u")
        else:
            shapes.append(next((str(run) for run in _RUNS if row.size % run == 0
                                and np.all(row.reshape(-1, run) == row.reshape(-1, run)[:, :1])), "g"))
    return "".join(shapes)


_RUNS = (8, 4, 2)  # run lengths a table's shape names, longest first (RunsShape in ops/cc/edge_code_kernels.cc)
_RUN_SHAPES = tuple(str(run) for run in _RUNS)


def _run_total(values: str, at: str, run: int) -> str:
    """The sum of values[at, at + run) as a tree of fixed depth (a loop over a run would chain its adds)."""
    terms = [f"{values}[{at} + {k}]" for k in range(run)]
    while len(terms) > 1:
        terms = [f"({a} + {b})" for a, b in zip(terms[0::2], terms[1::2])]
    return terms[0]


def signature(code, dtype: str, index_dtype: str, reduce: str, abi: str = f"abi={ABI}") -> str:
    """What generated code was made for (ProgramSignature in ops/kernels/edge_code.h): the kernel checks a CPU
    library against it, and names a GPU module's kernels after it (cuda_signature)."""
    ints = ",".join(str(v) for v in code.attrs()["code"])
    return f"{abi} T={dtype} Index={index_dtype} reduce={reduce} code={ints} value={code.value} score={code.score}"


class _Program:
    """The analysis the source is written from: which registers vary per feature, which are live, and which
    carry an adjoint to each side."""

    def __init__(self, code):
        self.code = code
        self.ins = code.instructions
        read = {a for op, a, b, k in self.ins if op in _SIDES}
        self.shapes = table_shapes(code.tables, read)
        n = len(self.ins)
        self.per_edge = [False] * n  # the same for every feature of an edge
        for i, (op, a, b, k) in enumerate(self.ins):
            if op in _SIDES:
                self.per_edge[i] = self.shapes[a] == "u"
            elif op == "const":
                self.per_edge[i] = True
            else:
                self.per_edge[i] = self.per_edge[a] and (op not in _BINARY or self.per_edge[b])
        # Runs: the shortest run of the tables with runs (8, 4, 2; a table with runs of 8 has runs of 4 too), and
        # the registers the same over each run of features (a head's score): once per run in the forward.
        self.run = min((int(self.shapes[a]) for op, a, b, k in self.ins
                        if op in _SIDES and self.shapes[a] in _RUN_SHAPES), default=1)
        self.per_run = [False] * n
        for i, (op, a, b, k) in enumerate(self.ins):
            if op in _SIDES:
                self.per_run[i] = self.shapes[a] == "u" or self.shapes[a] in _RUN_SHAPES
            elif op == "const":
                self.per_run[i] = True
            else:
                self.per_run[i] = self.per_run[a] and (op not in _BINARY or self.per_run[b])
        roots = {code.value} | ({code.score} if code.score >= 0 else set())
        self.live = [False] * n
        for i in sorted(roots):
            self.live[i] = True
        for i in range(n - 1, -1, -1):
            op, a, b, k = self.ins[i]
            if self.live[i] and op not in _SIDES and op != "const":
                self.live[a] = True
                if op in _BINARY:
                    self.live[b] = True
        self.roots = roots

    def depends(self, side: int) -> list:
        """Whether each register depends on a load of `side` (SRC_AND_DST: of either)."""
        if side == SRC_AND_DST:
            return [a or b for a, b in zip(self.depends(0), self.depends(1))]
        out = []
        for op, a, b, k in self.ins:
            if op in _SIDES:
                out.append(_SIDES[op] == side)
            elif op == "const":
                out.append(False)
            else:
                out.append(out[a] or (op in _BINARY and out[b]))
        return out

    def reaches(self, side: int) -> bool:
        depends = self.depends(side)
        return any(depends[i] for i in self.roots)


_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "squared_difference"}


# ---- the source ----

def _prelude(p: _Program, registers) -> list:
    """Row pointers, per-load bases and the per-edge registers among `registers`."""
    lines = []
    ops = {op for i, (op, *_) in enumerate(p.ins) if registers[i]}
    if ops & {"load_src", "load_src_typed"}:
        lines.append("const T* __restrict src = p_.x_src + u * p_.src_width;")
    typed = [b for op, a, b, k in p.ins if op == "load_src_typed"]
    if "load_src_typed" in ops:
        lines.append(f"const T* __restrict typed = src + static_cast<int64_t>(p_.type[e]) * {typed[0]};")
    if "load_dst" in ops:
        lines.append("const T* __restrict dst = p_.x_dst + v * p_.dst_width;")
    if "load_edge" in ops:
        lines.append("const T* __restrict edge = p_.edge + e * p_.edge_width;")
    for i, (op, a, b, k) in enumerate(p.ins):
        if not registers[i]:
            continue
        if op in _SIDES:
            shape = p.shapes[a]
            if shape == "c":
                lines.append(f"const T* __restrict l{i} = {_ROWS[op]} + p_.contiguous[{a}] + f0;")
            elif shape == "u":
                lines.append(f"const T r{i} = {_ROWS[op]}[p_.tables[{a} * p_.width]];")
            else:
                lines.append(f"const int32_t* __restrict t{i} = p_.tables + {a} * p_.width + f0;")
        elif op == "const":
            lines.append(f"const T r{i} = p_.constants[{k}];")
        else:
            if k >= 0:
                lines.append(f"const T k{i} = p_.constants[{k}];")
            if p.per_edge[i]:
                lines.append(f"const T r{i} = {_value(p, i)};")
    return lines


def _operands(p: _Program, i: int) -> str:
    """Op i's (a, b, k) arguments of OpMath: a unary op gets its operand twice, and T(0) without a constant."""
    op, a, b, k = p.ins[i]
    return f"r{a}, {f'r{b}' if op in _BINARY else f'r{a}'}, {f'k{i}' if k >= 0 else 'T(0)'}"


def _value(p: _Program, i: int) -> str:
    return f"OpMath<{enumerator(p.ins[i][0])}>::Value({_operands(p, i)})"


def _adjoint_step(p: _Program, i: int, adjoint, target, indent: str) -> list:
    """Op i's adjoint, g{i} sent to its operands that carry one (target(reg): where reg's adjoint adds)."""
    op, a, b, k = p.ins[i]
    lines = [f"{indent}{{", f"{indent}  T ga = T(0), gb = T(0);",
             f"{indent}  OpMath<{enumerator(op)}>::Adjoint({_operands(p, i)}, r{i}, g{i}, ga, gb);"]
    if adjoint[a]:
        lines.append(f"{indent}  {target(a)} += ga;")
    if op in _BINARY and adjoint[b]:
        lines.append(f"{indent}  {target(b)} += gb;")
    return lines + [f"{indent}  (void)ga; (void)gb;", f"{indent}}}"]


def _feature_values(p: _Program, registers, at="j", skip=None) -> list:
    """The registers among `registers` that are not per edge (nor `skip`), inside the loop over features, at
    feature `at` of the tile."""
    lines = []
    for i, (op, a, b, k) in enumerate(p.ins):
        if not registers[i] or p.per_edge[i] or (skip is not None and skip[i]):
            continue
        if op in _SIDES:
            lines.append(f"const T r{i} = l{i}[{at}];" if p.shapes[a] == "c" else
                         f"const T r{i} = {_ROWS[op]}[t{i}[{at}]];")
        else:
            lines.append(f"const T r{i} = {_value(p, i)};")
    return lines


def _by_run(p: _Program, registers) -> list:
    """Which of `registers` are computed once per run of features, by _feature_loop and _backward (none when no
    table has runs)."""
    per_run = [registers[i] and p.per_run[i] and not p.per_edge[i] for i in range(len(p.ins))]
    return per_run if p.run > 1 and any(per_run) else [False] * len(p.ins)


def _gathers(p: _Program, registers) -> bool:
    """Whether _feature_loop over `registers` loads through a table at each feature (a gather)."""
    by_run = _by_run(p, registers)
    return any(registers[i] and op in _SIDES and p.shapes[a] not in ("c", "u") and not by_run[i]
               for i, (op, a, b, k) in enumerate(p.ins))


def _feature_loop(p: _Program, registers, body) -> list:
    """The loop over the tile's features j computing `registers`, then `body`. Registers the same over each
    run of features (a head's score and what follows from it) are computed once per run, in a loop over runs
    around the loop over the run's features: one load and one evaluation per run instead of a gather and an
    evaluation per feature."""
    per_run = _by_run(p, registers)
    if not any(per_run):
        return (["for (int64_t j = 0; j < n; ++j) {"] + ["  " + line for line in _feature_values(p, registers)]
                + ["  " + line for line in body] + ["}"])
    return ([f"for (int64_t q = 0; q < n; q += {p.run}) {{"]
            + ["  " + line for line in _feature_values(p, per_run, at="q")]
            + [f"  for (int64_t j = q; j < q + {p.run}; ++j) {{"]
            + ["    " + line for line in _feature_values(p, registers, skip=p.per_run)]
            + ["    " + line for line in body] + ["  }", "}"])


def _closure(p: _Program, registers) -> list:
    """`registers` and every register they are computed from."""
    out = list(registers)
    for i in range(len(p.ins) - 1, -1, -1):
        op, a, b, k = p.ins[i]
        if out[i] and op not in _SIDES and op != "const":
            out[a] = True
            if op in _BINARY:
                out[b] = True
    return out


def _forward(p: _Program) -> list:
    """Forward (the message's and score's tiles, for the online softmax) and Messages (the message per feature
    into a sink, for the reductions)."""
    c = p.code
    lines = ["void Forward(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, CodeRegisters<T>* r) const {",
             "  (void)u; (void)v; (void)e;"]
    lines += ["  " + line for line in _prelude(p, p.live)]
    outs = [(c.value, "value")] + ([(c.score, "score")] if c.score >= 0 and c.score != c.value else [])
    # With gathers in the loop, its stores go to local tiles, copied out after: GCC does not vectorise gathers
    # next to stores into the registers' tiles, which it cannot tell apart from the gathered rows.
    staged = _gathers(p, p.live)
    for reg, name in outs:
        lines.append(f"  T* __restrict out_{name} = r->values + {reg} * kTile;")
        if staged:
            lines.append(f"  alignas(64) T tile_{name}[kTile];")
    to = "tile" if staged else "out"
    lines += ["  " + line for line in _feature_loop(p, p.live, [f"{to}_{name}[j] = r{reg};" for reg, name in outs])]
    if staged:
        copies = " ".join(f"out_{name}[j] = tile_{name}[j];" for reg, name in outs)
        lines.append(f"  for (int64_t j = 0; j < n; ++j) {{ {copies} }}")
    for reg, name in outs:
        lines.append(f"  r->value[{reg}] = out_{name};")
    lines.append("}")
    message = _closure(p, [i == c.value for i in range(len(p.ins))])
    lines += ["template <typename Sink>",
              "void Messages(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, CodeRegisters<T>*, "
              "Sink&& sink) const {", "  (void)u; (void)v; (void)e;"]
    lines += ["  " + line for line in _prelude(p, message)]
    lines += ["  " + line for line in _feature_loop(p, message, [f"sink(j, r{c.value});"])]
    lines.append("}")
    return lines


def _adjoints(p: _Program, side: int) -> list:
    """Which registers carry an adjoint to `side`: dependent on it, and a root or read by one that has one."""
    depends = p.depends(side)
    adjoint = [False] * len(p.ins)
    for i in range(len(p.ins) - 1, -1, -1):
        op, a, b, k = p.ins[i]
        if i in p.roots and depends[i]:
            adjoint[i] = True
        if adjoint[i] and op not in _SIDES and op != "const":
            for x in ((a, b) if op in _BINARY else (a,)):
                if depends[x]:
                    adjoint[x] = True
    return adjoint


def _gradient_row(side: int) -> dict:
    """The row each load's adjoint adds into, in a backward for `side`."""
    return {"load_src": "row", "load_src_typed": "typed_row", "load_edge": "row",
            "load_dst": "dst_row" if side == SRC_AND_DST else "row"}


def _groups(p: _Program, side: int, adjoint) -> list:
    """The feature loads of `side` that carry an adjoint, grouped by where they add (the same table of the same
    row), sorted: [((row, table), [instruction, ...]), ...]."""
    rows = _gradient_row(side)
    groups = {}
    for i, (op, a, b, k) in enumerate(p.ins):
        if op in _SIDES and adjoint[i] and not p.per_edge[i]:
            groups.setdefault((rows[op], a), []).append(i)
    return sorted(groups.items())


# At most this many runs of a row summed in tiles at once (a gate's [a | c] is two): their tiles must fit the
# CPU's registers, or nearly.
_MAX_TILE_RUNS = 2


def _tile_tables(p: _Program, side: int) -> list:
    """The tables whose contiguous runs of the row the feature adjoints of `side` (0 or 1) add into, for the
    walks that sum a segment's edges in tiles held in registers (kTileRuns); [] where they add elsewhere."""
    groups = _groups(p, side, _adjoints(p, side))
    if groups and len(groups) <= _MAX_TILE_RUNS and all(row == "row" and p.shapes[table] == "c"
                                                        for (row, table), _ in groups):
        return [table for (row, table), _ in groups]
    return []


def _run_values(p: _Program, by_run, broadcast, score) -> list:
    """Before a gradient's loop over features: the registers `by_run`, once per run, kept in arrays pr{i} for the
    adjoints after the loop and, where the loop reads them (`broadcast`), in tiles b{i}; with `score` (a
    per-run softmax score), the edge's weight per run too, in the tile bw."""
    if not any(by_run):
        return []
    runs = [i for i in range(len(p.ins)) if by_run[i]]
    lines = [f"// Once per run of {p.run} features (a head)."]
    lines += [f"alignas(64) T pr{i}[kTile / {p.run}];" for i in runs]
    if score is not None:
        lines.append(f"alignas(64) T pw[kTile / {p.run}];")
    lines += [f"for (int64_t h = 0; h < n / {p.run}; ++h) {{", f"  const int64_t q = h * {p.run};"]
    lines += ["  " + line for line in _feature_values(p, by_run, at="q")]
    lines += [f"  pr{i}[h] = r{i};" for i in runs]
    if score is not None:
        lines.append(f"  pw[h] = seed.Weight(q, {score});")
    lines.append("}")
    tiles = [(f"b{i}", f"pr{i}") for i in runs if broadcast[i]] + ([("bw", "pw")] if score is not None else [])
    lines += [f"alignas(64) T {tile}[kTile];" for tile, _ in tiles]
    if tiles:
        lines += [f"for (int64_t q = 0; q < n; q += {p.run}) {{",
                  f"  for (int64_t j = q; j < q + {p.run}; ++j) {{ "
                  + " ".join(f"{tile}[j] = {values}[q / {p.run}];" for tile, values in tiles) + " }", "}"]
    return lines


def _run_adjoints(p: _Program, side: int, adjoint, by_run, summed) -> list:
    """After a gradient's loop over features, once per run: the adjoints the loop left in the tiles a{i} of the
    `summed` registers that are per run, summed over the run, taken back through the run's ops in reverse and
    added into their loads' table entries."""
    if not any(adjoint[i] and by_run[i] for i in range(len(p.ins))):
        return []
    lines = [f"for (int64_t h = 0; h < n / {p.run}; ++h) {{", f"  const int64_t q = h * {p.run};"]
    lines += [f"  const T r{i} = pr{i}[h];" for i in range(len(p.ins)) if by_run[i]]
    lines += [f"  T g{i} = T(0);" for i in range(len(p.ins)) if adjoint[i] and by_run[i]]
    lines += [f"  g{reg} += {_run_total(f'a{reg}', 'q', p.run)};" for reg in sorted(summed) if by_run[reg]]
    for i in range(len(p.ins) - 1, -1, -1):
        if adjoint[i] and by_run[i] and p.ins[i][0] not in _SIDES and p.ins[i][0] != "const":
            lines += _adjoint_step(p, i, adjoint, lambda reg: f"g{reg}", "  ")
    rows = _gradient_row(side)
    lines += [f"  {rows[op]}[t{i}[q]] += g{i};" for i, (op, a, b, k) in enumerate(p.ins)
              if op in _SIDES and adjoint[i] and by_run[i]]
    return lines + ["}"]


def _backward(p: _Program, side: int, name: str, into_tile: bool = False) -> list:
    """The adjoint of the loads of `side`, added into `row`: the forward, the seed and the adjoint in one loop.
    into_tile: the feature adjoints add into the tiles `acc` instead, one for each run of the row they add into
    (_tile_tables), and the function is inlined into the walk's loop over a segment's edges.

    Registers the same over each run of features (a head's score, its softmax weight) are computed once per run,
    before the loop over features, which reads them broadcast into tiles; their adjoints are summed per run after
    it and sent back once per run, as the per-edge registers' are once per edge. The loop over features then
    gathers nothing through a table and evaluates no exponential per feature."""
    c = p.code
    softmax = c.score >= 0
    adjoint = _adjoints(p, side)
    # The forward registers that the adjoints and seeds read.
    reads = list(adjoint)
    for i, (op, a, b, k) in enumerate(p.ins):
        if adjoint[i] and op not in _SIDES and op != "const":
            reads[a] = True
            if op in _BINARY:
                reads[b] = True
    if softmax:
        reads[c.score] = reads[c.value] = True
    needed = _closure(p, reads)
    by_run = _by_run(p, needed)
    run_weight = softmax and by_run[c.score]  # the softmax weight once per run
    assert not (into_tile and any(adjoint[i] and by_run[i] for i in range(len(p.ins)))), \
        "a run's adjoint adds into its table's entry, not into a tile of contiguous runs (_tile_tables)"

    def per_feature(i):
        return not p.per_edge[i] and not by_run[i]

    gradient_row = _gradient_row(side)
    if into_tile:
        lines = ["template <typename Seed>",
                 f"__attribute__((always_inline)) void {name}(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, "
                 "T* __restrict acc, T* row, const Seed& seed) const {",
                 "  (void)u; (void)v; (void)e; (void)row;"]
    else:
        lines = ["template <typename Seed>",
                 f"void {name}(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, T* row, T* dst_row, "
                 "const Seed& seed) const {",
                 "  (void)u; (void)v; (void)e; (void)dst_row;"]
    lines += ["  " + line for line in _prelude(p, needed)]
    if any(adjoint[i] and op == "load_src_typed" for i, (op, *_) in enumerate(p.ins)):
        stride = next(b for op, a, b, k in p.ins if op == "load_src_typed")
        lines.append(f"  T* typed_row = row + static_cast<int64_t>(p_.type[e]) * {stride};")
    seeds = [(c.value, "Value")] + ([(c.score, "Score")] if softmax else [])
    z, x = (f"r{c.score}", f"r{c.value}") if softmax else ("T(0)", "T(0)")
    # The registers of a run that the loop over features reads: operands of its ops, and the seeds' message.
    broadcast = [False] * len(p.ins)
    for i, (op, a, b, k) in enumerate(p.ins):
        if needed[i] and per_feature(i) and op not in _SIDES and op != "const":
            for operand in ((a, b) if op in _BINARY else (a,)):
                broadcast[operand] = broadcast[operand] or by_run[operand]
    if softmax:
        broadcast[c.value] = broadcast[c.value] or by_run[c.value]
    lines += ["  " + line for line in _run_values(p, by_run, broadcast, z if run_weight else None)]
    # Registers computed once per edge or per run that feature ops or seeds send adjoints to: a tile of them,
    # summed over the tile (per edge) or over each run after the loop.
    summed = set()
    for i, (op, a, b, k) in enumerate(p.ins):
        if adjoint[i] and per_feature(i) and op not in _SIDES and op != "const":
            for operand in ((a, b) if op in _BINARY else (a,)):
                if adjoint[operand] and not per_feature(operand):
                    summed.add(operand)
    for reg, _ in seeds:
        if adjoint[reg] and not per_feature(reg):
            summed.add(reg)
    for reg in sorted(summed):
        lines.append(f"  alignas(64) T a{reg}[kTile];")
    # Feature loads of the side, grouped by where they add (the same table of the same row). One contiguous
    # group adds straight into the row in the loop; otherwise each group fills a tile that is added after the
    # loop: ranges may overlap, and an indexed add in the loop (entries repeat) would keep it from vectorising.
    groups = _groups(p, side, [adjoint[i] and not by_run[i] for i in range(len(p.ins))])
    direct = len(groups) == 1 and p.shapes[groups[0][0][1]] == "c"
    for g, ((row, table), members) in enumerate(groups if not into_tile else []):
        if not direct:
            lines.append(f"  alignas(64) T al{g}[kTile];")
        else:  # restrict over the loop only: a run's adjoint may add into the same row after it
            lines.append(f"  {{ T* __restrict out0 = {row} + p_.contiguous[{table}] + f0;")
    # Softmax: the edge's weight, once for both seeds (once per edge when the score is, once per run when it is
    # the same over each run).
    if softmax and p.per_edge[c.score]:
        lines.append(f"  const T w = seed.Weight(0, {z});")
    lines.append("  for (int64_t j = 0; j < n; ++j) {")
    lines += [f"    const T r{i} = b{i}[j];" for i in range(len(p.ins)) if broadcast[i]]
    lines += ["    " + line for line in _feature_values(p, needed, skip=by_run)]
    for i in range(len(p.ins)):
        if adjoint[i] and per_feature(i):
            lines.append(f"    T g{i} = T(0);")
    for reg in sorted(summed):
        lines.append(f"    a{reg}[j] = T(0);")
    if run_weight:
        lines.append("    const T w = bw[j];")
    elif softmax and not p.per_edge[c.score]:
        lines.append(f"    const T w = seed.Weight(j, {z});")

    def target(reg):
        return f"g{reg}" if per_feature(reg) else f"a{reg}[j]"

    for reg, kind in seeds:
        if adjoint[reg]:
            lines.append(f"    {target(reg)} += seed.{kind}(j, {z}, {x});" if not softmax else
                         f"    {target(reg)} += seed.Weighted{kind}(j, w{', ' + x if kind == 'Score' else ''});")
    for i in range(len(p.ins) - 1, -1, -1):
        if adjoint[i] and per_feature(i) and p.ins[i][0] not in _SIDES and p.ins[i][0] != "const":
            lines += _adjoint_step(p, i, adjoint, target, "    ")
    for g, ((row, table), members) in enumerate(groups):
        total = " + ".join(f"g{i}" for i in members)
        lines.append(f"    acc[{g} * kTile + j] += {total};" if into_tile else
                     f"    al{g}[j] = {total};" if not direct else f"    out0[j] += {total};")
    lines.append("  }" + (" }" if direct and not into_tile else ""))
    # After the loop: the per-run registers' adjoints, run by run, then the per-edge registers' (a run's ops
    # may send theirs to per-edge registers); each in reverse, then their loads' into the row.
    for i in range(len(p.ins)):
        if adjoint[i] and p.per_edge[i]:
            lines.append(f"  T g{i} = T(0);")
    lines += ["  " + line for line in _run_adjoints(p, side, adjoint, by_run, summed)]
    for reg in sorted(summed):
        if p.per_edge[reg]:
            lines.append(f"  for (int64_t j = 0; j < n; ++j) g{reg} += a{reg}[j];")
    for i in range(len(p.ins) - 1, -1, -1):  # a per-edge op reads per-edge registers only
        if adjoint[i] and p.per_edge[i] and p.ins[i][0] not in _SIDES and p.ins[i][0] != "const":
            lines += _adjoint_step(p, i, adjoint, lambda reg: f"g{reg}", "  ")
    for i, (op, a, b, k) in enumerate(p.ins):
        if op in _SIDES and adjoint[i] and p.per_edge[i]:
            lines.append(f"  {gradient_row[op]}[p_.tables[{a} * p_.width]] += g{i};")
    if not direct and not into_tile:
        for g, ((row, table), members) in enumerate(groups):
            if p.shapes[table] == "c":
                lines.append(f"  {{ T* __restrict out = {row} + p_.contiguous[{table}] + f0;")
                lines.append(f"    for (int64_t j = 0; j < n; ++j) out[j] += al{g}[j]; }}")
            else:  # any entries: one add into the row per run of equal ones (loads over runs add per run above)
                lines.append(f"  {{ const int32_t* __restrict at = p_.tables + {table} * p_.width + f0;")
                lines.append("    for (int64_t j = 0; j < n;) {")
                lines.append(f"      const int32_t to = at[j]; T total = al{g}[j];")
                lines.append(f"      for (++j; j < n && at[j] == to; ++j) total += al{g}[j];")
                lines.append(f"      {row}[to] += total;")
                lines.append("    } }")
    lines.append("}")
    return lines


def source(code, dtype: str, index_dtype: str, reduce: str) -> str:
    """The C++ of one program's generated library (see the module doc)."""
    p = _Program(code)
    cpp_type = {"float32": "float", "float64": "double"}[dtype]
    index = {"int32": "int32_t", "int64": "int64_t"}[index_dtype]
    sides = [(0, "BackwardSrc"), (1, "BackwardDst"), (2, "BackwardEdge")]
    body = ["// Generated by ngra_tf/ops/generated.py for:", f"//   {code.expression()}",
            f"// {signature(code, dtype, index_dtype, reduce)}",
            '#include "ops/kernels/edge_code_walks.h"', "", "namespace {", "using namespace ngra;",
            f"using T = {cpp_type};", f"using Index = {index};", "constexpr int64_t kTile = CodeTile<T>();", "",
            "class Program {", " public:", "  static constexpr bool kSeedsItself = true;",
            "  explicit Program(const EdgeCode<T>& p) : p_(p) {}"]
    reaches = {side: p.reaches(side) for side, _ in sides}
    reaches[SRC_AND_DST] = reaches[0] or reaches[1]
    if reaches[0] and reaches[1]:
        sides.append((SRC_AND_DST, "BackwardSrcAndDst"))
    condition = " || ".join(f"side == {side}" for side in reaches if reaches[side]) or "false"
    body.append(f"  bool Reaches(int side) const {{ (void)side; return {condition}; }}")
    body += ["  " + line for line in _forward(p)]
    # The walks' tile sums (kTileRuns in ops/kernels/edge_code_walks.h), for each side whose adjoints add into
    # one or two runs of the row. That side's walk never calls its per-edge Backward, which is left out unless
    # the one walk for both operands falls back to it (only one of the two reaches).
    tiles = {side: _tile_tables(p, side) if reaches[side] else [] for side in (0, 1)}
    both = reaches[0] and reaches[1]
    dispatched = {side: reaches[side] and not tiles.get(side) for side, _ in sides}
    emitted = {side: dispatched[side] or (not both and side in (0, 1) and reaches[side]) for side, _ in sides}
    body.append("  template <typename Seed>")
    body.append("  void Backward(int side, int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, T* row, "
                "T* dst_row, const Seed& seed) const {")
    for side, name in sides:
        if dispatched[side]:
            body.append(f"    if (side == {side}) return {name}(u, v, e, f0, n, row, dst_row, seed);")
    if not both:  # one of the two reaches at most: its own walk's code
        for side, row in ((0, "row"), (1, "dst_row")):
            if reaches[side]:
                body.append(f"    if (side == {SRC_AND_DST}) return {sides[side][1]}(u, v, e, f0, n, {row}, "
                            "nullptr, seed);")
    body.append("    (void)u; (void)v; (void)e; (void)f0; (void)n; (void)row; (void)dst_row; (void)seed;")
    body.append("  }")
    body.append(f"  static constexpr int kTileRuns[2] = {{{len(tiles[0])}, {len(tiles[1])}}};")

    def starts(side):
        return "{" + ", ".join(f"p_.contiguous[{table}]" for table in tiles[side]) + "}" if tiles[side] else "{0}"

    body.append("  template <int kSide> int64_t TileStart(int run) const {")
    body.append(f"    const int64_t src[] = {starts(0)}, dst[] = {starts(1)};")
    body.append("    return kSide == 0 ? src[run] : dst[run];")
    body.append("  }")
    body.append("  template <int kSide, typename Seed>")
    body.append("  __attribute__((always_inline)) void Sum(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, "
                "T* __restrict acc, T* row, const Seed& seed) const {")
    for side in (0, 1):
        if tiles[side]:
            body.append(f"    if constexpr (kSide == {side}) Sum{sides[side][1][len('Backward'):]}"
                        "(u, v, e, f0, n, acc, row, seed);")
    body.append("    (void)u; (void)v; (void)e; (void)f0; (void)n; (void)acc; (void)row; (void)seed;")
    body.append("  }")
    body.append("")
    body.append(" private:")
    for side, name in sides:
        if emitted[side]:
            body += ["  " + line for line in _backward(p, side, name)]
    for side in (0, 1):
        if tiles[side]:
            body += ["  " + line for line in _backward(p, side, "Sum" + sides[side][1][len("Backward"):],
                                                       into_tile=True)]
    body += ["  const EdgeCode<T>& p_;", "};", "}  // namespace", ""]
    reduce_code = CODE_REDUCES.index(reduce)  # CodeReduce in ops/kernels/edge_code_walks.h
    body += ['extern "C" {',
             f'__attribute__((visibility("default"))) extern const char ngra_edge_code_signature[] = '
             f'"{signature(code, dtype, index_dtype, reduce)}";',
             f'__attribute__((visibility("default"))) extern const char ngra_edge_code_tables[] = "{p.shapes}";',
             '__attribute__((visibility("default"))) void ngra_edge_code_forward(const void* call, int64_t first, '
             'int64_t last) {',
             f"  RunCodeForward<{reduce_code}, Program>(*static_cast<const CodeCall<T, Index>*>(call), first, last);",
             "}",
             '__attribute__((visibility("default"))) void ngra_edge_code_grad(const void* call, int side, '
             'int64_t first, int64_t last) {',
             f"  RunCodeGrad<{reduce_code}, Program>(*static_cast<const CodeCall<T, Index>*>(call), side, first, "
             "last);",
             "}", '}  // extern "C"', ""]
    return "\n".join(body)


# ---- the GPU's generated code ----

def cuda_program(code, name: str) -> str:
    """The program as a compile-time instruction list for the GPU bodies (FixedCode in
    ops/cuda/edge_code_programs.h, which unrolls it into straight-line code): a struct `name`. Tables,
    constants and operands stay run-time data, so one struct serves every width and table."""
    ints = ", ".join(str(v) for v in code.attrs()["code"])
    return "\n".join([
        f"// {code.expression()}",
        f"struct {name} {{",
        f"  static constexpr int32_t kCode[] = {{{ints}}};",
        f"  static constexpr int kInstructions = {len(code.instructions)};",
        f"  static constexpr int kValue = {code.value};",
        f"  static constexpr int kScore = {code.score};",
        "};", ""])


_SEEDS = {"sum": "kWhole", "mean": "kWhole", "max": "kWinner", "min": "kWinner", "softmax": "kSoftmax"}
_CUDA_REDUCES = {"sum": "kSum", "mean": "kMean", "max": "kMax", "min": "kMin"}
CUDA_KERNELS = ("ngra_edge_code_forward", "ngra_edge_code_grad_src", "ngra_edge_code_grad_dst",
                "ngra_edge_code_grad_edge", "ngra_edge_code_forward2",
                "ngra_edge_code_forward4")  # a module's entry points (kGeneratedKernelNames), each + kernel_suffix
CUDA_ABI = 2  # kGeneratedAbi in ops/cuda/api.h: the layout of the bodies the kernels take
_VECTOR_RUNS = {"float32": (2, 4), "float64": (2,)}  # the forward's vector runs: 16 bytes at most (kMaxRun)


def cuda_signature(code, dtype: str, index_dtype: str, reduce: str) -> str:
    """What a module is compiled for (EdgeCodeAttrs::GeneratedSignature in ops/cuda/validate.h)."""
    return signature(code, dtype, index_dtype, reduce, abi=f"cuda_abi={CUDA_ABI}")


def kernel_suffix(signature_: str) -> str:
    """"_" and the 64-bit FNV-1a hash of a signature in 16 hex digits (GeneratedKernelSuffix in ops/cuda/api.h):
    kernel names end in it, so the GPU kernel of one program cannot load another's module."""
    value = 1469598103934665603
    for byte in signature_.encode():
        value = ((value ^ byte) * 1099511628211) % (1 << 64)
    return f"_{value:016x}"


def cuda_module(code, dtype: str, index_dtype: str, reduce: str) -> str:
    """The CUDA source of one program's GPU kernels, for NVRTC: the program as FixedCode, and one extern "C"
    kernel per pass (CUDA_KERNELS: the forward, over runs of 1, 2 and 4 features except under softmax, and the
    gradient walk of each operand a load reads; each name ends in the signature's kernel_suffix), each the body
    the interpreter's launch would run (ops/cuda/edge_code_launch.h), taken by value. Device code only: the
    walks' schedules, checks and launches stay in the op library."""
    cuda_type = {"float32": "float", "float64": "double"}[dtype]
    index = {"int32": "int32_t", "int64": "int64_t"}[index_dtype]
    seed = f"ngra::Seed::{_SEEDS[reduce]}"
    runs = {}  # forward kernels: name -> body
    if reduce == "softmax":
        runs[CUDA_KERNELS[0]] = "ngra::gpu::CodeSoftmaxBody<P, Index>"
    else:
        for run in (1,) + _VECTOR_RUNS[dtype]:
            name = {1: CUDA_KERNELS[0], 2: CUDA_KERNELS[4], 4: CUDA_KERNELS[5]}[run]
            runs[name] = (f"ngra::gpu::SegmentReduceBody<ngra::Reduce::{_CUDA_REDUCES[reduce]}, "
                          f"ngra::gpu::CodeMessageTerm<P, Index>, T, Index, {run}>")
    grads = {0: f"ngra::gpu::SegmentReduceBody<ngra::Reduce::kSum, ngra::gpu::CodeGradTerm<true, {seed}, P, Index>, "
                "T, Index>",
             1: f"ngra::gpu::SegmentReduceBody<ngra::Reduce::kSum, ngra::gpu::CodeGradTerm<false, {seed}, P, Index>, "
                "T, Index>",
             2: f"ngra::gpu::CodeEdgeGradBody<{seed}, P, Index>"}
    signed = cuda_signature(code, dtype, index_dtype, reduce)
    suffix = kernel_suffix(signed)
    # A gradient walk for every operand a load reads, whether or not its adjoint reaches the result (the op is
    # asked for it all the same, and computes zeros).
    read = {_SIDES[op] for op, *_ in code.instructions if op in _SIDES}
    bodies = [(name + suffix, body) for name, body in runs.items()] + [
        (CUDA_KERNELS[1 + side] + suffix, grads[side]) for side in (0, 1, 2) if side in read]
    lines = ["// Generated by ngra_tf/ops/generated.py for:", f"//   {code.expression()}", f"// {signed}",
             '#include "ops/cuda/edge_code_bodies.h"', "",
             "namespace {", cuda_program(code, "Code"), f"using T = {cuda_type};", f"using Index = {index};",
             "using P = ngra::gpu::FixedCode<Code, T>;", "}  // namespace", "", 'extern "C" {']
    for name, body in bodies:
        lines += [f"__global__ void __launch_bounds__(ngra::gpu::kThreadsPerBlock) {name}(const {body} body, "
                  "int64_t threads) {",
                  "  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
                  "  if (t < threads) body(t);", "}"]
    return "\n".join(lines + ['}  // extern "C"', ""])


# NVRTC has no C++ standard library: each standard header the kernel headers include is this one file,
# which declares the little of it that device code uses.
_RTC_STD = "ops/cuda/rtc_std.h"
_RTC_HEADERS = ("algorithm", "cmath", "cstddef", "cstdint", "cstring", "limits", "type_traits", "utility", "vector")
NVRTC_ENV = "NGRA_TF_NVRTC"  # the path of libnvrtc.so, where it is not found by itself


@functools.lru_cache(maxsize=None)
def nvrtc():
    """(ctypes library, version string), or a one-line reason string when there is no NVRTC: NGRA_TF_NVRTC,
    then the NVIDIA wheels TensorFlow's CUDA dependencies install (nvidia-cuda-nvrtc), then the system's."""
    import ctypes
    import glob
    import site

    chosen = os.environ.get(NVRTC_ENV, "")
    if chosen:  # the user's choice, or nothing
        candidates = [chosen]
    else:
        candidates = []
        for root in site.getsitepackages() + [site.getusersitepackages()]:
            candidates += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnvrtc.so*")), reverse=True)
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if home:
                candidates += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)
        candidates += ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    for path in candidates:
        if "builtins" in path:
            continue
        try:
            lib = ctypes.CDLL(path)
            version = lib.nvrtcVersion
        except (OSError, AttributeError) as error:
            if chosen:
                return f"{NVRTC_ENV}={chosen} is not an NVRTC library ({error})"
            continue
        major, minor = ctypes.c_int(), ctypes.c_int()
        version(ctypes.byref(major), ctypes.byref(minor))
        return lib, f"{major.value}.{minor.value}"
    return "no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set NGRA_TF_NVRTC to its path"


def compile_cuda(source: str, arch: str = "compute_75") -> bytes:
    """A generated module (cuda_module) compiled by NVRTC with the kernel headers of this installation: a CUBIN
    for a real architecture ("sm_90"), PTX for a virtual one ("compute_75"); RuntimeError with NVRTC's first
    error otherwise."""
    import ctypes

    found = nvrtc()
    if isinstance(found, str):
        raise RuntimeError(found)
    lib, _ = found
    root = _include_root()
    if root is None:
        raise RuntimeError("the kernel headers (ops/) are not installed with ngra_tf")
    names = [name.encode() for name in _RTC_HEADERS]
    bodies = [f'#include "{_RTC_STD}"\n'.encode()] * len(names)
    program = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"edge_code.cu", len(names),
                                    (ctypes.c_char_p * len(names))(*bodies), (ctypes.c_char_p * len(names))(*names))
    if status != 0:
        raise RuntimeError(f"NVRTC could not create the program (status {status})")
    try:
        # Unannotated functions (constexpr helpers, the stand-in standard library) are device functions here.
        options = [b"--std=c++17", f"--gpu-architecture={arch}".encode(), b"--include-path=" + root.encode(),
                   b"--device-as-default-execution-space"]
        status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        if status != 0:
            text = log.value.decode(errors="replace")
            first = next((line for line in text.splitlines() if "error" in line), text[:300])
            raise RuntimeError(f"NVRTC failed on generated edge code: {first.strip()}")
        cubin = arch.startswith("sm_")  # a real architecture: its machine code, else PTX for the driver to finish
        get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if cubin else
                         (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
        get_size(program, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        get(program, image)
        return image.raw if cubin else image.raw.rstrip(b"\0")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


# ---- the toolchain and the cache ----

def _include_root():
    """The directory holding ops/kernels/*.h: the package's copy (a wheel) or the source tree (editable)."""
    for root in (os.path.join(_HERE, "include"), os.path.dirname(os.path.dirname(_HERE))):
        if os.path.isfile(os.path.join(root, "ops", "kernels", "edge_code_walks.h")):
            return root
    return None


@functools.lru_cache(maxsize=None)
def toolchain():
    """(compiler, flags, include root, fingerprint), or a one-line reason string when there is none."""
    recorded = os.path.join(_HERE, "_ngra_ops.json")
    try:
        with open(recorded) as f:
            build = json.load(f)
        compiler, flags = build["cxx"], list(build["flags"])
    except (OSError, ValueError, KeyError):
        compiler = os.environ.get("CXX", "g++")
        flags = ["-std=c++17", "-O3", "-fno-trapping-math", "-fPIC", "-g0", "-march=native"]
    found = shutil.which(compiler)
    if found is None:
        return f"no C++ compiler: {compiler} (the op library's) is not on PATH"
    root = _include_root()
    if root is None:
        return "the kernel headers (ops/kernels/*.h) are not installed with ngra_tf"
    try:
        version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return f"the C++ compiler {found} does not run ({error})"
    digest = hashlib.sha256(version.encode() + json.dumps(flags).encode())
    if any("native" in flag for flag in flags):
        # The CPU -march=native stands for: a cache shared by machines of several kinds (a home directory on
        # NFS) must not hand one CPU's library to another that lacks its instructions (a crash, not an error).
        from ngra_tf.ops import cpu  # noqa: PLC0415  (generated code for the CPU runs where ngra_tf imports)

        digest.update(cpu.identity().encode())
    for header in _HEADERS:
        with open(os.path.join(root, "ops", "kernels", header), "rb") as f:
            digest.update(f.read())
    return found, flags, root, digest.hexdigest()


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "ngra_tf", "kernels")


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


def _status(find_tools, failure, generated_as) -> str:
    """"generated_as(tools)", or "interpreted: why" (turned off, no tools: find_tools() says why, a failure)."""
    if not enabled():
        return f"interpreted: {DISABLE_ENV}=0"
    tools = find_tools()
    if isinstance(tools, str):
        return f"interpreted: {tools}"
    if failure is not None:
        return f"interpreted: {failure}"
    return generated_as(tools)


def status() -> str:
    """How edge code runs on the CPU in this process, in a phrase: "generated C++ (...)" or "interpreted: why"."""
    return _status(toolchain, _failure,
                   lambda tools: f"generated C++ ({os.path.basename(tools[0])}, cached in {cache_dir()})")


def _build_once(path: str, build, whole=os.path.isfile) -> str:
    """The cache file `path`, built by build(scratch directory) -> the built file unless whole(path) (it is
    there, and a library loads and is the program's: a damaged one is built again, not interpreted around on
    every run): one build at a time in a process; across processes os.replace decides, so a reader only ever
    sees a whole file. Raises OSError, SubprocessError or RuntimeError."""
    if whole(path):
        return path
    seen = _file_identity(path)
    with _lock:
        # Checked again only if another build replaced the file meanwhile: a damaged file warns once.
        if _file_identity(path) != seen and whole(path):
            return path
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        _remove_stale_scratch(directory)
        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as scratch:
            os.replace(build(scratch), path)
    return path


def _file_identity(path: str):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns, status.st_size


def _serves(path: str, problem) -> bool:
    """Whether the cached file at `path` is there and problem(path) finds nothing wrong with it ("" if not); a
    file that fails is built again, with a warning that says what was wrong (problem's words, naming it)."""
    if not os.path.isfile(path):
        return False
    why = problem(path)
    if why:
        warnings.warn(f"ngra_tf: {why}; compiling it again", RuntimeWarning, stacklevel=3)
    return not why


def _library_problem(path: str, signature_: str) -> str:
    """What would keep the edge-code kernels from running the library at `path` ("" if nothing), by the op
    library's own check (LoadGeneratedCode, ops/cc/generated_code.cc: whole, loads, exports `signature_`)."""
    check = _load_check()
    if check is None:  # no op library: no kernel loads the file
        return ""
    why = ctypes.create_string_buffer(1024)
    return "" if check(path.encode(), signature_.encode(), why, len(why)) == 0 else why.value.decode(errors="replace")


@functools.lru_cache(maxsize=None)
def _load_check():
    """The op library's ngra_generated_code_problem, or None without the op library."""
    from ngra_tf.ops import _loader  # noqa: PLC0415  (TensorFlow's: this module loads without it, by path)

    path = _loader.library_path()
    if path is None:
        return None
    check = ctypes.CDLL(path).ngra_generated_code_problem
    check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    check.restype = ctypes.c_int
    return check


def _unwritable(directory, error) -> str:
    return f"cannot build in {directory} ({error}); set {CACHE_ENV} to a writable directory"


@functools.lru_cache(maxsize=None)
def _library(key_source: str, signature_: str) -> str:
    global _failure
    tools = toolchain()
    if isinstance(tools, str):
        return ""
    compiler, flags, root, fingerprint = tools
    key = hashlib.sha256((fingerprint + key_source).encode()).hexdigest()[:32]

    def build(scratch):
        src, out = os.path.join(scratch, "code.cc"), os.path.join(scratch, "code.so")
        with open(src, "w") as f:
            f.write(key_source)
        run = subprocess.run([compiler, *flags, "-shared", "-I", root, src, "-o", out],
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            first = next((line for line in run.stderr.splitlines() if "error" in line), run.stderr[:200])
            raise RuntimeError(f"compiling generated edge code failed: {first.strip()}")
        return out

    try:
        return _build_once(os.path.join(cache_dir(), f"edge_code_{key}.so"), build,
                           lambda path: _serves(path, lambda p: _library_problem(p, signature_)))
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        _failure = str(error) if isinstance(error, RuntimeError) else _unwritable(cache_dir(), error)
        warnings.warn(f"ngra_tf: {_failure}; the edge-code interpreter runs instead", RuntimeWarning, stacklevel=4)
        return ""


def _remove_stale_scratch(directory: str, age_s: float = 3600.0):
    """Scratch directories of compiles killed on the way (a finished compile removes its own): any over an hour
    old. A library itself is never half-written: it appears by rename."""
    now = time.time()
    for entry in os.scandir(directory):
        if entry.name.startswith(".build-") and entry.is_dir() and now - entry.stat().st_mtime > age_s:
            shutil.rmtree(entry.path, ignore_errors=True)


def library_for(code, dtype, index_dtype, reduce: str) -> str:
    """The path of the program's generated library ("" to interpret): built on first use, then cached."""
    if not enabled():
        return ""
    names = _name(dtype), _name(index_dtype), reduce
    return _library(source(code, *names), signature(code, *names))


# ---- the GPU's generated kernels: NVRTC, cached like the libraries ----

_CUDA_HEADERS = ("ops/cuda/edge_code_bodies.h", "ops/cuda/edge_code_programs.h", "ops/cuda/bodies.h",
                 "ops/cuda/schedule.h", _RTC_STD) + tuple(f"ops/kernels/{h}" for h in _HEADERS)
_cuda_failure: str | None = None  # why the last NVRTC compile failed, for cuda_status()


def _has_gpu_kernels() -> bool:
    """Whether the op library was built with its GPU kernels (NGRA_TF_CUDA=1; setup.py records it)."""
    try:
        with open(os.path.join(_HERE, "_ngra_ops.json")) as f:
            return bool(json.load(f).get("cuda", False))
    except (OSError, ValueError):
        return False


@functools.lru_cache(maxsize=None)  # the visible GPUs are fixed once TensorFlow has started
def gpus_visible() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


@functools.lru_cache(maxsize=None)
def gpu_arch():
    """The architecture to compile for: "sm_XY" when every visible GPU is compute capability X.Y (a CUBIN), else
    PTX for the oldest ("compute_XY", which the driver compiles for the others); None without a GPU, or when
    the op library has no GPU kernels (its ops then run on the CPU)."""
    if not _has_gpu_kernels() or not gpus_visible():
        return None
    import tensorflow as tf

    capabilities = set()
    for gpu in tf.config.list_physical_devices("GPU"):
        found = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if found:
            capabilities.add(tuple(found))
    if not capabilities:
        return None
    major, minor = min(capabilities)
    return f"{'sm' if len(capabilities) == 1 else 'compute'}_{major}{minor}"


def nvrtc_status() -> str:
    """Whether programs compile for GPUs here, in a phrase: "generated CUDA (NVRTC X.Y, ...)" or
    "interpreted: why" (no NVRTC, a failed compile, turned off)."""
    return _status(nvrtc, _cuda_failure, lambda found: f"generated CUDA (NVRTC {found[1]}, cached in {cache_dir()})")


def cuda_status() -> str:
    """How edge code runs on GPUs in this process: nvrtc_status(), or "not at all: ..." when the op library
    has no GPU kernels."""
    if not _has_gpu_kernels():
        return "not at all: the op library was built without its GPU kernels (NGRA_TF_CUDA=1 builds them)"
    return nvrtc_status()


@functools.lru_cache(maxsize=None)
def _cuda_fingerprint(root: str) -> str:
    """The headers a module compiles against, hashed once per process (as toolchain() hashes the CPU's)."""
    digest = hashlib.sha256()
    for header in _CUDA_HEADERS:
        with open(os.path.join(root, header), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def module_problem(image: bytes, kernel: str) -> str:
    """Why a cached GPU module would not serve as the program's ("" when it would): cut short, overwritten, or
    another program's (its kernels' names end in another signature's suffix). A CUBIN's headers, and the
    segments and sections they describe, must lie within the file; PTX must end its last function. The driver
    checks the rest when it loads the module."""
    if kernel.encode() not in image:
        return f"has no kernel {kernel} (another program's module, or not a module)"
    if image[:4] == b"\x7fELF":
        if len(image) < 64 or image[4] != 2 or image[5] != 1:
            return "is not a 64-bit little-endian ELF file"
        phoff, shoff = struct.unpack_from("<QQ", image, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 0x36)
        if phoff + phnum * phentsize > len(image) or shoff + shnum * shentsize > len(image):
            return f"is cut short ({len(image)} bytes): its headers run past its end"
        pieces = [struct.unpack_from("<QxxxxxxxxQ", image, phoff + i * phentsize + 8) for i in range(phnum)]
        pieces += [struct.unpack_from("<QQ", image, shoff + i * shentsize + 0x18) for i in range(shnum)
                   if struct.unpack_from("<I", image, shoff + i * shentsize + 4)[0] != 8]  # SHT_NOBITS: no bytes
        if any(offset + size > len(image) for offset, size in pieces):
            return f"is cut short ({len(image)} bytes): its sections run past its end"
    elif not image.rstrip().endswith(b"}"):
        return f"is cut short ({len(image)} bytes): its last function does not end"
    return ""


def _module_file_problem(path: str, kernel: str) -> str:
    with open(path, "rb") as f:
        why = module_problem(f.read(), kernel)
    return f"generated GPU code {path} {why}" if why else ""


@functools.lru_cache(maxsize=None)
def _cuda_kernels(key_source: str, arch: str, kernel: str) -> str:
    global _cuda_failure
    found, root = nvrtc(), _include_root()
    if isinstance(found, str) or root is None:
        return ""
    digest = hashlib.sha256(f"nvrtc {found[1]} {arch} {_cuda_fingerprint(root)}\n{key_source}".encode())
    suffix = "cubin" if arch.startswith("sm_") else "ptx"

    def build(scratch):
        out = os.path.join(scratch, f"code.{suffix}")
        with open(out, "wb") as f:
            f.write(compile_cuda(key_source, arch))
        return out

    try:
        return _build_once(os.path.join(cache_dir(), f"edge_code_{digest.hexdigest()[:32]}.{suffix}"), build,
                           lambda path: _serves(path, lambda p: _module_file_problem(p, kernel)))
    except (OSError, RuntimeError) as error:
        _cuda_failure = str(error) if isinstance(error, RuntimeError) else _unwritable(cache_dir(), error)
        warnings.warn(f"ngra_tf: {_cuda_failure}; the edge-code interpreter runs on the GPU instead", RuntimeWarning,
                      stacklevel=4)
        return ""


def cuda_kernels_for(code, dtype, index_dtype, reduce: str, arch=None) -> str:
    """The path of the program's generated GPU kernels ("" to interpret, and "" without a GPU): compiled with
    NVRTC on first use for `arch` (default: gpu_arch()), then cached."""
    arch = arch or gpu_arch()
    if not enabled() or arch is None:
        return ""
    signature_ = cuda_signature(code, _name(dtype), _name(index_dtype), reduce)
    return _cuda_kernels(cuda_module(code, _name(dtype), _name(index_dtype), reduce), arch,
                         CUDA_KERNELS[0] + kernel_suffix(signature_))


def _name(dtype) -> str:
    if isinstance(dtype, str):  # "float32", "int32": as tools without TensorFlow pass them
        return dtype
    import tensorflow as tf  # only for the dtype's name; the module itself needs no TF

    return tf.as_dtype(dtype).name


__all__ = ["CACHE_ENV", "CODE_REDUCES", "CUDA_ABI", "CUDA_KERNELS", "DISABLE_ENV", "NVRTC_ENV", "cache_dir",
           "compile_cuda", "cuda_kernels_for", "cuda_module", "cuda_program", "cuda_signature", "cuda_status",
           "gpu_arch", "gpus_visible", "kernel_suffix", "library_for", "module_problem", "nvrtc", "nvrtc_status",
           "signature", "source", "status", "table_shapes", "toolchain"]
