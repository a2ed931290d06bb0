"""Exceptions the shim raises; each names what went wrong and what the user can do."""
from __future__ import annotations


class ShimError(RuntimeError):
    """Base class of ascend_shim errors."""


class ConfigError(ShimError, ValueError):
    """A bad toggle value (unknown backend, unknown patch id, malformed list). The CLI exits 2 on it."""


class StrictModeError(ShimError):
    """A patch could not apply and ``ASCEND_SHIM_STRICT=1`` turns that skip into an error."""


class BringUpError(ShimError):
    """The device could not come up (Huawei's torch_npu over the emulated NPU, damaged or failing): the message
    names the cause and the fix. A program it ends shows it as one line, ``ascend_shim: ERROR: <message>``, not
    as a traceback (nor as torch's "Failed to load the backend extension" that wraps it during ``import torch``).
    """


class UnsupportedOnNPUError(ShimError, NotImplementedError):
    """A CUDA feature with no NPU equivalent was used; the message names the feature, the patch and a way out."""

    def __init__(self, feature: str, patch_id: str, advice: str):
        self.feature, self.patch_id, self.advice = feature, patch_id, advice
        super().__init__(f"{feature} is not supported on Ascend NPU (ascend_shim patch {patch_id}). {advice}")


class NotNeeded(Exception):
    """Raised by a patch factory that decides, on purpose, not to act (e.g. the real package is installed).

    Unlike a skip caused by a missing attribute, this is never an error, even in strict mode.
    """


class TargetMissing(Exception):
    """Raised by a factory when something it needs does not exist here (e.g. a name the backend lacks).

    The patch is skipped and reported, like a missing target attribute (an error under strict mode).
    """
