"""A training script that configures the CUDA caching allocator in its first lines, before importing torch."""
import os

os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
import torch  # noqa: E402

x = torch.zeros(4, device="cuda")
assert os.environ.get("PYTORCH_NPU_ALLOC_CONF") == "expandable_segments:True", os.environ.get("PYTORCH_NPU_ALLOC_CONF")
assert x.device.type == "npu"
print("OK alloc_conf_before_torch")
