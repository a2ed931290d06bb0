"""(seed, offset) for the emulated dropout masks.

On hardware, ``npu_fusion_attention`` with ``keep_prob < 1`` takes ``philox_engine_inputs(10)`` -> ``(seed, offset)``
from the default NPU generator (advancing it), generates the dropout mask from them and returns both;
``npu_fusion_attention_grad`` regenerates the identical mask from the same ``(seed, offset, numels)``.

We reproduce that contract, not Huawei's bit stream: ``(seed, offset)`` is the device generator's Philox state and
the offset advances by 12 per call (10 rounded up to a multiple of 4) -- so ``torch.manual_seed(s)`` makes the
sequence of masks reproducible, interleaved npu random ops change it, and the cpu random stream is untouched -- and
the mask is a deterministic function of ``(seed, offset, numels, keep_prob)``.
"""
from __future__ import annotations

import threading

import torch

from .. import _extension

_lock = threading.Lock()


def _default_generator(device: torch.device) -> torch.Generator:
    device = torch.device(device)
    if device.type == "cpu":  # the device-agnostic implementations called directly with cpu tensors (tests)
        return torch.default_generator
    idx = device.index
    mod = getattr(torch, device.type, None)
    if idx is None:
        try:
            idx = int(mod.current_device())
        except Exception:  # noqa: BLE001
            idx = 0
    gens = getattr(mod, "default_generators", None) if mod is not None else None
    if gens is not None:
        try:
            return gens[idx]
        except Exception:  # noqa: BLE001 - fall through to the extension
            pass
    return _extension.load().default_generator(idx)


def philox_engine_inputs(device: torch.device, increment: int = 10) -> tuple[int, int]:
    """``(seed, offset)`` of the device's default generator; advances its offset by ``increment`` rounded up to
    a multiple of 4 (torch_npu's ``philox_engine_inputs(10)`` for the fused attention dropout)."""
    gen = _default_generator(device)
    if gen.device.type == "cpu":
        with _lock:
            offset = int(torch.randint(0, 1 << 40, (1,), generator=gen)) * 4
        return int(gen.initial_seed()), offset
    seed, offset = _extension.load().philox_engine_inputs(gen, int(increment))
    return int(seed), int(offset)


def keep_mask(seed: int, offset: int, numels: int, keep_prob: float, device: torch.device) -> torch.Tensor:
    """Bool tensor of ``numels`` elements, True = keep, P(keep) = keep_prob, deterministic in (seed, offset)."""
    mixed = (int(seed) * 0x9E3779B97F4A7C15 + int(offset) * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & ((1 << 63) - 1)
    g = torch.Generator(device="cpu")
    g.manual_seed(mixed)
    m = torch.rand(int(numels), generator=g) < float(keep_prob)
    return m if torch.device(device).type == "cpu" else m.to(device)
