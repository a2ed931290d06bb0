"""npu tensors across processes on the emulated NPU: shared memory, as torch_npu's IPC memory (the Hogwild script in
tests/torch/cuda_scripts trains through it); what cannot be shared reaches the receiver as an error, never a hang."""
import os
import subprocess
import sys

import pytest
import torch

from ascend_shim.sim import _extension, ipc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_sharing_moves_the_storage_in_place():
    t = torch.arange(8.0, device="npu")
    view = t[2:6]
    live = _extension.load().memory_stats(0)["live_bytes"]
    device, handle, nbytes, offset = ipc.share_npu_(t.untyped_storage())[:4]
    assert device == t.device and nbytes == 32 and offset == 0 and handle.is_shared()
    assert _extension.load().memory_stats(0)["live_bytes"] == live  # the same bytes, now in shared memory
    assert ipc.share_npu_(t.untyped_storage())[1] is handle  # once per storage
    view.add_(100)  # the tensors on the storage work on the shared bytes
    assert torch.equal(torch.frombuffer(bytearray(bytes(handle)), dtype=torch.float32),
                       torch.tensor([0, 1, 102, 103, 104, 105, 6, 7.0]))
    other = torch.empty(0, device="npu").set_(ipc.new_shared_npu(device, handle, nbytes, offset), 0, (8,), (1,))
    other.mul_(2)  # what another process sees and writes
    assert t.tolist() == [0, 2, 204, 206, 208, 210, 12, 14]


@pytest.mark.slow
def test_what_cannot_be_shared_raises_in_the_receiver():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(ASCEND_SHIM_SIM_LAYER="builtin", PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate",
                           os.path.join(HERE, "scripts", "mp_sharing_errors.py")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    cases = dict(line[len("CASE "):].split(": ", 1) for line in proc.stdout.splitlines() if line.startswith("CASE "))
    assert cases["non_leaf"].startswith("SharingError: An npu tensor (4,) torch.float32 could not be sent") and \
        "Cowardly refusing to serialize non-leaf tensor" in cases["non_leaf"], cases
    assert "Cannot pickle NPU storage; try pickling a NPU tensor instead" in cases["bare_storage"], cases
    assert "Cannot re-initialize NPU in forked subprocess" in cases["forked_after_use"], cases
    assert cases["leaf"] == "received", cases
    assert "could not be sent to another process" in proc.stderr  # the sender's log says so too
