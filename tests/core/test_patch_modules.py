"""``patches/`` holds declarations: each module declares its patches and binds thin factories to code in
``ascend_shim`` (mostly ``ascend_shim.providers``), read here from the source with ``ast``.

* no emulator: a patch module imports nothing of ``ascend_shim.sim``; what a patch may know of the emulated NPU is
  on its ``PatchContext`` (``ctx.emulated``, ``ctx.emulated_device_name``, ``ctx.emulated_memory`` ...);
* no private names: nothing whose module path or name starts with ``_`` is taken from ``ascend_shim``;
* declarations only: no classes, and every module-level function is a factory (decorated by or passed to a patch
  set's ``patch(...)``, directly or through ``functools.partial``), of at most :data:`FACTORY_LINES` lines.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PATCHES = Path(__file__).resolve().parents[2] / "patches"
PACKAGE = "ascend_shim.patches"
#: the longest factory body (after its docstring): enough to bind a provider's function or wrap a call
FACTORY_LINES = 20
EMULATOR = "ascend_shim.sim"


def _module_name(path: Path) -> str:
    try:
        parts = path.relative_to(PATCHES).with_suffix("").parts
    except ValueError:  # a file checked from elsewhere stands for a module at the top of patches/
        parts = (path.stem,)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _is_emulator(name: str) -> bool:
    return name == EMULATOR or name.startswith(EMULATOR + ".")


def _private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _import_problems(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    found = []
    aliases: dict[str, str] = {}  # a name bound to an ascend_shim module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # (imported, bound name, what the name is bound to)
            imported = [(a.name, a.asname, a.name) if a.asname else (a.name, *[a.name.partition(".")[0]] * 2)
                        for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            imported = [(f"{base}.{a.name}", a.asname or a.name, f"{base}.{a.name}") for a in node.names]
        else:
            continue
        for full, bound, target in imported:
            if full.partition(".")[0] != "ascend_shim":
                continue
            aliases[bound] = target
            if _is_emulator(full):
                found.append(f"line {node.lineno}: imports the emulator ({full}); use the PatchContext")
            elif not full.startswith(PACKAGE + ".") and _private(full.removeprefix("ascend_shim.")):
                found.append(f"line {node.lineno}: imports a private name ({full})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            full = f"{aliases[node.value.id]}.{node.attr}"
            if _is_emulator(full):
                found.append(f"line {node.lineno}: reaches the emulator ({full}); use the PatchContext")
            elif node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: uses a private name ({full})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_emulator(node.value):
            found.append(f"line {node.lineno}: names the emulator's module {node.value!r}; use the PatchContext")
    return found


def _is_declaration(call: ast.expr) -> bool:
    """``<patch set>.patch(...)``."""
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "patch"


def _factory_names_and_lambdas(tree: ast.Module) -> tuple[set[str], list[ast.Lambda]]:
    names, lambdas = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_declaration(d) for d in node.decorator_list):
            names.add(node.name)
        elif isinstance(node, ast.Call) and _is_declaration(node.func):
            for arg in node.args:
                if isinstance(arg, ast.Name):
                    names.add(arg.id)
                elif isinstance(arg, ast.Lambda):
                    lambdas.append(arg)
                elif isinstance(arg, ast.Call) and arg.args and isinstance(arg.args[0], ast.Name):  # partial(f, ...)
                    names.add(arg.args[0].id)
    return names, lambdas


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements, with those of its top-level ``for`` / ``if`` / ``with`` / ``try`` blocks."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop(0)
        out.append(node)
        if isinstance(node, (ast.For, ast.If, ast.With, ast.Try)):
            todo.extend(n for field in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, field, []))
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
    return out


def _body_lines(node: ast.FunctionDef | ast.Lambda) -> int:
    if isinstance(node, ast.Lambda):
        return node.end_lineno - node.lineno + 1
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return node.end_lineno - body[0].lineno + 1


def _declaration_problems(tree: ast.Module) -> list[str]:
    found = []
    factories, lambdas = _factory_names_and_lambdas(tree)
    for node in _module_level(tree):
        if isinstance(node, ast.ClassDef):
            found.append(f"line {node.lineno}: class {node.name} is implementation (ascend_shim/providers)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name not in factories:
                found.append(f"line {node.lineno}: {node.name}() is no patch's factory: implementation belongs in "
                             "ascend_shim/providers")
            elif _body_lines(node) > FACTORY_LINES:
                found.append(f"line {node.lineno}: factory {node.name}() is {_body_lines(node)} lines (at most "
                             f"{FACTORY_LINES}): move its implementation to ascend_shim/providers")
    for node in lambdas:
        if _body_lines(node) > FACTORY_LINES:
            found.append(f"line {node.lineno}: a factory lambda of {_body_lines(node)} lines")
    return found


def problems(path: Path | str, source: str | None = None) -> list[str]:
    """What keeps the patch module at ``path`` (or ``source`` read as that module) from being declarations only."""
    path = Path(path)
    text = path.read_text() if source is None else textwrap.dedent(source)
    tree = ast.parse(text, str(path))
    return _import_problems(tree, _module_name(path), path.name == "__init__.py") + _declaration_problems(tree)


MODULES = sorted(p for p in PATCHES.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_patch_tree_is_read():
    assert len(MODULES) > 20
    assert {"torch_cuda.py", "nanochat.py", "flash_attn.py", "ray.py"} <= {p.name for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PATCHES)))
def test_patch_module_is_declarations_and_thin_factories(path):
    assert problems(path) == []


@pytest.mark.parametrize("source, expected", [
    ("from ascend_shim.sim.ops._common import host", "imports the emulator"),
    ("from ascend_shim.sim import DEVICE_NAME", "imports the emulator"),
    ("from ascend_shim import sim", "imports the emulator"),
    ("import ascend_shim.sim.dynamo", "imports the emulator"),
    ("import ascend_shim\nascend_shim.sim.cpu_alias(t)", "reaches the emulator"),
    ("import sys\nsys.modules['ascend_shim.sim'].DEVICE_NAME", "names the emulator's module"),
    ("from ascend_shim.providers.flash_attn import _npu", "private name"),
    ("from ascend_shim.providers.flash_attn._hostlists import state", "private name"),
    ("from ascend_shim.devices import _TorchDevice", "private name"),
    ("from ascend_shim.providers import nanochat\nnanochat._check_on_the_emulator", "private name"),
    ("def helper(x):\n    return x", "no patch's factory"),
    ("class View:\n    pass", "is implementation"),
    ("s = None\n@s.patch('m:f', why='w', what='w', remove_when='r')\ndef f(ctx):\n" + "    x = 1\n" * 21
     + "    return x", "factory f() is 22 lines"),
])
def test_the_checks_catch_what_they_are_for(source, expected):
    found = problems(PATCHES / "example.py", source)
    assert any(expected in line for line in found), found


def test_thin_factories_and_public_names_pass():
    source = """
        import functools

        from ascend_shim.providers.torch_cuda import LEGACY_TENSORS
        from ascend_shim.registry import PatchSet

        s = PatchSet(id="s", title="t")


        @s.patch("m:f", why="w", what="w", remove_when="r")
        def f(ctx):
            '''A docstring is not counted.'''
            from ascend_shim.providers.nanochat import plug_fa3

            return plug_fa3(ctx)


        def legacy(ctx, name):
            from ascend_shim.providers.torch_cuda import legacy_tensor

            return legacy_tensor(name, LEGACY_TENSORS[name])


        for _name in LEGACY_TENSORS:
            s.patch(f"m:{_name}", why="w", what="w", remove_when="r")(functools.partial(legacy, name=_name))
            s.patch(f"n:{_name}", why="w", what="w", remove_when="r")(lambda ctx: ctx.emulated_device_name)
    """
    assert problems(PATCHES / "example.py", source) == []
