"""ascend_shim: run unmodified CUDA-targeted PyTorch code on Huawei Ascend NPUs (or the simulated NPU).

Public API::

    import ascend_shim
    ascend_shim.activate(backend="sim")      # or "npu" / "auto"; keywords mirror the ASCEND_SHIM_* toggles
    ascend_shim.is_active(); ascend_shim.is_patched("torch.cuda.is_available")
    ascend_shim.original("torch.cuda.is_available")
    ascend_shim.deactivate()                 # every patched attribute back to the identical original

Most users never import it: ``python -m ascend_shim run train.py`` (or ``ascend-shim run``) does it.
"""
from .activation import activate, current_backend, deactivate, is_active
from .errors import ConfigError, NotNeeded, ShimError, StrictModeError, UnsupportedOnNPUError
from .patching import is_patched, original
from .report import REPORT as report

__version__ = "0.1.0"
__all__ = ["activate", "deactivate", "is_active", "is_patched", "original", "current_backend", "report",
           "ConfigError", "NotNeeded", "ShimError", "StrictModeError", "UnsupportedOnNPUError"]
