"""The emulated ``torch_npu`` package: what ``import torch_npu`` returns while the sim backend is active.

Importing it installs the emulator. ``torch_npu.npu`` is ``torch.npu``; the fused ops (``npu_fusion_attention``
...) and ``torch_npu.optim`` come from :mod:`ascend_shim.sim.ops` when that package is present.
"""
from ascend_shim import sim as _sim

_sim.install()

from . import npu  # noqa: E402
from . import optim  # noqa: E402

__version__ = _sim.torch_base_version()

try:
    from ascend_shim.sim import ops as _ops
except ModuleNotFoundError as _exc:
    if _exc.name != "ascend_shim.sim.ops":
        raise
else:
    from ascend_shim.sim.ops import *  # noqa: E402,F401,F403
