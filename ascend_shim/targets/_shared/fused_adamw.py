"""``torch_npu.optim.NpuFusedAdamW`` made safe for code written against ``torch.optim.AdamW``.

NpuFusedAdamW combines every parameter's gradient into a flat buffer at its first step and from then on reads
*those* gradient tensors. Code that zeroes gradients with ``set_to_none=True`` (torch's default for
``Module.zero_grad()``, which the HF Trainer calls every step) drops them: the next backward allocates new
``.grad`` tensors the fused step never reads, and training silently stops updating. ``optimizer.zero_grad(
set_to_none=True)`` raises ``ValueError`` on the real class.

:func:`fused_adamw_class` subclasses the (real or emulated) class: ``zero_grad`` always zeroes in place, and once
the gradients are combined, a backward that writes a new ``.grad`` has it copied into the combined gradient at once
(a post-accumulate-grad hook, which then re-points ``.grad`` at it); a step does the same for a ``.grad`` replaced
by other code. Not at the step alone: torch_npu's ``GradScaler.unscale_`` (the one accelerate uses on the NPU)
unscales and inf-checks the optimizer's combined buffers, not ``.grad``, before the step -- a new ``.grad`` would
stay scaled (``clip_grad_norm_`` clipping the scaled gradients) and an overflow in it unseen, while the stale
buffer's inf from a skipped first step would skip every later step. The update itself is the fused kernel's, the
same numbers as ``torch.optim.AdamW``.
"""
from __future__ import annotations

import functools
import weakref

FUSED_DTYPES = ("float32", "float16")
_cache: dict = {}


def fused_adamw_class():
    from torch_npu.optim import NpuFusedAdamW

    cls = _cache.get(NpuFusedAdamW)
    if cls is not None:
        return cls
    import torch

    class ShimNpuFusedAdamW(NpuFusedAdamW):
        """torch_npu's NpuFusedAdamW; keeps working when gradients are zeroed with set_to_none=True."""

        def zero_grad(self, set_to_none=None):  # noqa: ARG002 - the fused buffer cannot drop its gradients
            super().zero_grad(set_to_none=False)

        @torch.no_grad()
        def step(self, closure=None):
            refs = self.__dict__.get("_shim_grad_refs")
            if refs is not None:
                for p, ref in refs:
                    g = p.grad
                    if g is ref:
                        continue
                    if g is None:
                        ref.zero_()
                    else:
                        ref.copy_(g)
                    p.grad = ref
            loss = super().step(closure)
            self._shim_keep_grads()
            return loss

        def _maybe_init_combined_params_and_grads(self):
            """torch_npu's combining, which its GradScaler's ``unscale_`` may run before any step (a skipped one):
            the gradients must stay on the buffers from then on."""
            super()._maybe_init_combined_params_and_grads()
            self._shim_keep_grads()

        def _shim_keep_grads(self):
            """Once combined: capture the combined gradients and hook each parameter so that a new ``.grad`` from
            backward goes into its combined gradient before anything (GradScaler, clipping, DDP) reads it."""
            if "_shim_grad_refs" in self.__dict__ or not getattr(self, "is_params_grads_combined", False):
                return
            refs = [(p, p.grad) for group in self.param_groups for p in group["params"] if p.grad is not None]
            self._shim_grad_refs = refs
            handles = [p.register_post_accumulate_grad_hook(functools.partial(_into_combined, ref)) for p, ref in refs]
            weakref.finalize(self, _remove_hooks, handles)

    ShimNpuFusedAdamW.__module__ = NpuFusedAdamW.__module__
    ShimNpuFusedAdamW.__qualname__ = ShimNpuFusedAdamW.__name__ = "NpuFusedAdamW"
    _cache[NpuFusedAdamW] = ShimNpuFusedAdamW
    return ShimNpuFusedAdamW


def _into_combined(ref, p) -> None:
    """Post-accumulate-grad hook: a ``.grad`` backward allocated (after ``set_to_none``) goes into ``ref``, the
    combined gradient the fused optimizer reads, and ``.grad`` is ``ref`` again; later backwards accumulate in it."""
    g = p.grad
    if g is not ref and g is not None:
        ref.copy_(g)
        p.grad = ref


def _remove_hooks(handles) -> None:
    for handle in handles:
        handle.remove()


def params_of(params) -> list:
    """Flatten an optimizer's ``params`` argument (tensors, or param-group dicts) into tensors."""
    out: list = []
    for item in params:
        if isinstance(item, dict):
            out.extend(item["params"] if not hasattr(item["params"], "dtype") else [item["params"]])
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(item[1])  # named parameters
        else:
            out.append(item)
    return out


def why_not_fused(tensors) -> str:
    """'' when NpuFusedAdamW can take these parameters, else the reason (dtype or device)."""
    import torch

    tensors = [t for t in tensors if getattr(t, "requires_grad", True)]
    if not tensors:
        return "no trainable parameters"
    bad = sorted({str(t.dtype).replace("torch.", "") for t in tensors} - set(FUSED_DTYPES))
    if bad:
        return f"{'/'.join(bad)} parameters (NpuFusedAdamW takes float32/float16 only)"
    devices = sorted({t.device.type for t in tensors} - {"npu"})
    if devices:
        return f"parameters on {'/'.join(devices)} (NpuFusedAdamW needs npu tensors)"
    if any(isinstance(t, torch.Tensor) and type(t) is not torch.nn.Parameter and type(t) is not torch.Tensor
           for t in tensors):
        return "tensor subclasses (DTensor/FSDP) cannot be combined into one buffer"
    return ""
