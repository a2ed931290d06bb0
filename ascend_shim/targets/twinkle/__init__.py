"""Twinkle (modelscope/twinkle, distribution ``twinkle-kit``): its own NPU platform, chosen under the shim.

Twinkle supports Ascend natively (``twinkle/utils/platforms/npu.py``: 'npu', hccl, ASCEND_RT_VISIBLE_DEVICES,
HCCL port ranges; ``kernel/npu_impls``; ``hccl_checkpoint_engine``), but decides the device in two CUDA-first
places: ``Torch.is_gpu_available()`` (``torch.cuda.is_available()``, checked before ``is_npu_available()`` in
get_device/set_device/seed_everything/empty_cache) and ``Platform.get_platform()`` (``npu-smi`` on PATH, else
``nvidia-smi``, else MPS, else **GPU**). User cookbooks name the accelerator ``DeviceMesh(device_type='cuda')``
and ``DeviceGroup(device_type='GPU')``. This set:

* declares Twinkle NPU-native (its frames get the real CUDA answers): ``is_gpu_available()`` is False, the NPU
  branches run ('npu:N', torch.npu.set_device, ASCEND_LAUNCH_BLOCKING / HCCL_DETERMINISTIC);
* makes ``Platform.get_platform()`` answer ``NPU`` when the NPU backend is up -- also where ``npu-smi`` is not on
  PATH (containers, the emulator), where upstream would fall back to GPU -- and maps an explicit 'GPU'/'CUDA'
  request to ``NPU`` (reported);
* translates ``device_type='cuda'`` of Twinkle's ``DeviceMesh`` and 'GPU'/'cuda' of ``DeviceGroup`` to the NPU
  names (reported). torch's own ``DeviceMesh``/``init_device_mesh('cuda')`` are translated by torch_distributed.

* answers ``importlib.util.find_spec('megatron.core')`` in ``twinkle/utils/framework.py`` (its NPU-only branch of
  ``gather_object``) with None when Megatron is not installed, as for any absent module: Python raises
  ModuleNotFoundError there for the missing parent package, which ended every Ray actor of the DPO cookbook.

Leftover ``device='cuda'`` sites (``utils/nccl_safe.py`` zero-loss fallback, native_fsdp's ``or 'cuda'``) are
covered by torch_devices; ring attention's private ``flash_attn.flash_attn_interface._flash_attn_varlen_forward
/_backward`` are served by the flash_attn set's provider.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project


REMOVE = ("https://github.com/modelscope/twinkle/blob/1a1d8845dc6de05c7957bada323b0cc5c5e90f35/src/twinkle/utils/"
          "platforms/base.py: get_platform() picks the NPU only when npu-smi is on PATH, else GPU")
SPEC = ">=0.4.0.dev0,<0.6"
twinkle = PatchSet(
    project=Project("twinkle", SPEC, dist="twinkle-kit"), native=("twinkle",),
    native_why="Twinkle's Torch.is_gpu_available() (torch.cuda.is_available()) is checked before its NPU branch; "
               "with the answer user code gets (True) Twinkle builds 'cuda:N' devices and sets CUDA-only flags "
               "(CUDA_LAUNCH_BLOCKING, cuDNN) next to an NPU Platform.",
    id="twinkle", title="Twinkle: its NPU platform, 'cuda'/'GPU' device meshes and groups -> npu/NPU",
    checked_against="twinkle-kit 0.5.1 (PyPI wheel) and modelscope/twinkle @ 1a1d8845dc6d (0.4.0.dev0); gated "
                    f"on the twinkle-kit distribution's version, or twinkle/version.py for a checkout ({SPEC})",
                    implementation=f"{__name__}.impl"
)


twinkle.patch("twinkle.utils.platforms.base:Platform.get_platform", id="twinkle.get_platform",
              covers=("program:nvidia-smi",),
              why="get_platform() picks NPU only if npu-smi is on PATH and otherwise falls back to GPU (cuda, "
                  "nccl, CUDA_VISIBLE_DEVICES); cookbooks and Ray helpers also ask for 'GPU' explicitly.",
              what="with the NPU backend up, get_platform() and get_platform('GPU'/'CUDA') answer Twinkle's NPU "
                   "platform (the explicit GPU request is reported); 'NPU', 'MPS' and an NPU-less process are "
                   "unchanged.",
              remove_when=REMOVE, factory="get_platform")


twinkle.patch("twinkle.utils.device_mesh:DeviceMesh.__post_init__", id="twinkle.device_mesh",
              why="cookbooks build twinkle.DeviceMesh(device_type='cuda', ...); the mesh then creates torch "
                  "device meshes, process groups and tensors on 'cuda'.",
              what="device_type 'cuda' becomes 'npu' (reported) before Twinkle's own checks run.",
              remove_when="never: Twinkle's CUDA cookbooks name cuda and GPU devices, which an NPU never answers to",
              factory="device_mesh_post_init")


twinkle.patch("twinkle.utils.device_mesh:DeviceGroup.__init__", id="twinkle.device_group",
              why="cookbooks declare DeviceGroup(device_type='GPU' or 'cuda'); Ray placement then asks for GPU "
                  "resources and CUDA_VISIBLE_DEVICES, which an Ascend node does not offer.",
              what="device_type 'GPU'/'cuda' becomes 'NPU' (reported) when the NPU backend is up; 'CPU' and "
                   "'NPU' are unchanged.",
              remove_when="never: Twinkle's CUDA cookbooks name cuda and GPU devices, which an NPU never answers to",
              factory="device_group_init")


twinkle.patch("twinkle.utils.framework:importlib", kind="replace", id="twinkle.find_spec_megatron",
              fidelity="fallback",
              why="Framework.gather_object's NPU-only branch asks importlib.util.find_spec('megatron.core'), which "
                  "raises ModuleNotFoundError when Megatron is not installed (the parent package is imported "
                  "first); on Ascend without megatron-core every actor of Twinkle's Ray DPO cookbook dies at its "
                  "first metric collection.",
              what="in twinkle/utils/framework.py, find_spec answers None for a module whose parent package is "
                   "not installed (reported), so the Megatron group is simply not used; every other find_spec "
                   "answer and every other use of importlib there is Python's own.",
              remove_when="https://github.com/modelscope/twinkle/blob/1a1d8845dc6de05c7957bada323b0cc5c5e90f35/src/"
                          "twinkle/utils/framework.py: gather_object calls find_spec('megatron.core') unguarded on "
                          "the NPU path",
              factory="find_spec_megatron")


PATCH_SETS = [twinkle]
