"""The package's import graph, read from the source (no module is imported): no module-level import cycle in
``ascend_shim``; the emulator (``ascend_shim.sim``) imports none of the shim's machinery, at any level, and reports
through its events instead; the real layer's modules depend one way even counting imports inside functions; and
the real layer's prepared-package side comes without torch (the shim reads it before the program imports torch).

A module-level cycle works only while every module of it is imported in one order, and makes a module's
dependencies those of the whole cycle."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import ascend_shim

ROOT = Path(ascend_shim.__file__).parent
EMULATOR = "ascend_shim.sim"
REAL_LAYER = "ascend_shim.sim.real_layer"
#: the shim's machinery, which the emulator never imports: it tells whoever listens (ascend_shim.sim.events)
SHIM_ONLY = ("ascend_shim.report", "ascend_shim.activation", "ascend_shim.patching", "ascend_shim.context",
             "ascend_shim.callers", "ascend_shim.backend")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(statements: list[ast.AST], *, module_level: bool):
    """The import statements run when the module executes (``module_level``: not those in function bodies, nor
    those under ``if TYPE_CHECKING``), or all of them."""
    for node in statements:
        if module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if module_level and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _imports(node.orelse, module_level=True)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                yield from _imports([child], module_level=module_level)


def _imported(module: str, *, module_level: bool) -> set[str]:
    """The modules of ``ascend_shim`` that ``module`` imports (``from pkg import sub``: the submodule ``sub``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = set()
    for node in _imports(list(tree.body), module_level=module_level):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = _absolute(module, node)
        names.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {name for name in names if name in MODULES and name != module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _show(cycles: list[list[str]], graph: dict[str, set[str]]) -> str:
    lines = []
    for cycle in cycles:
        members = set(cycle)
        lines.append(" <-> ".join(cycle) + ":")
        lines += [f"    {m} imports {', '.join(sorted(graph[m] & members))}" for m in cycle]
    return "\n".join(lines)


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_reader_resolves_relative_imports_and_skips_function_bodies():
    assert "ascend_shim.sim.real_layer.enabled" in _imported("ascend_shim.sim.real_layer.ops", module_level=True)
    assert "ascend_shim.sim.real_layer.native" not in _imported("ascend_shim.sim.real_layer.loader", module_level=True)
    assert "ascend_shim.sim.real_layer.native" in _imported("ascend_shim.sim.real_layer.loader", module_level=False)


def test_no_module_level_import_cycle_in_the_package():
    graph = {module: _imported(module, module_level=True) for module in MODULES}
    cycles = _cycles(graph)
    assert not cycles, "module-level import cycles:\n" + _show(cycles, graph)


def test_no_module_level_import_cycle_in_the_emulator():
    emulator = {m for m in MODULES if m == EMULATOR or m.startswith(EMULATOR + ".")}
    graph = {m: _imported(m, module_level=True) & emulator for m in emulator}
    cycles = _cycles(graph)
    assert not cycles, "module-level import cycles in the emulator:\n" + _show(cycles, graph)


def test_the_real_layer_depends_one_way_even_inside_functions():
    layer = {m for m in MODULES if m == REAL_LAYER or m.startswith(REAL_LAYER + ".")}
    graph = {m: _imported(m, module_level=False) & layer for m in layer}
    cycles = _cycles(graph)
    assert not cycles, "import cycles in the real layer:\n" + _show(cycles, graph)


def test_the_emulator_imports_none_of_the_shims_machinery():
    found = [f"{m} imports {name}" for m in MODULES if m == EMULATOR or m.startswith(EMULATOR + ".")
             for name in sorted(_imported(m, module_level=False))
             if any(name == shim or name.startswith(shim + ".") for shim in SHIM_ONLY)]
    assert not found, "\n".join(found)


def test_the_prepared_package_is_read_without_torch():
    code = textwrap.dedent("""\
        import sys
        from ascend_shim.sim.real_layer import find_prepared, prepare, prepared_state
        from ascend_shim.sim import events
        find_prepared(); prepared_state()
        print(sorted(m for m in ("torch", "ascend_shim.sim._extension") if m in sys.modules))
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
