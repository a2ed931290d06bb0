"""accelerate's PartialState with a CUDA backend name translated on the NPU."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ascend_shim.context import PatchContext


def partial_state_init(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.devices import translate_backend
    from ascend_shim.targets._shared.device_wrappers import note
    from ascend_shim.targets._shared.npu_checks import on_npu

    orig = ctx.original

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        backend = kwargs.get("backend")
        if backend is not None and on_npu():
            new = translate_backend(backend)
            if new != backend:
                note("accelerate.PartialState", "backend", backend, new)
                kwargs["backend"] = new
        return orig(self, *args, **kwargs)

    return __init__
