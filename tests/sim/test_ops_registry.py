"""Every emulated op is declared once, in its family module, and reaches every table it needs from there: the
``torch.ops.npu`` operator with its kernels, the shipped schemas, the package's and ``torch_npu``'s exports."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import torch

import ascend_shim.sim as sim
from ascend_shim.sim import ops
from ascend_shim.sim.ops import _registry, library

torch_npu = pytest.importorskip("torch_npu")

SPECS = _registry.specs()
PACKAGE = Path(ops.__file__).parent
FACADE = Path(sim.__file__).parent / "torch_npu" / "__init__.py"
# the release-line differences, keyed by op and argument: only ops whose arguments changed between lines are there
NOT_A_TABLE = {PACKAGE / "_release.py"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_a_declared_op_is_in_every_table(spec):
    name, qualname = spec.name, f"npu::{spec.name}"
    assert spec.name in library.OPS
    for line, entry in library._shipped().items():
        assert name in {s.split("(", 1)[0] for s in entry["schemas"]}, line
    packet = getattr(torch.ops.npu, name)
    for key in ("PrivateUse1", "AutogradPrivateUse1", "Meta"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), key
    assert getattr(torch_npu, name) is packet
    assert getattr(importlib.import_module(f"ascend_shim.sim.ops.{spec.family}"), name) is spec.kernel
    exported = not spec.internal  # a backward op only the derivatives call is the family module's alone
    assert (name in ops.__all__) is exported and (getattr(ops, name, None) is spec.kernel) is exported
    if sim.layer() == "builtin":  # the real layer is Huawei's own torch_npu
        assert (name in torch_npu.__all__) is spec.public
    if spec.derivative is not None:
        grad_op = next(s for s in SPECS if s.name == spec.grad_op)
        assert grad_op.derivative is None


def _code(path: Path) -> str:
    """The module's code without its docstrings and comments."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def test_an_op_is_named_only_by_its_family_module():
    code = {str(path.relative_to(PACKAGE.parent)): _code(path) for path in (*PACKAGE.glob("*.py"), FACADE)
            if path not in NOT_A_TABLE}
    for spec in SPECS:
        naming = sorted(path for path, text in code.items() if re.search(rf"\b{spec.name}\b", text))
        assert naming == [f"ops/{spec.family}.py"], spec.name
