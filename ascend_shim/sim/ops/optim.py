"""Emulated ``torch_npu.optim.NpuFusedAdamW`` (torch_npu ``optim/npu_fused_adamw.py`` + ``npu_fused_optim_base.py``).

Behaviour reproduced from the real class:

* signature ``NpuFusedAdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False)`` and
  its ``ValueError`` argument checks; no ``maximize``/``foreach``/``fused``/``capturable``;
* parameters and gradients are "combined" lazily at the first ``step()``/``zero_grad()`` that sees gradients:
  only float32/float16 parameters are accepted -- anything else, bf16 included, raises
  ``TypeError("Fused optimizer's parameters must be either float32 or float16, but received ...")`` then; they must
  be npu tensors (``npu_combine_tensors``: "Tensors to combine must be on NPU");
* the combined set is frozen: parameters whose ``.grad`` was None at that moment are never updated afterwards, and
  the gradient tensors captured then are the ones read and zeroed (a ``.grad`` replaced by a new tensor is not seen,
  as the flat buffer on hardware would not see it);
* ``zero_grad(set_to_none=False)`` by default, zeroing in place; ``set_to_none=True`` raises
  ``ValueError("set_to_none is not supported in fused optimizers")``;
* update = decoupled weight decay ``p *= 1 - lr * wd`` then Adam with bias correction, per-parameter ``state['step']``
  as a Python int -- the same numbers as ``torch.optim.AdamW``.
"""
from __future__ import annotations

import math

import torch
from torch.optim.optimizer import Optimizer

__all__ = ["NpuFusedAdamW"]


class NpuFusedAdamW(Optimizer):
    r"""Implements AdamW algorithm (emulated fused NPU version). See the module docstring."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if betas[0] < 0.0 or betas[0] >= 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if betas[1] < 0.0 or betas[1] >= 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults)
        self.is_fused_optimizer = True
        self.is_params_grads_combined = False
        # set when is_params_grads_combined: per group, (param, captured grad tensor) pairs and the combined state's
        # step counter
        self._combined: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        self._combined_step: list[int | None] = []

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    # ---------------------------------------------------------------------------------------------- combining
    def _maybe_combine(self):
        if self.is_params_grads_combined:
            return
        combined = []
        any_grad = False
        for group in self.param_groups:
            pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype not in (torch.float32, torch.float16):
                    raise TypeError("Fused optimizer's parameters must be either float32 or float16, but received "
                                    f"{p.dtype}")
                if (p.device.type != "npu" or p.grad.device.type != "npu"):
                    raise RuntimeError("Tensors to combine must be on NPU, got {}.".format(
                        p.device.type if p.device.type != "npu" else p.grad.device.type))
                if p.grad.is_sparse:
                    raise RuntimeError("NpuFusedAdamW does not support sparse gradients, please consider "
                                       "SparseAdam instead")
                pairs.append((p, p.grad))
                any_grad = True
            combined.append(pairs)
        if any_grad:
            self._combined = combined
            self._combined_step = [None] * len(self.param_groups)
            self.is_params_grads_combined = True

    def _init_state(self, p, amsgrad):
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    # ------------------------------------------------------------------------------------------------- step
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._maybe_combine()
        if not self.is_params_grads_combined:
            return loss
        for gi, group in enumerate(self.param_groups):
            amsgrad = group["amsgrad"]
            for p in group["params"]:  # as the real _group_step: every param with a grad counts a step
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise RuntimeError("NpuFusedAdamW does not support sparse gradients, please consider "
                                           "SparseAdam instead")
                    self._init_state(p, amsgrad)["step"] += 1
            pairs = self._combined[gi]
            if not pairs:
                continue
            step = self._combined_step[gi]
            step = (self.state[pairs[0][0]]["step"] - 1 if step is None else step) + 1
            self._combined_step[gi] = step
            beta1, beta2 = group["betas"]
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            for dtype in (torch.float32, torch.float16):  # one "combined buffer" per dtype
                sel = [(p, g) for p, g in pairs if p.dtype == dtype]
                if not sel:
                    continue
                params = [p for p, _ in sel]
                grads = [g for _, g in sel]
                states = [self._init_state(p, amsgrad) for p in params]
                exp_avgs = [s["exp_avg"] for s in states]
                exp_avg_sqs = [s["exp_avg_sq"] for s in states]
                torch._foreach_mul_(params, 1 - lr * wd)
                torch._foreach_mul_(exp_avgs, beta1)
                torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
                torch._foreach_mul_(exp_avg_sqs, beta2)
                torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
                if amsgrad:
                    maxes = [s["max_exp_avg_sq"] for s in states]
                    torch._foreach_maximum_(maxes, exp_avg_sqs)
                    denom = torch._foreach_sqrt(maxes)
                else:
                    denom = torch._foreach_sqrt(exp_avg_sqs)
                torch._foreach_div_(denom, math.sqrt(bias_correction2))
                torch._foreach_add_(denom, eps)
                torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)
        return loss

    @torch.no_grad()
    def zero_grad(self, set_to_none=False):
        if set_to_none:
            raise ValueError("set_to_none is not supported in fused optimizers")
        if not self.is_params_grads_combined:
            self._maybe_combine()
            if not self.is_params_grads_combined:
                super().zero_grad(set_to_none)
                return
        grads = [g for pairs in self._combined for _, g in pairs]
        if grads:
            torch._foreach_zero_(grads)
