"""``torch.npu.amp.GradScaler``: torch.amp.GradScaler on the "npu" device, with torch_npu's skipping rule.

Scaling, unscaling (``_amp_foreach_non_finite_check_and_unscale_``) and the scale update (``_amp_update_scale_``)
run as npu ops, so steps with inf/nan gradients are skipped and the scale backs off as on hardware. As in
torch_npu, an overflow found in any optimizer's gradients skips the steps of every optimizer stepped after it
in the iteration (torch's own scaler skips only the optimizer whose gradients overflowed), until ``update()``.
"""
from __future__ import annotations

import torch

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
        self._has_overflow = False

    def unscale_(self, optimizer) -> None:
        super().unscale_(optimizer)
        if not self._enabled:
            return
        found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        if sum(v.item() for v in found.values()):
            self._has_overflow = True

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if self._has_overflow:
            return None
        return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)

    def update(self, new_scale=None) -> None:
        super().update(new_scale)
        self._has_overflow = False
