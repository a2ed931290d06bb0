"""Kernels torch_npu registers from its native library that the emulator's device core registers from Python, so
that both torch_npu layers over the emulated device (the builtin one and Huawei's Python) find them: the sparse COO
ops (:mod:`.sparse`) and the NPU's attention kernel that lays out DTensor calls (:mod:`.dtensor_attention`)."""
from __future__ import annotations


def install() -> None:
    from . import dtensor_attention, sparse

    sparse.install()
    dtensor_attention.install()
