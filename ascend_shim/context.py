"""What a patch factory gets: the original, the settings, the report, undo-tracked helpers, and the little a
patch may know of the emulated NPU (patch modules never import the emulator's modules)."""
from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from . import patching, virtual
from .report import REPORT, Report

if TYPE_CHECKING:
    from .config import Config
    from .registry import Patch


class PatchContext:
    """Passed to every factory as ``factory(ctx)``.

    ``ctx.original`` is the attribute being replaced (for replace/wrap kinds). Helpers that change state
    (``replace``, ``provide_module``, ``set_env``) register their own undo, so ``deactivate()`` reverts them.
    """

    def __init__(self, patch: Patch, config: Config, backend: str):
        self.patch = patch
        self.config = config
        #: the backend the patches serve: ``npu`` (hardware, and the emulated NPU under Huawei's torch_npu Python)
        #: or ``sim`` (the emulated NPU under its builtin layer)
        self.backend = backend
        self.report: Report = REPORT
        #: for replace/wrap/add: the module or class holding the target attribute, and the attribute as it was
        #: (None for ``add``). Any: they are the target library's objects, whose types the shim cannot know.
        self.owner: Any = None
        self.attr: str = ""
        self.original: Any = None
        self.undos: list[Callable[[], object]] = []  # what they return is ignored

    @property
    def emulated(self) -> bool:
        """Is the device the emulated NPU (either torch_npu layer)? For patches that stand in for what hardware
        discovery reads (device nodes, AscendCL), which the emulator does not have under any layer, and for checks
        that read the emulated device's memory (:meth:`emulated_memory`)."""
        return self.config.backend == "sim"

    # -- the emulated NPU, as far as a patch may know it -------------------------------------------------------
    @property
    def emulator_loaded(self) -> bool:
        """Is the emulated NPU's code loaded in this process (whatever the backend)? Its device module, not the
        package: the shim reads the real layer's prepared package, in the same package, before the device exists."""
        return "ascend_shim.sim._extension" in sys.modules

    @property
    def emulated_device_name(self) -> str:
        """The name the emulated NPU gives its devices (``torch.npu.get_device_name()``); imports the emulator."""
        from .sim import DEVICE_NAME

        return DEVICE_NAME

    @staticmethod
    def emulated_memory(tensor: Any) -> Any:
        """A CPU tensor sharing memory with an emulated NPU tensor (a CPU tensor itself): its values read without a
        device sync, since the emulator's device memory is host memory. For checks a patch makes on the emulator."""
        if tensor.device.type == "cpu":
            return tensor
        from .sim import cpu_alias

        return cpu_alias(tensor.detach())

    @staticmethod
    def keep_dynamo_out_of_emulator(trace_rules: ModuleType) -> Callable[[], None]:
        """Make dynamo (``torch._dynamo.trace_rules``) skip the emulator's code; returns the undo."""
        from .sim import dynamo

        return dynamo.register(trace_rules)

    # -- undo-tracked helpers for patches that change more than their one target -----------------------------
    def replace(self, owner: object, attr: str, value: object, *, wrapper: bool = False,
                allow_missing: bool = False) -> patching.Change:
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

    def set_env(self, variable: str, value: str | None, detail: str = "", *, read_by: str = "") -> None:
        """Set (or with ``None`` unset) an environment variable, recorded in the report and undone later.
        ``read_by``: the module that reads it; the report records the translation once that module is imported in
        this process (a variable nobody read is no news to the user)."""
        old = os.environ.get(variable)
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
        detail = detail or (f"set to {value!r}" if value is not None else "unset")
        if read_by:
            from . import hooks

            hooks.when_imported(read_by, lambda _module: self.report.env(variable, detail))
        else:
            self.report.env(variable, detail)

        def undo() -> None:
            if old is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = old

        self.undos.append(undo)

    def need(self, owner: object, name: str, what: str = "") -> Any:
        """``getattr(owner, name)``, or skip this patch (reported) when it does not exist here."""
        try:
            return getattr(owner, name)
        except Exception as exc:  # AttributeError, or an emulator's "not emulated" error
            from .errors import TargetMissing

            where = what or getattr(owner, "__name__", type(owner).__name__)
            raise TargetMissing(f"{where}.{name} is not available here ({type(exc).__name__})") from None

    def on_undo(self, fn: Callable[[], object]) -> None:
        self.undos.append(fn)
