"""Every built-in factory is annotated ``def f(ctx: PatchContext, ...) -> ...``: mypy (``.ci/run``) then checks its
body against the typed context (an unannotated factory's ``ctx`` is ``Any`` to mypy, so nothing on it is checked).
Lambdas are left out: they cannot be annotated, and mypy types a lambda passed to a generic decorator as it finds it.
"""
from __future__ import annotations

import functools
import inspect

from ascend_shim.registry import builtin_patch_sets


def _function(factory):
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


def test_builtin_factories_take_a_typed_context():
    unannotated = []
    for patch_set in builtin_patch_sets():
        for patch in patch_set.patches:
            fn = _function(patch.factory)
            if fn.__name__ == "<lambda>":
                continue
            params = list(inspect.signature(fn).parameters.values())
            first = params[0] if params else None
            if first is None or first.annotation != "PatchContext" or "return" not in fn.__annotations__:
                unannotated.append(f"{patch.id}: {fn.__module__}.{fn.__qualname__}")
    assert not unannotated, "factories without `ctx: PatchContext` and a return type:\n" + "\n".join(unannotated)
