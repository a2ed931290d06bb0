"""Process-wide NPU settings a library call may change (TrainingArguments(tf32=...) drives HF32) are restored
after each test, so later tests see the defaults."""
import pytest
import torch


@pytest.fixture(autouse=True)
def restore_hf32_switches():
    saved = (torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32)
    yield
    torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32 = saved
