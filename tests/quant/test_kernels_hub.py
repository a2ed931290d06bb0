"""The ``kernels`` hub (real package, offline) on the emulated NPU: torch_npu reports the emulated machine's CANN
version, the same valid one on both layers, and kernels' own NPU path picks the repository's CANN build; a repository
without one is one line (still the FileNotFoundError kernels raises there), recorded in the report."""
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.sim import CANN_VERSION
from ascend_shim.sim.real_layer import find_prepared

pytest.importorskip("kernels")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAJOR, MINOR = CANN_VERSION.split(".")[:2]
#: the build variant kernels picks on the emulated NPU: this torch, this machine, the emulated CANN
CANN_ARCH = (f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}"
             f"{'-cxx11' if torch.compiled_with_cxx11_abi() else '-cxx98'}-cann{MAJOR}{MINOR}-"
             f"{platform.machine()}-linux")
CUDA_ARCH = CANN_ARCH.replace(f"cann{MAJOR}{MINOR}", "cu128")


def _variant(root, name: str, backend: str, module: str = "relu"):
    where = root / "build" / name / module
    where.mkdir(parents=True)
    meta = {"id": f"{module}_{name.replace('-', '_')}_{abs(hash(str(root))) % 10**8}", "name": module, "version": 1,
            "license": "apache-2.0", "python-depends": [], "backend": {"type": backend}}
    (root / "build" / name / "metadata.json").write_text(json.dumps(meta))
    (where / "__init__.py").write_text(f"VARIANT = {name!r}\n\n\ndef relu(out, x):\n    return out.copy_(x.relu())\n")


@pytest.fixture
def local_kernels(tmp_path, monkeypatch):
    """Two kernel repositories served by kernels' LOCAL_KERNELS (no hub): org/relu with CANN builds (arch and noarch)
    beside CUDA ones, org/cuda-only with CUDA builds only."""
    relu, cuda_only = tmp_path / "relu", tmp_path / "cuda-only"
    for name, backend in ((CANN_ARCH, "cann"), ("torch-npu", "cann"), (CUDA_ARCH, "cuda"), ("torch-cuda", "cuda")):
        _variant(relu, name, backend)
    for name in (CUDA_ARCH, "torch-cuda"):
        _variant(cuda_only, name, "cuda")
    monkeypatch.setenv("LOCAL_KERNELS", f"org/relu={relu}:org/cuda-only={cuda_only}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the probes' processes
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # this one (read when huggingface_hub imported)
    return tmp_path


PROBE = textwrap.dedent("""
    import json, os, torch
    from kernels import get_kernel
    from torch_npu.utils.collect_env import get_cann_version

    kernel = get_kernel("org/relu", version=1)
    x = torch.tensor([-1.0, 2.0], device="cuda")
    out = kernel.relu(torch.empty_like(x), x)
    try:
        get_kernel("org/cuda-only", version=1)
        error = None
    except Exception as exc:
        error = [type(exc).__name__, isinstance(exc, FileNotFoundError), str(exc)]
    print("RESULT", json.dumps({"cann": get_cann_version(), "variant": kernel.VARIANT, "out": out.cpu().tolist(),
                                "device": out.device.type, "error": error, "home": os.environ.get("ASCEND_HOME_PATH")}))
""")


@pytest.mark.parametrize("layer", ["real", "builtin"])
def test_both_layers_report_the_cann_version_kernels_picks_its_build_from(layer, local_kernels):
    """On each layer, in a process of its own as a user's run: torch_npu's collect_env answers the emulated CANN
    (was 'not known' on the real layer, which kernels failed to parse: InvalidVersion 'n.t'; 8.3.RC1 on the builtin
    layer), and kernels loads the repository's cann<XY> build and runs it on the NPU."""
    if layer == "real" and find_prepared() is None:
        pytest.skip("Huawei's torch_npu is not prepared (python -m ascend_shim fetch-torch-npu)")
    script = local_kernels / "probe.py"
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(ASCEND_SHIM_SIM_LAYER=layer, PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""))
    for name in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH"):  # the run's emulated machine sets its own
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)], env=env,
                          cwd=str(local_kernels), capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    assert got["cann"] == CANN_VERSION and got["home"] is None  # the process environment is left as it was
    assert got["variant"] == CANN_ARCH and got["out"] == [0.0, 2.0] and got["device"] == "npu"
    name, is_file_error, message = got["error"]
    assert is_file_error and "\n" not in message and "org/cuda-only" in message, got["error"]


def test_a_repository_without_an_npu_build_is_one_line_in_the_report(local_kernels, clean_shim):
    clean_shim.activate(backend="sim")
    from kernels import get_kernel

    from ascend_shim.report import REPORT

    with pytest.raises(UnsupportedOnNPUError) as info:
        get_kernel("org/cuda-only", version=1)
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)  # transformers' lazy kernel loading falls back on it
    assert "\n" not in message and message.startswith("kernels hub kernel 'org/cuda-only' is not supported")
    for part in (CUDA_ARCH, "torch-cuda", f"cann{MAJOR}{MINOR}", "use_kernels", "LOCAL_KERNELS=org/cuda-only="):
        assert part in message, part
    assert [e for e in REPORT.events() if e["category"] == "unsupported"
            and e["api"] == "kernels hub kernel 'org/cuda-only'"]


def test_other_file_errors_and_cpu_builds_are_kernels_own(local_kernels, clean_shim, monkeypatch):
    """Only 'no build for the NPU' becomes the one line: asking for the CPU build, or a missing cache entry offline,
    raise what kernels raises."""
    clean_shim.activate(backend="sim")
    from kernels import get_kernel

    with pytest.raises(FileNotFoundError) as info:
        get_kernel("org/cuda-only", version=1, backend="cpu")
    assert not isinstance(info.value, UnsupportedOnNPUError) and "\n" in str(info.value)
    monkeypatch.delenv("LOCAL_KERNELS")
    with pytest.raises(FileNotFoundError, match="local snapshot") as info:
        get_kernel("org/not-cached", revision="main", trust_remote_code=True)
    assert not isinstance(info.value, UnsupportedOnNPUError)
