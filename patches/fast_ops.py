"""Optional NPU fused kernels where the numerics are the same (off by default: ``ASCEND_SHIM_ENABLE=fast_ops``).

* ``torch.optim.AdamW`` -> ``torch_npu.optim.NpuFusedAdamW`` (what NPU ports of training loops do by hand) for
  fp32/fp16 parameters on the NPU, same update rule; anything else (bf16 params, maximize, capturable, tensor lr,
  params off the NPU, AdamW subclasses) keeps torch's AdamW, reported.
* RMSNorm -> ``torch_npu.npu_rms_norm``: ``torch.nn.RMSNorm``, and transformers' ``*RMSNorm`` modules whose
  forward is verified, per class, to compute ``weight * x * rsqrt(mean(x^2) + eps)`` (a numeric probe on CPU; a
  variant such as Gemma's ``(1 + weight)`` fails the probe and is left alone, reported).
* rotary (transformers' ``apply_rotary_pos_emb`` of Llama/Qwen2/Qwen3/Mistral, probed against rotate-half)
  -> ``torch_npu.npu_rotary_mul``; SwiGLU MLPs (``down(silu(gate(x)) * up(x))``) -> ``torch_npu.npu_swiglu``.

A fused op computes in fp32 and rounds once; the composite rounds after each op. In fp32 the results are the
same up to float reassociation; in fp16/bf16 they can differ in the last bit. Each swap is reported as a
translation; a call the fused op cannot take (dtype mix, device, shape) runs the original, reported once as a
fallback per reason.
"""
from __future__ import annotations

import functools
import inspect
import threading
import weakref

from ascend_shim.registry import PatchSet

REMOVE = "never: an opt-in speed-up"
fast_ops = PatchSet(
    id="fast_ops", title="NPU fused kernels: NpuFusedAdamW, npu_rms_norm, npu_rotary_mul, npu_swiglu (opt-in)",
    requires={"torch": ">=2.4,<2.15"}, default_enabled=False,
    checked_against="torch 2.13.0 + transformers 5.23.0 on the sim backend (emulated fused ops)",
)
_once_lock = threading.Lock()
_once: set = set()


def _first_time(key) -> bool:
    """True the first time ``key`` is seen (hot paths report a swap or a kept original once, not per call)."""
    if key in _once:
        return False
    with _once_lock:
        if key in _once:
            return False
        _once.add(key)
    return True


def _once_fallback(report, api: str, detail: str) -> None:
    if _first_time(("fallback", api, detail)):
        report.fallback(api, detail)


def _once_translated(report, api: str, detail: str) -> None:
    if _first_time(("translated", api, detail)):
        report.translated(api, detail)


# -- AdamW ---------------------------------------------------------------------------------------------------
@fast_ops.patch("torch.optim:AdamW", kind="replace",
                why="torch's AdamW runs one small kernel per tensor and op on the NPU; torch_npu's NpuFusedAdamW "
                    "updates all parameters from combined buffers (NPU training ports switch to it by hand).",
                what="torch.optim.AdamW(...) returns an NpuFusedAdamW (made safe for zero_grad(set_to_none=True)) "
                     "when every trainable parameter is fp32/fp16 on the NPU and no maximize/capturable/"
                     "differentiable/tensor-lr option is used; otherwise torch's AdamW, reported. AdamW "
                     "subclasses are never swapped.",
                remove_when=REMOVE)
def adamw(ctx):
    from ascend_shim.providers.fused_adamw import fused_adamw_class, params_of, why_not_fused

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

    class _SwapMeta(type(orig)):
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


# -- RMSNorm -------------------------------------------------------------------------------------------------
def _npu_rms_norm():
    import torch_npu

    return torch_npu.npu_rms_norm


@fast_ops.patch("torch.nn:RMSNorm.forward",
                why="torch.nn.RMSNorm is 5 kernels on the NPU; npu_rms_norm is one.",
                what="forward on an npu input whose dtype equals the weight's calls torch_npu.npu_rms_norm(x, "
                     "weight or ones, eps); other calls run the original (reported once per reason).",
                remove_when=REMOVE)
def torch_rmsnorm(ctx):
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


def _probe_rmsnorm(module):
    """(eps attribute name, '') when the class computes weight * x * rsqrt(mean(x^2) + eps), else (None, why)."""
    import torch

    cls = type(module)
    if cls in _probe_cache:
        return _probe_cache[cls]
    result = (None, "no 1-D weight or eps attribute")
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


@fast_ops.patch("transformers.modeling_utils:PreTrainedModel.post_init",
                requires={"transformers": ">=4.50,<5.24"},
                why="transformers' *RMSNorm modules are composites (5 kernels); npu_rms_norm is one kernel.",
                what="after a model is built, every module whose class name ends in RMSNorm and passes the numeric "
                     "probe gets a forward calling torch_npu.npu_rms_norm for npu inputs of the weight's dtype "
                     "(reported per class with the module count); classes failing the probe are kept, reported.",
                remove_when=REMOVE)
def hf_rmsnorm(ctx):
    orig, report = ctx.original, ctx.report
    swapped = weakref.WeakSet()

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
            eps_name, why = _probe_rmsnorm(m)
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


# -- rotary and SwiGLU in transformers' Llama-family modeling files ------------------------------------------
_FAMILIES = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}


def _rotate_half(x):
    import torch

    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _make_rotary(ctx, family):
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


def _make_swiglu(ctx, family):
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


for _mod, _fam in _FAMILIES.items():
    fast_ops.patch(f"transformers.models.{_mod}.modeling_{_mod}:apply_rotary_pos_emb", id=f"fast_ops.rotary.{_mod}",
                   requires={"transformers": ">=4.50,<5.24"},
                   why=f"{_fam}'s rotary is 6 kernels (two rotate_half cats, muls, adds); npu_rotary_mul is one.",
                   what="q/k of one dtype (= cos/sin dtype) on the NPU go through torch_npu.npu_rotary_mul (half "
                        "mode, B1SD cos/sin); other calls keep the composite (reported). The formula is probed "
                        "against rotate-half when the patch applies.",
                   remove_when=REMOVE, sweep=False)(functools.partial(_make_rotary, family=_fam))
    fast_ops.patch(f"transformers.models.{_mod}.modeling_{_mod}:{_fam}MLP.forward", id=f"fast_ops.swiglu.{_mod}",
                   requires={"transformers": ">=4.50,<5.24"},
                   why=f"{_fam}MLP computes silu(gate) * up as separate kernels; npu_swiglu is one.",
                   what="with hidden_act silu on the NPU: down(npu_swiglu(cat(gate(x), up(x)))); other "
                        "activations or devices keep the original (reported).",
                   remove_when=REMOVE, sweep=False)(functools.partial(_make_swiglu, family=_fam))

PATCH_SETS = [fast_ops]
