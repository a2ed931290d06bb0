"""CUDA-first platform detection and per-server device visibility, as AReaL main does it."""
import os

import torch


class CudaPlatform:
    device_type, communication_backend, device_control_env_var = "cuda", "nccl", "CUDA_VISIBLE_DEVICES"


class UnknownPlatform(CudaPlatform):
    pass


class NPUPlatform:
    device_type, communication_backend, device_control_env_var = "npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES"


class CpuPlatform:
    device_type, communication_backend, device_control_env_var = "cpu", "gloo", ""


def is_npu_available():
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch, "npu") and torch.npu.is_available()


def init_platform():
    if torch.cuda.is_available():  # CUDA first
        if "NVIDIA" in torch.cuda.get_device_name().upper():
            return CudaPlatform()
        return UnknownPlatform()
    if is_npu_available():
        return NPUPlatform()
    return CpuPlatform()


def server_envs(platform, n_servers, gpus_per_server):
    """One env per vLLM server: os.environ copied, the platform's visibility variable set per server."""
    var = platform.device_control_env_var
    visible = os.environ[var].split(",") if var in os.environ else [str(i) for i in range(n_servers * gpus_per_server)]
    envs = []
    for j in range(n_servers):
        env = os.environ.copy()
        env[var] = ",".join(visible[j * gpus_per_server:(j + 1) * gpus_per_server])
        envs.append(env)
    return envs


def optimizer_device(device_id):
    """PerLayerOptimWrapper: an int device id becomes a CUDA device."""
    return torch.device(f"cuda:{device_id}") if isinstance(device_id, int) else torch.device(device_id)
