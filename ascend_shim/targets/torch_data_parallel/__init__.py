"""Single-process multi-device data parallelism (``nn.DataParallel``, ``data_parallel``, ``torch.cuda.comm``) on NPUs.

``nn.DataParallel`` scatters its inputs, replicates the module, runs the replicas in threads and gathers their
outputs; the device-to-device part is ``torch.cuda.comm`` (``broadcast``, ``broadcast_coalesced``, ``scatter``,
``gather``), whose kernels (``torch._C._scatter`` ...) exist only in CUDA builds of torch; torch_npu provides none
of them, so ``nn.DataParallel(model).cuda()`` died at its first forward, even on one NPU. Every one of those
kernels is a set of plain tensor copies between devices: this set gives ``torch.nn.parallel.comm`` those copies,
with the CUDA kernels' semantics (which device keeps the input itself, chunking, output order, streams), and
torch's own DataParallel, replicate, parallel_apply, gather and their autograd functions run unchanged on top.
The report says how many devices each DataParallel call used.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = ("torch_npu>=2.4: torch_npu registers torch._C._broadcast, _broadcast_coalesced, _scatter and _gather "
          "for the NPU (then this patch reports itself not needed); the emulated NPU lacks them")

data_parallel = PatchSet(
    id="torch_data_parallel", title="nn.DataParallel and torch.cuda.comm over NPUs by device copies",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)


for _name in ("broadcast", "broadcast_coalesced", "scatter", "gather"):
    data_parallel.patch(
        f"torch.nn.parallel.comm:{_name}", kind="replace", covers=(f"torch.cuda.comm.{_name}",),
        id=f"torch_data_parallel.comm.{_name}",
        why=f"torch.cuda.comm.{_name} calls a CUDA-only kernel of torch._C (nn.DataParallel and replicate use it); "
            "with torch_npu it fails with an AttributeError.",
        what=f"torch.cuda.comm.{_name} (and torch.nn.parallel.comm.{_name}) does what the CUDA kernel does with "
             "plain tensor copies between NPUs: same outputs, same device order, same views.",
        remove_when=REMOVE, factory="comm_function", kwargs={"name": _name})


data_parallel.patch(
    "torch.nn.parallel.comm:nccl", kind="replace", fidelity="neutral", id="torch_data_parallel.comm.nccl",
    why="torch.cuda.comm.reduce_add (DataParallel's gradient sum) asks its own copy of torch.cuda.nccl whether NCCL "
        "can reduce the tensors; without NCCL in the build that prints 'PyTorch is not compiled with NCCL support' "
        "on every backward.",
    what="that copy is the shim's torch.cuda.nccl: is_available() is False for NPU tensors (HCCL has no direct "
         "reduce of device lists), so reduce_add takes its device-copy path, without the warning (the answer is "
         "torch's internal choice, not reported).",
    remove_when=REMOVE, factory="comm_nccl")  # torch's own question: not reported


# -- what the report says --------------------------------------------------------------------------------------
data_parallel.patch(
    "torch.nn.parallel.replicate:replicate", id="torch_data_parallel.replicate_count",
    why="the report says how many devices a DataParallel call used (the replicas made for it).",
    what="records the number of replicas made (no change to replicate itself).",
    remove_when=REMOVE, factory="counting_replicate")


data_parallel.patch(
    "torch.nn.parallel.data_parallel:DataParallel.forward", id="torch_data_parallel.DataParallel.forward",
    covers=("torch.nn.DataParallel",),
    why="nn.DataParallel over NPUs runs on the device copies of torch.cuda.comm (this set); which devices took part "
        "is worth reporting (pytorch/examples take this path whenever more than one device is visible).",
    what="torch's own forward runs unchanged; each call site is reported with the number of devices used.",
    remove_when=REMOVE, factory="reporting_forward")


data_parallel.patch(
    "torch.nn.parallel.data_parallel:data_parallel", id="torch_data_parallel.data_parallel",
    covers=("torch.nn.parallel.data_parallel",),
    why="the functional data_parallel() runs on the device copies of torch.cuda.comm (this set); which devices "
        "took part is worth reporting.",
    what="torch's own data_parallel runs unchanged; each call site is reported with the number of devices used.",
    remove_when=REMOVE, factory="reporting_data_parallel")


data_parallel.patch(
    "torch.nn.parallel.parallel_apply:parallel_apply", id="torch_data_parallel.parallel_apply_autocast",
    why="parallel_apply runs each replica under autocast only if torch.is_autocast_enabled() -- CUDA's autocast "
        "state; under `torch.autocast('cuda')` on an NPU it is the NPU's autocast that is on, so the replicas "
        "would run in full precision while the same code on CUDA runs them in autocast.",
    what="when the accelerator's autocast is on and CUDA's is not, parallel_apply sees autocast as on (the "
         "replicas run under the accelerator's autocast, as on CUDA); otherwise unchanged.",
    remove_when="https://github.com/pytorch/pytorch/pull/191916: "
                "parallel_apply reads torch.is_autocast_enabled(), CUDA's autocast state, not the accelerator's",
    factory="parallel_apply_autocast")


PATCH_SETS = [data_parallel]
