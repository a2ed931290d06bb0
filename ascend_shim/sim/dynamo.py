"""Dynamo (``torch.compile``'s tracer) does not trace into the emulated NPU.

The emulator is Python over a native extension. Traced into, its functions stopped dynamo at an extension
function with a warning naming the emulator's internals (a compiled function calling ``torch.cuda.manual_seed()``
or ``memory_allocated()`` printed one, once per process). Dynamo skips the emulator's code instead: such a call
breaks the graph silently, where on the NPU it breaks it at torch_npu's C extension. (torch_npu's own rules,
which fold a few of these calls to constants, are not copied: the shim binds torch_npu's functions to
``torch.cuda`` names that torch's rules already cover, and dynamo refuses an object given two rules.)

:func:`register` takes dynamo's ``trace_rules`` module (so it runs only once dynamo is imported: importing it
costs a second) and returns the undo.
"""
from __future__ import annotations

import os
from types import ModuleType
from collections.abc import Callable

EMULATOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def register(trace_rules: ModuleType) -> Callable[[], None]:
    trace_rules.SKIP_DIRS.append(EMULATOR_DIR)
    trace_rules._recompile_re()

    def undo() -> None:
        if EMULATOR_DIR in trace_rules.SKIP_DIRS:
            trace_rules.SKIP_DIRS.remove(EMULATOR_DIR)
            trace_rules._recompile_re()

    return undo
