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
* ``vllm.device: npu`` / ``vLLMConfig(device="npu")`` -- the setting of NPU ports of AReaL -- is accepted: the device
  of a vLLM server follows the platform (ASCEND_RT_VISIBLE_DEVICES + the vLLM-Ascend plugin), so the value is
  checked, recorded and kept out of the server command line (vLLM has no ``--device`` flag any more).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project

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
                    implementation=f"{__name__}.impl"
)


areal.patch("areal.api.cli_args:vLLMConfig.__init__", id="areal.vllm_config_device",
            why="NPU ports of AReaL add vLLMConfig.device ('npu'); upstream vLLMConfig has no such field, so "
                "vLLMConfig(device='npu') raises TypeError.",
            what="vLLMConfig(device=...) accepts npu/cuda/gpu/auto (anything else: a clear ValueError), records "
                 "it and keeps it as an instance attribute (config.device == 'npu') that is not a dataclass "
                 "field, so it never reaches the vLLM command line.",
            remove_when="https://github.com/inclusionAI/AReaL/blob/4aef98d8d818af55b43621aaadba047ae10f4e77/areal/api/"
                        "cli_args.py: AReaL's vLLMConfig has no device field, which configs written for NPU ports of "
                        "AReaL set",
            factory="vllm_config_init")


areal.patch("areal.api.cli_args:to_structured_cfg", id="areal.vllm_yaml_device",
            why="a YAML written for an NPU port sets vllm.device: npu; merging it into AReaL's structured "
                "config fails ('Key device not in vLLMConfig').",
            what="before the merge, a device key under vllm (or *.vllm_config) is checked (npu/cuda/gpu/auto), "
                 "recorded and dropped: the NPU platform already decides the server's device.",
            remove_when="https://github.com/inclusionAI/AReaL/blob/4aef98d8d818af55b43621aaadba047ae10f4e77/areal/api/"
                        "cli_args.py: AReaL's vLLMConfig has no device field, which configs written for NPU ports of "
                        "AReaL set",
            factory="to_structured_cfg")


PATCH_SETS = [areal]
