"""AReaL (inclusionAI/AReaL, ``areal`` package): its own NPU platform, chosen under the shim.

AReaL already supports Ascend: ``areal/infra/platforms/npu.py`` (``areal/platforms/`` in 0.5.x) declares
``device_type="npu"``, ``communication_backend="hccl"`` and ``device_control_env_var="ASCEND_RT_VISIBLE_DEVICES"``,
and everything device-specific goes through ``current_platform``. But platform detection asks
``torch.cuda.is_available()`` *first*: with the shim's answer for user code (True on an NPU) AReaL would read
the device name "Ascend910B..." (no "NVIDIA"), fall back to ``UnknownPlatform`` and use nccl and
``CUDA_VISIBLE_DEVICES`` -- every vLLM server child would then see all NPUs and start on NPU 0.

So this set declares AReaL NPU-native: AReaL's frames get the real CUDA answers (False on an NPU) and its
detection picks ``NPUPlatform``. The rest of AReaL's CUDA surface needs no project patch:

* ``PerLayerOptimWrapper`` builds ``torch.device(f"cuda:{device_id}")``: torch_devices turns it into npu:N;
* vLLM server children (``launch_server_cmd`` copies ``os.environ``) inherit activation through the bootstrap
  ``sitecustomize`` and get ``ASCEND_RT_VISIBLE_DEVICES`` per server from AReaL itself; in those children the
  ``vllm`` set declares vLLM and vLLM-Ascend native (vLLM-Ascend is a platform plugin that expects real CUDA
  answers);
* ``vllm.device: npu`` / ``vLLMConfig(device="npu")`` -- the setting of NPU ports of AReaL -- is accepted: the device of a
  vLLM server follows the platform (ASCEND_RT_VISIBLE_DEVICES + the vLLM-Ascend plugin), so the value is
  checked, recorded and kept out of the server command line (vLLM has no ``--device`` flag any more).
"""
from __future__ import annotations

import functools

from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project

REMOVE = "AReaL checks the NPU before CUDA in platform detection (as its ascend-v1.0.1 branch does)"
SPEC = ">=0.5,<1.1"
areal = PatchSet(
    project=Project("areal", SPEC, dist="areal"), native=("areal",),
    native_why="AReaL's platform detection checks torch.cuda.is_available() before its NPU platform; with the "
               "answer user code gets (True) it reads 'Ascend...' as an unknown CUDA device -> UnknownPlatform, "
               "nccl, CUDA_VISIBLE_DEVICES for every vLLM server (all on NPU 0).",
    id="areal", title="AReaL: its own NPU platform (hccl, ASCEND_RT_VISIBLE_DEVICES per vLLM server)",
    checked_against="areal 1.0.4 (PyPI wheel, = main @ 4aef98d8d818, areal/infra/platforms) and 0.5.1 "
                    "(@ c5711f06a7a8, areal/platforms); gated on the areal distribution's version, or for a "
                    f"checkout without metadata on areal/version.py ({SPEC}; no literal version: accepted)",
)


_DEVICES = {"npu": "npu", "cuda": "npu", "auto": "npu", "gpu": "npu"}


def _check_device(value, report, where):
    name = str(value).strip().lower().partition(":")[0]
    if name not in _DEVICES:
        raise ValueError(f"{where}={value!r}: under ascend_shim a vLLM server runs on the NPU platform "
                         f"(accepted: {', '.join(sorted(_DEVICES))}); patch areal.vllm_config_device")
    report.translated(where, f"{value!r}: the vLLM server device follows AReaL's NPU platform "
                             "(ASCEND_RT_VISIBLE_DEVICES, vLLM-Ascend); not passed to vLLM")
    return _DEVICES[name]


@areal.patch("areal.api.cli_args:vLLMConfig.__init__", id="areal.vllm_config_device",
             why="NPU ports of AReaL add vLLMConfig.device ('npu'); upstream vLLMConfig has no such field, so "
                 "vLLMConfig(device='npu') raises TypeError.",
             what="vLLMConfig(device=...) accepts npu/cuda/gpu/auto (anything else: a clear ValueError), records "
                  "it and keeps it as an instance attribute (config.device == 'npu') that is not a dataclass "
                  "field, so it never reaches the vLLM command line.",
             remove_when="AReaL's vLLMConfig grows a device field, or configs written for NPU ports are gone")
def vllm_config_init(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, device=None, **kwargs):
        orig(self, *args, **kwargs)
        if device is not None:
            object.__setattr__(self, "device", _check_device(device, report, "vLLMConfig.device"))

    return __init__


def _pop_vllm_device(cfg, config_cls, report):
    """Remove ``device`` from a vLLMConfig node (the node itself, or ``vllm`` / ``*.vllm`` children)."""
    try:
        from omegaconf import DictConfig, OmegaConf, open_dict
    except ImportError:
        return
    if not isinstance(cfg, DictConfig):
        return
    nodes = []
    if getattr(config_cls, "__name__", "") == "vLLMConfig":
        nodes.append(("vllm", cfg))
    for key in list(cfg.keys()):
        child = cfg.get(key) if OmegaConf.is_dict(cfg) else None
        if not isinstance(child, DictConfig):
            continue
        if key in ("vllm", "vllm_config"):
            nodes.append((str(key), child))
        inner = child.get("vllm_config") if "vllm_config" in child else None
        if isinstance(inner, DictConfig):
            nodes.append((f"{key}.vllm_config", inner))
    for where, node in nodes:
        if "device" in node:
            with open_dict(node):
                value = node.pop("device")
            _check_device(value, report, f"{where}.device")


@areal.patch("areal.api.cli_args:to_structured_cfg", id="areal.vllm_yaml_device",
             why="a YAML written for an NPU port sets vllm.device: npu; merging it into AReaL's structured "
                 "config fails ('Key device not in vLLMConfig').",
             what="before the merge, a device key under vllm (or *.vllm_config) is checked (npu/cuda/gpu/auto), "
                  "recorded and dropped: the NPU platform already decides the server's device.",
             remove_when="AReaL's vLLMConfig grows a device field, or configs written for NPU ports are gone")
def to_structured_cfg(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def to_structured_cfg(cfg, config_cls, *args, **kwargs):
        _pop_vllm_device(cfg, config_cls, report)
        return orig(cfg, config_cls, *args, **kwargs)

    return to_structured_cfg


PATCH_SETS = [areal]
