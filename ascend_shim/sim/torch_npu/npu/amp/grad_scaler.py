"""``torch.npu.amp.GradScaler``: torch.amp.GradScaler on the "npu" device.

Scaling, unscaling (``_amp_foreach_non_finite_check_and_unscale_``) and the scale update (``_amp_update_scale_``)
run as npu ops, so steps with inf/nan gradients are skipped and the scale backs off as on hardware.
"""
from __future__ import annotations

import torch

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
