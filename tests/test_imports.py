"""The package's modules import one another without cycles (module-level imports; type-only ones aside)."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "ngra_tf"


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path, modules: set) -> set:
    """The package modules `path` imports at module level: `from a.b import c` counts a.b.c when c is a
    module, else a.b; imports under `if TYPE_CHECKING:` and inside functions are left out."""
    found = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules
                found.update(subs if len(subs) == len(node.names) else subs | ({node.module} & modules))

    visit(ast.parse(path.read_text()).body)
    return found


def test_no_import_cycles():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports(p, modules) - {module_name(p)} for p in paths}
    # a package's __init__ imports its modules; a module importing its own package is a cycle through it
    state, cycles = {}, []

    def walk(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
