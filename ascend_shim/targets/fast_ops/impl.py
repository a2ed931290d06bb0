"""The optional NPU fused kernels of the ``fast_ops`` patch set: NpuFusedAdamW, npu_rms_norm, npu_rotary_mul,
npu_swiglu in place of their composites, each where a probe or the call's arguments show the same computation.

A swap, or an original kept for a reason, is reported once per process (hot paths), not per call.
"""
from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


_once_lock = threading.Lock()
_once: set = set()


def _first_time(key: Any) -> bool:
    """True the first time ``key`` is seen (hot paths report a swap or a kept original once, not per call)."""
    if key in _once:
        return False
    with _once_lock:
        if key in _once:
            return False
        _once.add(key)
    return True


def _once_fallback(report: Report, api: str, detail: str) -> None:
    if _first_time(("fallback", api, detail)):
        report.fallback(api, detail)


def _once_translated(report: Report, api: str, detail: str) -> None:
    if _first_time(("translated", api, detail)):
        report.translated(api, detail)


def swapping_adamw(ctx: PatchContext) -> type:
    """torch.optim.AdamW as a class whose instances are NpuFusedAdamW where the fused optimizer computes the same
    update (reported either way); subclasses of AdamW are never swapped."""
    from ascend_shim.targets._shared.fused_adamw import fused_adamw_class, params_of, why_not_fused

    orig, report = ctx.original, ctx.report
    sig = inspect.signature(orig.__init__)

    def why_not(bound) -> str:
        a = bound.arguments
        for flag in ("maximize", "capturable", "differentiable"):
            if a.get(flag):
                return f"{flag}=True (NpuFusedAdamW has no such option)"
        import torch

        if isinstance(a.get("lr"), torch.Tensor) or any(isinstance(b, torch.Tensor) for b in a.get("betas", ())):
            return "tensor lr/betas"
        return why_not_fused(params_of(a["params"]))

    class _SwapMeta(type(orig)):  # type: ignore[misc]  # AdamW's own metaclass, whatever torch makes it
        def __call__(cls, params, *args, **kwargs):
            if cls is not AdamW:
                return super().__call__(params, *args, **kwargs)
            params = list(params)
            try:
                bound = sig.bind(None, params, *args, **kwargs)
            except TypeError:
                return super().__call__(params, *args, **kwargs)  # let torch raise its own error
            bound.apply_defaults()
            reason = why_not(bound)
            if reason:
                report.fallback("torch.optim.AdamW", f"kept torch.optim.AdamW: {reason}")
                return super().__call__(params, *args, **kwargs)
            a = bound.arguments
            opt = fused_adamw_class()(params, lr=a["lr"], betas=a["betas"], eps=a["eps"],
                                      weight_decay=a["weight_decay"], amsgrad=a["amsgrad"])
            report.translated("torch.optim.AdamW", "torch_npu.optim.NpuFusedAdamW")
            return opt

    AdamW = _SwapMeta(orig.__name__, (orig,), {"__module__": orig.__module__, "__qualname__": orig.__qualname__,
                                               "__doc__": orig.__doc__})
    return AdamW


def _npu_rms_norm() -> Callable:
    import torch_npu

    return torch_npu.npu_rms_norm


def rmsnorm_forward(ctx: PatchContext) -> Callable:
    """torch.nn.RMSNorm.forward calling npu_rms_norm for npu inputs of the weight's dtype."""
    import torch

    orig, report = ctx.original, ctx.report
    rms = _npu_rms_norm()

    @functools.wraps(orig)
    def forward(self, x):
        w = self.weight
        if x.device.type != "npu" or (w is not None and w.dtype != x.dtype) or not 2 <= x.dim() <= 8:
            _once_fallback(report, "torch.nn.RMSNorm", f"kept the composite for a {x.dtype} {x.device.type} input"
                                                       f"{'' if w is None else f' with {w.dtype} weight'}")
            return orig(self, x)
        if w is None:
            w = torch.ones(self.normalized_shape, dtype=x.dtype, device=x.device)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        _once_translated(report, "torch.nn.RMSNorm", "torch_npu.npu_rms_norm")
        return rms(x, w, eps)[0]

    return forward


_RMS_EPS_NAMES = ("variance_epsilon", "eps", "epsilon", "rms_norm_eps")
_probe_cache: dict = {}


def probe_rmsnorm(module: torch.nn.Module) -> tuple[str | None, str]:
    """(eps attribute name, '') when the class computes weight * x * rsqrt(mean(x^2) + eps), else (None, why)."""
    import torch

    cls = type(module)
    if cls in _probe_cache:
        return _probe_cache[cls]
    result: tuple[str | None, str] = (None, "no 1-D weight or eps attribute")
    w = getattr(module, "weight", None)
    eps_name = next((n for n in _RMS_EPS_NAMES if isinstance(module.__dict__.get(n), float)), None)
    if isinstance(w, torch.nn.Parameter) and w.dim() == 1 and eps_name:
        try:
            fake = cls.__new__(cls)
            torch.nn.Module.__init__(fake)
            for k, v in module.__dict__.items():
                if not k.startswith("_") and not isinstance(v, (torch.Tensor, torch.nn.Module)):
                    fake.__dict__[k] = v
            n = w.shape[0]
            g = torch.Generator().manual_seed(0)
            fake.weight = torch.nn.Parameter(torch.rand(n, generator=g) + 0.5)
            x = torch.randn(2, 3, n, generator=g)
            with torch.no_grad():
                got = cls.forward(fake, x)
                eps = module.__dict__[eps_name]
                want = fake.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
            ok = isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, atol=1e-5,
                                                                                             rtol=1e-5)
            result = (eps_name, "") if ok else (None, "its forward is not weight * x * rsqrt(mean(x^2) + eps)")
        except Exception as exc:  # a forward with other arguments: not the plain RMSNorm
            result = (None, f"probe failed ({type(exc).__name__})")
    _probe_cache[cls] = result
    return result


def rmsnorm_post_init(ctx: PatchContext) -> Callable:
    """PreTrainedModel.post_init that gives every probed *RMSNorm module a forward calling npu_rms_norm."""
    orig, report = ctx.original, ctx.report
    swapped: weakref.WeakSet[Any] = weakref.WeakSet()

    def make_forward(eps_name, cls_name):
        rms = _npu_rms_norm()

        def forward(self, hidden_states, *args, **kwargs):
            w = self.weight
            if (args or kwargs or hidden_states.device.type != "npu" or w.dtype != hidden_states.dtype
                    or not 2 <= hidden_states.dim() <= 8):
                _once_fallback(report, cls_name, f"kept the composite for a {hidden_states.dtype} "
                                                 f"{hidden_states.device.type} input with {w.dtype} weight")
                return type(self).forward(self, hidden_states, *args, **kwargs)
            return rms(hidden_states, w, getattr(self, eps_name))[0]

        return forward

    @functools.wraps(orig)
    def post_init(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        counts: dict = {}
        for m in self.modules():
            name = type(m).__name__
            if not name.endswith("RMSNorm") or m in swapped or "forward" in m.__dict__:
                continue
            eps_name, why = probe_rmsnorm(m)
            if eps_name is None:
                _once_fallback(report, name, f"kept: {why}")
                continue
            m.forward = make_forward(eps_name, name).__get__(m)
            swapped.add(m)
            counts[name] = counts.get(name, 0) + 1
        for name, n in counts.items():
            report.translated(f"{name}.forward", f"torch_npu.npu_rms_norm ({n} modules of {type(self).__name__})")
        return result

    def undo():
        for m in list(swapped):
            m.__dict__.pop("forward", None)
        _once.clear()

    ctx.on_undo(undo)
    return post_init


def _rotate_half(x: Any) -> Any:
    import torch

    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(ctx: PatchContext, family: str) -> Callable:
    """``apply_rotary_pos_emb`` of ``family`` on npu_rotary_mul, once the original is probed to be rotate-half."""
    import torch

    from ascend_shim.errors import TargetMissing

    orig, report = ctx.original, ctx.report
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    cos, sin = torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    got = orig(q, k, cos, sin)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    if not (torch.allclose(got[0], q * c + _rotate_half(q) * s, atol=1e-6)
            and torch.allclose(got[1], k * c + _rotate_half(k) * s, atol=1e-6)):
        raise TargetMissing(f"{family} apply_rotary_pos_emb is not the rotate-half formula here")
    import torch_npu

    rotary_mul = torch_npu.npu_rotary_mul
    api = f"{family}.apply_rotary_pos_emb"

    @functools.wraps(orig)
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, *args, **kwargs):
        if (args or kwargs or unsqueeze_dim != 1 or q.device.type != "npu" or q.dim() != 4 or k.dim() != 4
                or cos.dim() != 3 or not (q.dtype == k.dtype == cos.dtype == sin.dtype)):
            _once_fallback(report, api, f"kept the composite for q {q.dtype}/{q.device.type}, cos {cos.dtype}")
            return orig(q, k, cos, sin, unsqueeze_dim, *args, **kwargs)
        _once_translated(report, api, "torch_npu.npu_rotary_mul")
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return rotary_mul(q, c, s), rotary_mul(k, c, s)

    return apply_rotary_pos_emb


def swiglu_forward(ctx: PatchContext, family: str) -> Callable:
    """``<family>MLP.forward`` with ``silu(gate) * up`` done by npu_swiglu."""
    import torch

    orig, report = ctx.original, ctx.report
    import torch_npu

    swiglu = torch_npu.npu_swiglu
    api = f"{family}MLP.forward"

    @functools.wraps(orig)
    def forward(self, x, *args, **kwargs):
        act = getattr(getattr(self, "config", None), "hidden_act", None)
        if args or kwargs or x.device.type != "npu" or act not in ("silu", "swish"):
            _once_fallback(report, api, f"kept the composite (act {act}, {x.device.type} input)")
            return orig(self, x, *args, **kwargs)
        gate, up = self.gate_proj(x), self.up_proj(x)
        if gate.dtype != up.dtype:
            _once_fallback(report, api, f"kept the composite for gate {gate.dtype} / up {up.dtype}")
            return self.down_proj(self.act_fn(gate) * up)
        _once_translated(report, api, "silu(gate) * up -> torch_npu.npu_swiglu")
        return self.down_proj(swiglu(torch.cat((gate, up), dim=-1), dim=-1))

    return forward
