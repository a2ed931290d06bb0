"""torch serialization: a checkpoint written under the shim is the CUDA checkpoint the user's code believes it wrote.

Inside ``torch.save`` -- and so in distributed checkpoints, which write their non-tensor items through it and their
tensors from the CPU -- npu storages are tagged ``cuda[:N]`` and npu ``torch.device`` values are written as
``torch.device('cuda'[, N])``. The file opens unchanged on a CUDA machine, on plain CPU torch with ``map_location``
or ``weights_only=True``, and back under the shim onto the NPU (``torch.load`` restores cuda tags onto npu).
``ASCEND_SHIM_SAVE_DEVICE=npu`` keeps npu tags for pipelines that load on NPUs without the shim. safetensors files
carry no device and need nothing.

Tags come from torch's tagger registry and device objects from ``copyreg``: both are process-wide, so they act only
while the current thread is inside ``torch.save``; any other pickling is left exactly as torch does it.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = "never: CUDA machines and plain torch load checkpoints only if they say cuda"
serialization = PatchSet(
    id="torch_serialization", title="checkpoints say cuda: torch.save writes what CUDA code believes it saved",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)


serialization.patch("torch:save",
                    why="tensors on the NPU are tagged npu:N and torch.device('cuda') objects became npu ones: a "
                        "checkpoint written that way opens neither on a CUDA machine nor on plain torch with "
                        "map_location or weights_only=True.",
                    what="inside torch.save (distributed checkpoints included) npu storages are tagged cuda:N and "
                         "npu torch.device values are written as cuda ones, as a CUDA run writes them "
                         "(ASCEND_SHIM_SAVE_DEVICE=npu keeps npu); each save holding npu data is reported with "
                         "the choice made.",
                    remove_when=REMOVE, factory="save_as_cuda")


PATCH_SETS = [serialization]
