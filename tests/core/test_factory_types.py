"""Every built-in factory is annotated ``def f(ctx: PatchContext, ...) -> ...``: mypy (``.ci/run``) then checks its
body against the typed context (an unannotated factory's ``ctx`` is ``Any`` to mypy, so nothing on it is checked);
and the keyword arguments a declaration gives (``kwargs=``) are exactly the factory's other parameters."""
from __future__ import annotations

import importlib
import inspect

from ascend_shim.registry import builtin_patch_sets


def _function(factory):
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        return getattr(importlib.import_module(module), name)
    return factory


def test_builtin_factories_take_a_typed_context_and_their_declared_arguments():
    wrong = []
    for patch_set in builtin_patch_sets():
        for patch in patch_set.patches:
            fn = _function(patch.factory)
            params = list(inspect.signature(fn).parameters.values())
            first = params[0] if params else None
            if first is None or first.annotation != "PatchContext" or "return" not in fn.__annotations__:
                wrong.append(f"{patch.id}: {fn.__module__}.{fn.__qualname__}: no `ctx: PatchContext` or return type")
            required = {p.name for p in params[1:] if p.default is inspect.Parameter.empty}
            given, known = {k for k, _ in patch.kwargs}, {p.name for p in params[1:]}
            if not required <= given <= known:
                wrong.append(f"{patch.id}: kwargs {sorted(given)} for parameters {sorted(known)}")
    assert not wrong, "\n".join(wrong)
