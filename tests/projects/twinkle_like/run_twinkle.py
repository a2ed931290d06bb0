"""Run under the shim: Twinkle-style CUDA-first device choice and a leftover device='cuda' site."""
import json

import torch

from twinkle import framework

print("RESULT " + json.dumps({
    "gpu_available_to_twinkle": framework.is_gpu_available(),
    "device": framework.get_device(1),
    "zero_loss_device": framework.zero_loss().device.type,
    "user_sees_cuda": torch.cuda.is_available(),
}))
