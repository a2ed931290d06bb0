"""Each target lives in one folder, ``ascend_shim/targets/<name>/``: its ``__init__`` declares (pure data, cheap to
import), the modules beside it implement. Read here from the source with ``ast``:

* declarations are data: no function, class or lambda; every ``<set>.patch(...)`` names its factory as a string
  (``factory="function"`` of the set's implementation module, or ``"module:function"``); they import only the
  registry, the version gates and other targets' declarations;
* no emulator in any target module: what a patch may know of the emulated NPU is on its ``PatchContext``
  (``ctx.emulated``, ``ctx.emulated_device_name``, ``ctx.emulated_memory`` ...);
* declarations take no private name of the shim's core;
* every built-in factory string resolves to a function, and the declarations load without torch.
"""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TARGETS = Path(__file__).resolve().parents[2] / "ascend_shim" / "targets"
PACKAGE = "ascend_shim.targets"
EMULATOR = "ascend_shim.sim"
#: what a declarations module may import besides other targets' declarations
DECLARATION_IMPORTS = ("__future__", "typing", "ascend_shim.registry", "ascend_shim.versions")


def _module_name(path: Path) -> str:
    try:
        parts = path.relative_to(TARGETS).with_suffix("").parts
    except ValueError:  # a file checked from elsewhere stands for a target's declarations
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


def _imports(tree: ast.Module, module: str, is_package: bool):
    """(line, imported name, bound name, what the bound name is) for every import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, a.asname or a.name.partition(".")[0], a.name if a.asname else \
                    a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            for a in node.names:
                yield node.lineno, f"{base}.{a.name}", a.asname or a.name, f"{base}.{a.name}"


def _import_problems(tree: ast.Module, module: str, is_package: bool, declarations: bool) -> list[str]:
    found = []
    aliases: dict[str, str] = {}  # a name bound to an ascend_shim module -> that module
    for line, full, bound, target in _imports(tree, module, is_package):
        if full.partition(".")[0] != "ascend_shim":
            continue
        aliases[bound] = target
        if _is_emulator(full):
            found.append(f"line {line}: imports the emulator ({full}); use the PatchContext")
        elif declarations and not full.startswith(PACKAGE + ".") and _private(full.removeprefix("ascend_shim.")):
            found.append(f"line {line}: imports a private name ({full})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            full = f"{aliases[node.value.id]}.{node.attr}"
            if _is_emulator(full):
                found.append(f"line {node.lineno}: reaches the emulator ({full}); use the PatchContext")
            elif declarations and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not full.startswith(PACKAGE):
                found.append(f"line {node.lineno}: uses a private name ({full})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_emulator(node.value):
            found.append(f"line {node.lineno}: names the emulator's module {node.value!r}; use the PatchContext")
    return found


def _is_declaration(call: ast.expr) -> bool:
    """``<patch set>.patch(...)``."""
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "patch"


def _declaration_problems(tree: ast.Module, module: str) -> list[str]:
    found = []
    for line, full, _bound, _target in _imports(tree, module, True):
        allowed = full.startswith(tuple(f"{m}." for m in DECLARATION_IMPORTS)) or \
            full.count(".") == 3 and full.startswith(PACKAGE + ".")  # ascend_shim.targets.<name>.<constant>
        if not allowed:
            found.append(f"line {line}: declarations import {full}: implementation belongs beside them")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            name = getattr(node, "name", "lambda")
            found.append(f"line {node.lineno}: {name} is code: declarations are data (name the factory as a string)")
        elif _is_declaration(node):
            factory = next((k.value for k in node.keywords if k.arg == "factory"), None)
            if factory is None:
                found.append(f"line {node.lineno}: a patch declared without factory=\"module:function\"")
            elif not isinstance(factory, (ast.Constant, ast.JoinedStr, ast.Name)):
                found.append(f"line {node.lineno}: factory= is an expression; give its name as a string")
    return found


def problems(path: Path | str, source: str | None = None) -> list[str]:
    """What breaks the rules for the target module at ``path`` (or ``source`` read as that module)."""
    path = Path(path)
    text = path.read_text() if source is None else textwrap.dedent(source)
    tree = ast.parse(text, str(path))
    module = _module_name(path)
    declarations = path.name == "__init__.py" and path.parent.parent == TARGETS and not path.parent.name.startswith("_")
    found = _import_problems(tree, module, path.name == "__init__.py", declarations)
    return found + _declaration_problems(tree, module) if declarations else found


MODULES = sorted(p for p in TARGETS.rglob("*.py") if "__pycache__" not in p.parts)
DECLARATIONS = sorted(p / "__init__.py" for p in TARGETS.iterdir() if p.is_dir() and not p.name.startswith("_")
                      and p.name != "__pycache__")


def test_the_target_tree_is_read():
    assert len(DECLARATIONS) > 20
    assert {"torch_cuda", "nanochat", "flash_attn", "ray"} <= {p.parent.name for p in DECLARATIONS}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TARGETS)))
def test_target_module_keeps_the_rules(path):
    assert problems(path) == []


@pytest.mark.parametrize("source, expected", [
    ("from ascend_shim.sim.ops._common import host", "imports the emulator"),
    ("from ascend_shim.sim import DEVICE_NAME", "imports the emulator"),
    ("from ascend_shim import sim", "imports the emulator"),
    ("import ascend_shim.sim.dynamo", "imports the emulator"),
    ("import ascend_shim\nascend_shim.sim.cpu_alias(t)", "reaches the emulator"),
    ("import sys\nsys.modules['ascend_shim.sim'].DEVICE_NAME", "names the emulator's module"),
    ("from ascend_shim.devices import _TorchDevice", "private name"),
    ("import torch", "declarations import torch"),
    ("from ascend_shim.targets.nanochat.impl import plug_fa3", "declarations import ascend_shim.targets.nanochat.impl"),
    ("def helper(x):\n    return x", "helper is code"),
    ("class View:\n    pass", "View is code"),
    ("s = None\n@s.patch('m:f', why='w', what='w', remove_when='r')\ndef f(ctx):\n    return 1", "f is code"),
    ("s = None\ns.patch('m:f', why='w', what='w', remove_when='r')(lambda ctx: 1)", "lambda is code"),
    ("s = None\ns.patch('m:f', why='w', what='w', remove_when='r')", "without factory="),
    ("s = None\ns.patch('m:f', why='w', what='w', remove_when='r', factory='a' + 'b')", "is an expression"),
])
def test_the_checks_catch_what_they_are_for(source, expected):
    found = problems(TARGETS / "example" / "__init__.py", source)
    assert any(expected in line for line in found), found


def test_data_declarations_pass():
    source = """
        from ascend_shim.registry import PatchSet
        from ascend_shim.targets.torch_cuda import LEGACY_TENSORS

        TRANSLATING = "ascend_shim.targets._shared.device_wrappers:translating"
        s = PatchSet(id="s", title="t", implementation=f"{__name__}.impl")
        s.patch("m:f", why="w", what="w", remove_when="r", factory="plug")
        for _name in LEGACY_TENSORS:
            s.patch(f"m:{_name}", why="w", what="w", remove_when="r", factory=TRANSLATING, kwargs={"api": _name})
    """
    assert problems(TARGETS / "example" / "__init__.py", source) == []


def test_every_builtin_factory_resolves_to_a_function():
    from ascend_shim.registry import builtin_patch_sets

    patches = [p for s in builtin_patch_sets() for p in s.patches if not p.id.endswith(".native")]
    assert len(patches) > 250
    unresolved = []
    for patch in patches:
        assert isinstance(patch.factory, str), patch.id
        module, _, name = patch.factory.partition(":")
        if not callable(getattr(importlib.import_module(module), name, None)):
            unresolved.append(f"{patch.id}: {patch.factory}")
    assert unresolved == []


def test_declarations_load_without_torch_or_their_targets():
    code = ("import sys\nfrom ascend_shim.registry import builtin_patch_sets\nsets = builtin_patch_sets()\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'deepspeed', 'numpy') if m in sys.modules)\n"
            "impl = sorted(m for m in sys.modules if m.startswith('ascend_shim.targets.') and m.count('.') > 2)\n"
            "print(len(sets), heavy, impl)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert int(out[0]) > 20 and out[1].strip() == "[] []", out
