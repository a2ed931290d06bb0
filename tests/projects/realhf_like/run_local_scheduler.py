"""Run under the shim: realhf's local scheduler's device assignment (realhf/scheduler/local/client.py) and a worker
started with it, which builds its model where realhf's use_cuda() says."""
import json
import os
import subprocess
import sys

from realhf.base import gpu_utils

WORKER = """
import json, torch
from realhf.impl import model
net = torch.nn.Linear(4, 4).to("cuda" if model.use_cuda() else "cpu")
print("WORKER " + json.dumps({"use_cuda": model.use_cuda(), "param_device": str(net.weight.device)}))
"""

# realhf/scheduler/local/client.py:88-90
visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpu_utils.gpu_count()))))
env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
proc = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, check=True)
worker = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("WORKER "))[len("WORKER "):])
print("RESULT " + json.dumps({"gpu_count": gpu_utils.gpu_count(), "visible": visible, **worker}))
