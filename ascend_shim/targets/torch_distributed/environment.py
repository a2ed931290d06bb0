"""CUDA/NCCL environment variables translated to their Ascend/HCCL counterparts, once per process tree: a child
whose CUDA value a parent's shim already translated keeps the translation unless it got a value of its own."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ascend_shim import patching

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext


def npu_variable_from_cuda(ctx: PatchContext, cuda_var: str, npu_var: str) -> None:
    """Set ``npu_var`` from ``cuda_var`` where the user did not set it (reported, undone on deactivation)."""
    marker = f"ASCEND_SHIM_DERIVED_{cuda_var}"  # the value a parent's shim translated; children inherit it
    value, current = os.environ.get(cuda_var), os.environ.get(npu_var)
    if value is None:
        return None  # nothing to translate
    if current is not None and not (current == os.environ.get(marker) and value != current):
        return None  # the user set the NPU variable (it wins), or the parent's translation still holds
    # unset, or inherited from a parent's translation while this child got its own CUDA value (AReaL / TRL
    # start each vLLM server with CUDA_VISIBLE_DEVICES=<its card>)
    ctx.set_env(npu_var, value, f"{npu_var} set from {cuda_var}={value!r}")
    old_marker = os.environ.get(marker)
    os.environ[marker] = value
    ctx.on_undo(lambda: os.environ.__setitem__(marker, old_marker) if old_marker is not None
                else os.environ.pop(marker, None))
    return None


#: the CUDA variables followed while the program runs -> (their NPU counterpart, the report to record in)
_followed: dict[str, tuple[str, Any]] = {}
#: the NPU variables and markers as they were before the first write the shim followed (put back on undo)
_before_following: dict[str, str | None] = {}
#: the class of ``os.environ`` swapped for :class:`FollowingEnviron` while a variable is followed
_class_change: patching.Change | None = None


class FollowingEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` whose writes of a followed CUDA variable also set its NPU counterpart, unless the user set
    that one: a script that narrows CUDA_VISIBLE_DEVICES in its first lines, before its first device use, gets
    the devices it asked for (the NPU runtime reads ASCEND_RT_VISIBLE_DEVICES until then). Other writes cost one
    dictionary lookup."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key in _followed:
            _follow(key, value)

    def __delitem__(self, key):
        super().__delitem__(key)
        if key in _followed:
            _follow(key, None)


def _follow(cuda_var: str, value: str | None) -> None:
    npu_var, report = _followed[cuda_var]
    marker = f"ASCEND_SHIM_DERIVED_{cuda_var}"
    current = os.environ.get(npu_var)
    if current is not None and current != os.environ.get(marker):
        return  # the user set the NPU variable: it wins
    for name in (npu_var, marker):
        _before_following.setdefault(name, os.environ.get(name))
    if value is None:
        os.environ.pop(npu_var, None)
        os.environ.pop(marker, None)
        report.env(npu_var, f"unset with {cuda_var} by the program")
    else:
        os.environ[npu_var] = os.environ[marker] = value
        report.env(npu_var, f"set from {cuda_var}={value!r} by the program")


def follow_cuda_variable(ctx: PatchContext, cuda_var: str, npu_var: str) -> Callable[[], None]:
    """From now on, the program's own writes of ``cuda_var`` reach ``npu_var`` (see :class:`FollowingEnviron`)."""
    global _class_change
    environ = os.environ
    if _class_change is None and type(environ) is not FollowingEnviron:
        _class_change = patching.replace(ctx.patch.id, environ, "__class__", FollowingEnviron, name="os.environ")
    _followed[cuda_var] = (npu_var, ctx.report)

    def undo() -> None:
        global _class_change
        _followed.pop(cuda_var, None)
        marker = f"ASCEND_SHIM_DERIVED_{cuda_var}"
        derived = npu_var in _before_following and environ.get(npu_var) == environ.get(marker)
        for name in (npu_var, marker):
            old = _before_following.pop(name, None)
            if derived:  # the user did not set it since: put back what was there before the shim followed
                if old is None:
                    environ.pop(name, None)
                else:
                    environ[name] = old
        if not _followed and _class_change is not None:
            patching.revert([_class_change], keep_later=True)
            _class_change = None

    return undo
