"""torch_npu's own Python: what it prints that a CUDA run of the same program does not.

torch_npu prints an ``ERR99999 UNKNOWN applicaiton exception`` line at exit after the traceback of any exception
that ends the program, its own or not, and its internals (the fused optimizers, its FSDP additions) call
``Tensor.storage()``, which warns ``TypedStorage is deprecated`` at the program's expense. Both happen on Ascend
machines as on the emulated NPU; the program's own output (its traceback, its own warnings) is left as it is.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


torch_npu_set = PatchSet(
    id="torch_npu", title="torch_npu's own Python: no error-code line after a Python traceback, no storage "
                          "warnings from its internals",
    requires={"torch_npu": ">=2.4,<2.15"},
    checked_against="torch_npu 2.13.0 (its Python over the emulated NPU); the exit handler also in 2.4.0.post4",
    implementation=f"{__name__}.impl"
)


torch_npu_set.patch(
    "torch_npu.utils._error_code:_NPUExceptionHandler.handle_exception", id="torch_npu.exit_error_code",
    why="at exit torch_npu prints '[ERROR] <time> (PID:.., Device:.., RankID:..) ERR99999 UNKNOWN applicaiton "
        "exception' after the traceback of any exception that ended the program, a plain Python one included: a "
        "CUDA run prints the traceback alone, and log scrapers read the line as a device failure.",
    what="the exit handler stays silent when the exception is not an NPU error (its message carries no "
         "torch_npu error code, by torch_npu's own pattern); NPU errors and forced stops are handled by torch_npu "
         "as before (the timeout grace, the FORCE STOP error).",
    remove_when="never: torch_npu reports every exception that ends the program, by design",
    factory="quiet_exit_handler")


torch_npu_set.patch(
    "torch.storage:_warn_typed_storage_removal", id="torch_npu.internal_storage_warning",
    why="torch_npu's internals call Tensor.storage() (NpuFusedAdamW, which the shim gives for fused AdamW, sizes "
        "its buffers with it; its FSDP additions read data pointers with it): torch warns 'TypedStorage is "
        "deprecated' once per process, pointing into torch_npu, where a CUDA run of the same program warns "
        "nothing -- and the program's own first storage() call then goes unwarned.",
    what="the warning is left out when the line it would point at is in torch_npu (its torch.npu legacy storage "
         "classes excepted: torch.cuda's warn alike); anywhere else torch warns as it does, the program's own "
         "first storage() call included.",
    remove_when="https://github.com/Ascend/pytorch/blob/9e73e708ab9350d203475609f36f8a43f6a0c2ab/torch_npu/optim/"
                "npu_fused_optim_base.py: torch_npu's fused optimizers still call "
                "Tensor.storage()", factory="warn_unless_from_torch_npu")


PATCH_SETS = [torch_npu_set]
