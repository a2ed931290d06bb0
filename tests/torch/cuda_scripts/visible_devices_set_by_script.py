"""A script that picks its GPU in its own first lines, after importing torch and before its first CUDA call."""
import os

import torch

os.environ["CUDA_VISIBLE_DEVICES"] = "1"
expected = int(os.environ.get("EXPECTED_DEVICE_COUNT", "1"))  # the test's: what this run should see
assert torch.cuda.device_count() == expected, (torch.cuda.device_count(), expected)
x = torch.ones(2, device="cuda")
assert x.is_cuda and x.device.index == 0
os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2"  # after the first use: no effect on this process, as on CUDA
assert torch.cuda.device_count() == expected
print("OK visible_devices_set_by_script")
