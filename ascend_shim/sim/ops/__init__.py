"""Emulated torch_npu fused ops for the sim backend.

Every name in ``__all__`` is the kernel of the ``torch.ops.npu`` operator of that name (:mod:`.library` registers
them, with their backward ops, at the NPU's dispatch keys); the emulated ``torch_npu`` exports the operators, as
torch_npu does: ``torch_npu.<name> is torch.ops.npu.<name>``. Each op is declared once, in the module implementing
it (:mod:`._registry`), and the names here are read from those declarations. ``torch_npu.optim.NpuFusedAdamW`` is
:class:`ascend_shim.sim.ops.optim.NpuFusedAdamW`.

The public functions accept npu tensors only (a host tensor is rejected as the real NPU-only ops reject it), then
validate every documented restriction (dtypes, head dims, head ratios, mask shapes, unsupported modes) and compute
with device-agnostic torch math (``_attention_core`` etc.). Each call is counted in
``ascend_shim.sim.counters.op_calls(<op name>)``. Features the hardware supports but the emulator does not
(quantization, prefix sparse modes, sinks, ...) raise :class:`NotEmulatedError`, a ``NotImplementedError`` (hence
``RuntimeError``) subclass whose message says so.

Sources: the torch_npu schemas and documentation, op-plugin's
``FlashAttentionKernelNpuOpApi.cpp`` (argument checks, numels, seed/offset, dpse/dsink returns) and the CANN
``flash_attention_score`` tiling (band anchoring, invalid-row correction, varlen rejections). Deliberate choices
where the hardware's behaviour is undocumented or where the emulator is stricter:

* rows with nothing to attend output 0 with ``softmax_max=-FLT_MAX, softmax_sum=FLT_MAX`` whenever the kernel's
  invalid-row correction applies (``inner_precise=2``, or auto-enabled: mode 3 with Sq > Skv, bands leaving empty
  rows); a user mask that masks a whole row with ``inner_precise`` 0/1 gives the select-then-softmax value (the
  uniform average of V), documented as "imprecise" on hardware; the inference ops always output 0 for such rows;
* sparse modes 2-4 without ``atten_mask``: the hardware silently computes full attention, the emulator raises;
  a 2048x2048 mask whose contents are not ``triu(ones, 1)`` is rejected (the hardware would use it silently);
* the dropout mask is a deterministic function of (seed, offset, numels, keep_prob), not Huawei's Philox stream;
  ``offset`` is drawn from the npu default generator, so ``torch.manual_seed`` reproduces it;
* TND rows past the last cumulative length (uninitialised on hardware) are zeros.
"""
from ..errors import NotEmulatedError as NotEmulatedError  # public; not in __all__ (not a torch_npu name)
from ._registry import specs as _specs

globals().update({spec.name: spec.kernel for spec in _specs() if not spec.internal})
__all__ = [spec.name for spec in _specs() if not spec.internal]
