"""DeepSpeed ZeRO-Offload on the emulated NPU: ZeRO-Offload's CPU optimizers' ops built for the host (DeepSpeed's
NPU builders link CANN and libtorch_npu, which the emulator does not have), and DeepSpeed's "ascend_cann is missing"
line printed once per process, not once per op builder.

The end-to-end test builds DeepSpeed's cpu_adam extension on first use, into DeepSpeed's build cache
(TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions), where the CPU reference run of the same script finds
the same extension: about 3 minutes on 2 cores the first time (cpu_adam, and the CPU run's shm comm op), then
about 35 s (the two runs).
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.subprocess_env import run_plain_torch, shim_free_env

pytest.importorskip("deepspeed")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "ds_zero_offload.py")
CANN_MISSING = "ascend_cann is missing, npu ops cannot be compiled"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# deepspeed picks its accelerator once per process: a fresh interpreter. A machine without CANN sourced: the real
# layer sets up the emulated machine's CANN environment when torch_npu comes up, and the script then drops it.
BUILDERS_SCRIPT = textwrap.dedent("""
    import os, ascend_shim
    ascend_shim.activate("sim")
    import torch, torch_npu
    os.environ.pop("ASCEND_HOME_PATH", None)
    import deepspeed
    from deepspeed.ops.op_builder import all_ops  # DeepSpeed constructs every NPU op builder
    from deepspeed.ops.op_builder import cpu as host
    from deepspeed.ops.op_builder import npu
    from ascend_shim.report import REPORT
    built = []
    for name in ("CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder"):  # no compiler run: the host build recorded
        getattr(host, name).jit_load = lambda self, verbose=True: built.append(type(self).__module__) or self.name
    loaded = [getattr(npu, name)().load() for name in ("CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder")]
    try:
        npu.CPUAdamBuilder().installed_cann_version()
        direct = "answered"
    except AssertionError:
        direct = "AssertionError"
    print("RESULT", len(all_ops.ALL_OPS), npu.CPUAdamBuilder()._cann_version, loaded, built, direct,
          [e["api"] for e in REPORT.events() if e["category"] == "fallback" and e["api"].startswith("deepspeed ")],
          any("found no CANN" in n for n in REPORT.notes))
""")


def test_builders_say_cann_is_missing_once_and_build_host_ops_for_the_host(tmp_path):
    script = tmp_path / "ds_builders.py"
    script.write_text(BUILDERS_SCRIPT)
    env = shim_free_env("DS_ACCELERATOR", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][-1]
    n_ops, cann_version, rest = line.split(" ", 3)[1:]
    assert int(n_ops) > 10 and cann_version == "None", line
    assert rest == ("['cpu_adam', 'cpu_adagrad', 'cpu_lion'] "
                    "['deepspeed.ops.op_builder.cpu.cpu_adam', 'deepspeed.ops.op_builder.cpu.cpu_adagrad', "
                    "'deepspeed.ops.op_builder.cpu.cpu_lion'] AssertionError "
                    "['deepspeed cpu_adagrad op', 'deepspeed cpu_adam op', 'deepspeed cpu_lion op'] True"), line
    said = [ln for ln in (out.stdout + out.stderr).splitlines() if CANN_MISSING in ln]
    assert len(said) == 1, said  # DeepSpeed's own line, from the first builder constructed


@pytest.mark.slow
def test_zero_offload_cpu_adam_on_the_emulated_npu_matches_the_cpu_run(tmp_path):
    """ZeRO-2 and ZeRO-3 with offload_optimizer cpu: DeepSpeedCPUAdam steps on the host, as on an Ascend machine;
    the losses and final weights are the CPU run's, to the bit."""
    env = shim_free_env("DS_ACCELERATOR", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
    ref = run_plain_torch([sys.executable, SCRIPT, str(tmp_path / "cpu.json"), "2", "3"], timeout=900,
                          env=dict(env, DS_ACCELERATOR="cpu", MASTER_PORT=str(free_port())), cwd=tmp_path)
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-4000:]
    sim = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report",
                          str(tmp_path / "report.json"), SCRIPT, str(tmp_path / "sim.json"), "2", "3"],
                         env=dict(env, MASTER_PORT=str(free_port())), capture_output=True, text=True, timeout=900,
                         cwd=tmp_path)
    assert sim.returncode == 0, sim.stdout[-2000:] + sim.stderr[-4000:]
    cpu, npu = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("cpu", "sim"))
    for stage, zero in (("2", "DeepSpeedZeroOptimizer"), ("3", "DeepSpeedZeroOptimizer_Stage3")):
        assert npu[stage]["model_device"] == "npu" and cpu[stage]["model_device"] == "cpu", (npu, cpu)
        for run in (npu, cpu):
            assert run[stage]["zero_optimizer"] == zero and run[stage]["optimizer"] == "DeepSpeedCPUAdam", run
            assert run[stage]["master_devices"] == ["cpu"], run  # the optimizer states and step on the host
        assert npu[stage]["losses"] == cpu[stage]["losses"], (stage, npu[stage], cpu[stage])
        assert npu[stage]["weights"] == cpu[stage]["weights"], (stage, npu[stage], cpu[stage])
    report = json.loads((tmp_path / "report.rank0.json").read_text())
    fallbacks = {(e["api"], e["detail"]) for e in report["events"] if e["category"] == "fallback"}
    assert any(api == "deepspeed cpu_adam op" and "CPU accelerator" in detail for api, detail in fallbacks), fallbacks
    said = [ln for ln in (sim.stdout + sim.stderr).splitlines() if CANN_MISSING in ln]
    assert len(said) <= 1, said
