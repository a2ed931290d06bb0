"""Where a device-valued argument sits in a call: bound by name, once, at patch time.

A wrapper that translates ``device`` must find it positionally as well as by keyword. Its position is read
from the original itself, never written by hand beside the patch: the Python signature, else torch's
operator schema (aten builtins), else the signature line torch documents for its C bindings. Only callables
that show none of these (C bindings without documentation, ``*args`` parsers such as ``Module.to``) declare
it in :data:`DECLARED`. An original that no longer has the argument raises
:class:`~ascend_shim.errors.TargetMissing`, so the patch is skipped and reported instead of translating
the wrong argument.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

from .errors import TargetMissing

KEYWORD_ONLY = None  # Binding.position of an argument that can only be given by keyword
_NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class Binding:
    """``name`` is positional argument ``position`` (``self`` counts) or keyword-only (``None``)."""

    name: str
    position: int | None
    default: object = None  # what the original uses when the argument is omitted
    source: str = "signature"  # signature | schema | documented | declared

    @property
    def index(self) -> int:
        """The position for ``len(args) > index`` tests; never reached by a keyword-only argument."""
        return sys.maxsize if self.position is None else self.position


# Callables that show no usable signature, keyed by the api name the patch reports. Each entry is checked
# against the installed torch by the binding drift test.
DECLARED: dict[tuple[str, str], int | None] = {
    # ``Module.to(*args, **kwargs)`` parses its arguments itself: the device comes first when given
    ("Module.to", "device"): 1,
    # C bindings whose only introspectable overload does not take the argument
    ("torch.is_autocast_enabled", "device_type"): 0,
    ("torch.set_autocast_enabled", "device_type"): 0,
    ("torch.set_autocast_dtype", "device_type"): 0,
    ("torch.get_autocast_dtype", "device_type"): 0,
}


#: every binding made in this process, by (api, argument name): what the wrappers rely on
BOUND: dict[tuple[str, str], Binding] = {}


def bind(orig, name: str, api: str) -> Binding:
    """The binding of ``name`` in ``orig`` (reported as ``api``): signature, schema, documentation, table."""
    binding = BOUND[api, name] = _bind(orig, name, api)
    return binding


def _bind(orig, name: str, api: str) -> Binding:
    try:
        signature = inspect.signature(orig)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        found = _from_signature(signature, name)
        if found is not None:
            return found
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            raise TargetMissing(f"{api} has no argument {name!r} any more (signature {signature})")
    else:
        for source, positions in (("schema", _schema_positions(orig, name)),
                                  ("documented", _documented_positions(orig, name))):
            if positions:
                if len(positions) > 1:  # overloads disagree: only a keyword is certain
                    return Binding(name, KEYWORD_ONLY, source=source)
                return Binding(name, positions.pop(), source=source)
    if (api, name) in DECLARED:
        return Binding(name, DECLARED[api, name], source="declared")
    raise TargetMissing(f"cannot tell where {api} takes {name!r}: no signature, schema or declaration")


def _from_signature(signature: inspect.Signature, name: str) -> Binding | None:
    for index, param in enumerate(signature.parameters.values()):
        if param.name == name:
            default = None if param.default is _NO_DEFAULT else param.default
            if param.kind is param.KEYWORD_ONLY:
                return Binding(name, KEYWORD_ONLY, default)
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                return Binding(name, index, default)
    return None


def _schema_positions(orig, name: str) -> set:
    """Positions of ``name`` over the aten overloads of ``orig`` (``self`` first for Tensor methods)."""
    import torch

    op = getattr(orig, "__name__", "")
    if not op:
        return set()
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{op}")
    except RuntimeError:
        return set()
    positions = set()
    for schema in schemas:
        for index, arg in enumerate(schema.arguments):
            if arg.name == name:
                positions.add(KEYWORD_ONLY if arg.kwarg_only else index)
    return positions


def _documented_positions(orig, name: str) -> set:
    """Position of ``name`` in the ``name(a, b, *, device=None) -> Tensor`` line torch documents."""
    params = documented_parameters(getattr(orig, "__doc__", None) or "")
    if params is None:
        return set()
    keyword_only = False
    for index, param in enumerate(params):
        if param in ("*", r"\*") or param.startswith("*"):
            keyword_only = True
            if not param.lstrip("\\*"):
                continue
        if param.lstrip("\\*") == name:
            return {KEYWORD_ONLY if keyword_only else index}
    return set()


def documented_parameters(doc: str) -> list[str] | None:
    """Parameter names (``*`` markers kept) of the signature on the first line of a torch docstring."""
    line = doc.strip().split("\n", 1)[0]
    start = line.find("(")
    if start <= 0 or not line[:start].isidentifier():
        return None
    depth, token, params = 0, "", []
    for ch in line[start + 1:]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                params.append(token)
                break
            depth -= 1
        if ch == "," and depth == 0:
            params.append(token)
            token = ""
        else:
            token += ch
    else:
        return None
    names = []
    for raw in params:
        head = raw.strip().split("=", 1)[0].split(":", 1)[0].strip()
        if head:
            names.append(head)
    return names
