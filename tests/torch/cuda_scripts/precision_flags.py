"""cuDNN TF32 switches and the `is_built() and is_available()` gate, as CUDA training scripts write them."""
import torch

# the usual gate: both must hold for the GPU path
device = "cuda" if torch.backends.cuda.is_built() and torch.cuda.is_available() else "cpu"
assert device == "cuda", "the gate picked the CPU"

# full-precision convolutions (reproducibility runs turn TF32 off)
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = False
assert torch.npu.conv.allow_hf32 is False
torch.backends.cudnn.allow_tf32 = True
assert torch.npu.conv.allow_hf32 is True
torch.backends.cudnn.conv.fp32_precision = "ieee"  # torch's newer switch
assert torch.npu.conv.allow_hf32 is False
torch.backends.cudnn.conv.fp32_precision = "tf32"
with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
    assert torch.npu.conv.allow_hf32 is False
    y = torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device=device), torch.ones(1, 1, 3, 3, device=device))
assert torch.npu.conv.allow_hf32 is True
assert y.sum().item() == 4 * 9.0
print("OK precision_flags")
