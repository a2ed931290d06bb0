"""cuDNN TF32 switches, the `is_built() and is_available()` gate and channels-last inputs, as CUDA training scripts
write them."""
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

# a --channels-last option: the model and each batch in the channels-last layout
conv = torch.nn.Conv2d(3, 4, 3).to(device, memory_format=torch.channels_last)
images = torch.randn(2, 3, 8, 8)
batch = images.to(device).permute(0, 2, 3, 1).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
assert torch.allclose(conv(batch).cpu(), torch.nn.functional.conv2d(images, conv.weight.cpu(), conv.bias.cpu()),
                      atol=1e-5)
print("OK precision_flags")
