"""What a patch factory gets: the original, the settings, the report, and undo-tracked helpers."""
from __future__ import annotations

import os
from typing import Any, Callable

from . import patching, virtual
from .report import REPORT


class PatchContext:
    """Passed to every factory as ``factory(ctx)``.

    ``ctx.original`` is the attribute being replaced (for replace/wrap kinds). Helpers that change state
    (``replace``, ``provide_module``, ``set_env``) register their own undo, so ``deactivate()`` reverts them.
    """

    def __init__(self, patch, config, backend: str):
        self.patch = patch
        self.config = config
        #: the backend the patches serve: ``npu`` (hardware, and the emulated NPU under Huawei's torch_npu Python)
        #: or ``sim`` (the emulated NPU under its builtin layer)
        self.backend = backend
        self.report = REPORT
        self.owner: Any = None
        self.attr: str = ""
        self.original: Any = None
        self.undos: list[Callable[[], None]] = []

    @property
    def emulated(self) -> bool:
        """Is the device the emulated NPU (either torch_npu layer)? For patches that stand in for what hardware
        discovery reads (device nodes, AscendCL), which the emulator does not have under any layer."""
        return self.config is not None and self.config.backend == "sim"

    # -- undo-tracked helpers for patches that change more than their one target -----------------------------
    def replace(self, owner, attr: str, value, *, wrapper: bool = False, allow_missing: bool = False):
        change = patching.replace(self.patch.id, owner, attr, value, allow_missing=allow_missing,
                                  is_wrapper=wrapper)
        self.undos.append(lambda: patching.revert([change]))
        return change

    def provide_module(self, name: str, real: str, *, distribution: str | None = None, version: str = "",
                       summary: str = "provided by ascend_shim") -> None:
        """``import name`` gives module ``real``; with ``distribution``, importlib.metadata sees it installed."""
        virtual.register_alias(name, real)
        self.undos.append(lambda: virtual.unregister_alias(name))
        if distribution:
            virtual.register_distribution(distribution, version, summary, top_level=(name,))
            self.undos.append(lambda: virtual.unregister_distribution(distribution))

    def set_env(self, variable: str, value: str | None, detail: str = "") -> None:
        """Set (or with ``None`` unset) an environment variable, recorded in the report and undone later."""
        old = os.environ.get(variable)
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
        self.report.env(variable, detail or (f"set to {value!r}" if value is not None else "unset"))

        def undo():
            if old is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = old

        self.undos.append(undo)

    def need(self, owner, name: str, what: str = ""):
        """``getattr(owner, name)``, or skip this patch (reported) when it does not exist here."""
        try:
            return getattr(owner, name)
        except Exception as exc:  # AttributeError, or an emulator's "not emulated" error
            from .errors import TargetMissing

            where = what or getattr(owner, "__name__", type(owner).__name__)
            raise TargetMissing(f"{where}.{name} is not available here ({type(exc).__name__})") from None

    def on_undo(self, fn: Callable[[], None]) -> None:
        self.undos.append(fn)
