"""Run under the shim: AReaL-style platform detection, vLLM server envs for 2 servers, optimizer device."""
import json
import subprocess
import sys

import torch

from areal import platforms

platform = platforms.init_platform()
envs = platforms.server_envs(platform, 2, 1)
out = {
    "platform": type(platform).__name__,
    "backend": platform.communication_backend,
    "env_var": platform.device_control_env_var,
    "servers": [{k: env.get(k) for k in (platform.device_control_env_var, "CUDA_VISIBLE_DEVICES")} for env in envs],
    "optimizer_device": str(platforms.optimizer_device(1)),
    "tensor_device": str(torch.zeros(1, device=platforms.optimizer_device(0)).device),
}
if "--children" in sys.argv:
    child = ("import json, os, sys, ascend_shim; from areal import platforms; "
             "p = platforms.init_platform(); "
             "print(json.dumps({'active': ascend_shim.is_active(), 'platform': type(p).__name__, "
             "'visible': os.environ.get(p.device_control_env_var)}))")
    out["children"] = []
    for env in envs:
        proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out["children"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
print("RESULT " + json.dumps(out))
