"""Twinkle's metric collection (Framework.gather_object, called on every actor of its Ray DPO cookbook) on an NPU
box without megatron-core."""
import sys

sys.modules["megatron"] = None  # a box without megatron-core, also where this machine has it

# imported after the line above, as on such a box
import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402
from twinkle.utils import DeviceMesh  # noqa: E402
from twinkle.utils.framework import Framework  # noqa: E402

dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
mesh = DeviceMesh(device_type="cuda", mesh=np.array([0]), mesh_dim_names=("dp",))
assert Framework.gather_object({"loss": 0.5}, mesh) == [{"loss": 0.5}]
assert Framework.gather_object([1, 2], mesh) == [1, 2]
dist.destroy_process_group()
print("OK twinkle_metrics")
