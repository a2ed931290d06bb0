"""DeepSpeed on the NPU: its own NPU accelerator (``deepspeed.accelerator.npu_accelerator``) is selected.

DeepSpeed picks its accelerator once (``get_accelerator()``): from ``DS_ACCELERATOR``, else by probing
(``intel_extension_for_pytorch``, then ``torch_npu``, ..., CUDA last). The set pins ``DS_ACCELERATOR=npu`` (unless
the user chose one) so the choice does not depend on probing order, and registers deepspeed as NPU-native (its
calls get the real device answers). A CUDA user's ``deepspeed.init_distributed(dist_backend="nccl")`` reaches
``torch.distributed.init_process_group("nccl")``, which the core ``torch_distributed`` set maps to hccl.
Checked against deepspeed 0.19.8 installed from PyPI (sdist, ``DS_BUILD_OPS=0``): on the emulator
``get_accelerator()`` is ``NPU_Accelerator`` and ``init_distributed(dist_backend="nccl")`` ends on hccl.

Op builders. DeepSpeed's NPU fused optimizers and inference ops are Python over torch_npu's kernels; its NPU
builders compile only host ops: ZeRO-Offload's CPU optimizers (``cpu_adam``, ``cpu_adagrad``, ``cpu_lion``) and
``async_io``. On an Ascend machine ``cpu_adam`` is DeepSpeed's ``csrc/adam`` C++ compiled with CANN's and
torch_npu's include paths and linked to ``libascendcl`` and ``libtorch_npu`` (ASCEND_HOME_PATH, e.g.
/usr/local/Ascend/ascend-toolkit/latest); the sources use neither. The emulated NPU has no CANN and no
libtorch_npu, so there the three CPU optimizers' ops are built as DeepSpeed's CPU accelerator builds them (the
same sources, its compiler flags, DeepSpeed's build cache; reported as a fallback): ZeRO-Offload with
``offload_optimizer: cpu`` (ZeRO-2 and ZeRO-3) steps with DeepSpeedCPUAdam on the host, as on the machine, and
matches a CPU run of the same script. No CANN is pretended: DeepSpeed still finds none and says so, once per
process. ``async_io`` (NVMe offload) is not provided on the emulator.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


ds = PatchSet(
    native=("deepspeed",),
    id="deepspeed", title="DeepSpeed: DS_ACCELERATOR=npu, its native NPU paths",
    requires={"deepspeed": ">=0.14,<0.20"},
    checked_against="deepspeed 0.19.8 (PyPI sdist, DS_BUILD_OPS=0) on the emulator, ZeRO-Offload (ZeRO-2 and "
                    "ZeRO-3, DeepSpeedCPUAdam) included; deepspeed/accelerator/real_accelerator.py, "
                    "ops/op_builder/npu/builder.py, npu/cpu_adam.py", implementation=f"{__name__}.impl"
)


ds.patch("env:DS_ACCELERATOR", kind="env",
         why="deepspeed's get_accelerator() would build its CUDA accelerator when CUDA looks available, and "
             "probes torch_npu only after other backends.",
         what="DS_ACCELERATOR=npu when unset (a user's explicit choice is kept and reported), so "
              "get_accelerator() is deepspeed's NPU_Accelerator (hccl, npu:N, torch_npu op builders).",
         remove_when="never: the choice must be made before deepspeed first asks", factory="ds_accelerator")


ds.patch("deepspeed.ops.op_builder.npu.builder:NPUOpBuilder.installed_cann_path",
         why="NPUOpBuilder.installed_cann_path tests `'ASCEND_HOME_PATH' in os.environ or "
             "os.path.exists(os.environ['ASCEND_HOME_PATH'])` (or for and): without CANN's set_env.sh every NPU "
             "op builder raises KeyError, and deepspeed.init_distributed builds one (ShareMemCommBuilder).",
         what="returns None when ASCEND_HOME_PATH is unset or not a path (what the code means), so deepspeed "
              "reports 'ascend_cann is missing, npu ops cannot be compiled' and goes on; otherwise unchanged.",
         remove_when="https://github.com/deepspeedai/DeepSpeed/blob/edaa7221267243c7be7fb49c5d5f5c4fb97b4641/"
                     "op_builder/npu/builder.py: installed_cann_path tests 'in os.environ or exists(...)' (or for "
                     "and), in 0.19.8 as on master",
         factory="installed_cann_path")


ds.patch("deepspeed.ops.op_builder.npu.builder:NPUOpBuilder.installed_cann_version", sweep=False,
         id="deepspeed.cann_missing_once",
         why="every NPU op builder looks for CANN when it is constructed and, without it, prints '<op> ascend_cann "
             "is missing, npu ops cannot be compiled!'; `import deepspeed` constructs all of them (all_ops), and "
             "each optimizer builds its own, so a process printed the line ~20 times (per rank).",
         what="the first builder construction that finds no CANN fails as before (DeepSpeed prints its line once, "
              "the report says why); later constructions get None (the builder as after that failure: no CANN "
              "version, -D__DISABLE_CANN__). Other callers get the original's answer. With CANN, unchanged.",
         remove_when="https://github.com/deepspeedai/DeepSpeed/blob/edaa7221267243c7be7fb49c5d5f5c4fb97b4641/"
                     "op_builder/npu/builder.py: NPUOpBuilder.__init__ prints 'ascend_cann is missing' once per "
                     "builder",
         factory="cann_missing_once")


for _module, _klass, _optimizer in (("cpu_adam", "CPUAdamBuilder", "DeepSpeedCPUAdam"),
                                    ("cpu_adagrad", "CPUAdagradBuilder", "DeepSpeedCPUAdagrad"),
                                    ("cpu_lion", "CPULionBuilder", "DeepSpeedCPULion")):
    ds.patch(f"deepspeed.ops.op_builder.npu.{_module}:{_klass}.jit_load", sweep=False,
             id=f"deepspeed.{_module}_host_build", fidelity="exact",
             why=f"DeepSpeed's NPU {_klass} compiles its host op ({_optimizer}, ZeRO-Offload's CPU optimizer) with "
                 "CANN's include path and links libascendcl and libtorch_npu: on the emulated NPU (no CANN, "
                 "torch_npu without its native library) it died in os.path.join(None, 'include').",
             what=f"on the emulated NPU, the op is built and loaded as DeepSpeed's CPU accelerator builds it "
                  f"(deepspeed.ops.op_builder.cpu.{_module}.{_klass}: the same csrc sources, -O3 -march=native "
                  "-fopenmp and the host's SIMD width; DeepSpeed's build cache, TORCH_EXTENSIONS_DIR), reported as "
                  "a fallback. Not applied with real NPUs, where DeepSpeed builds it against CANN.",
             remove_when="never: the emulated NPU has no CANN to compile against", factory="host_jit_load",
             kwargs={"module": _module, "name": _klass})


PATCH_SETS = [ds]
