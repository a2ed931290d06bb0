"""The emulated ``hccl`` distributed backend (ascend_shim.sim.hccl).

In-process: registration as torch_npu does it, a 1-rank group for the error contract (texts from
torch_npu 2.13's ProcessGroupHCCL.cpp), zero-copy host views. Through torchrun (2 ranks, loopback,
npu:{LOCAL_RANK}): every collective against locally computed values, the init variants, DDP and
FSDP2 training against a single-process run (scripts in tests/sim/scripts/).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
import torch

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
REPO = os.path.dirname(os.path.dirname(HERE))
TORCHRUN_TIMEOUT = 240


@pytest.fixture(scope="module")
def npu():
    """The emulated device installed (which registers hccl) and the C++ backend built once."""
    import ascend_shim.sim as sim
    from ascend_shim.sim import hccl

    sim.install()
    hccl.build()
    return sim


@pytest.fixture
def one_rank_group(npu):
    import torch.distributed as dist

    from ascend_shim.sim import hccl

    policy = hccl.get_avg_policy()
    hccl.set_avg_policy("reject")  # the error-contract tests check the older (torch_npu < 2.6) line
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.distributed_c10d._get_default_group()
    finally:
        dist.destroy_process_group()
        hccl.set_avg_policy(policy)


# ----------------------------------------------------------------------------------------- registration
@pytest.mark.builtin_layer  # the builtin layer's registration; on the real layer torch_npu registers hccl itself
def test_register_is_idempotent_and_matches_torch_npu(npu):
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import BackendConfig

    from ascend_shim.sim import hccl

    plugin = dist.Backend._plugins["HCCL"]
    hccl.register()
    hccl.register()
    assert dist.Backend._plugins["HCCL"] is plugin  # not re-registered
    assert plugin.extended_api is True
    assert dist.Backend.default_device_backend_map["npu"] == "hccl"
    assert dist.Backend.backend_capability["hccl"] == ["npu"]
    assert dist.Backend.backend_type_map["hccl"] == dist.ProcessGroup.BackendType.CUSTOM
    assert dist.Backend("HCCL") == "hccl" and dist.Backend.HCCL == "hccl"
    assert dist.is_hccl_available() is True and hccl.is_hccl_available() is True
    # how init_process_group resolves backends on an npu machine
    assert torch._C._get_accelerator().type == "npu"
    assert BackendConfig("undefined").get_device_backend_map() == {"npu": "hccl"}
    assert BackendConfig("hccl").get_device_backend_map() == {"npu": "hccl"}
    assert BackendConfig("cpu:gloo,npu:hccl").get_device_backend_map() == {"cpu": "gloo", "npu": "hccl"}


@pytest.mark.builtin_layer
def test_pg_options_accepted(npu):
    """init_process_group(pg_options=ProcessGroupHCCL.Options()) as torch_npu users write it (the builtin facade's
    Options; on the real layer they are torch_npu's own)."""
    import torch.distributed as dist

    from ascend_shim.sim import hccl

    opts = hccl.ProcessGroupHCCL.Options()
    assert isinstance(opts, hccl.Options)
    opts.hccl_config = {"hccl_buffer_size": 200}
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1, pg_options=opts)
    try:
        t = torch.ones(2, device="npu")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [1.0, 1.0]
        assert opts.global_ranks_in_group == [] and opts._timeout is not None
    finally:
        dist.destroy_process_group()


def test_backend_object_is_a_c10d_backend(one_rank_group):
    import torch.distributed as dist

    be = one_rank_group._get_backend(torch.device("npu"))
    assert isinstance(be, torch._C._distributed_c10d.Backend)
    assert type(be).__name__ == "ProcessGroupHCCL"
    assert be.name() == "hccl" and be.rank() == 0 and be.size() == 1
    assert be.supports_splitting is False and be.supports_coalescing is True  # coalescing as ProcessGroupHCCL
    assert dist.get_backend() == "hccl"
    assert [d.type for d in one_rank_group._device_types] == ["npu"]


def test_coalescing_manager(one_rank_group):
    """torch's _coalescing_manager: the fast paths (``*_coalesced`` calls) and the start/end path."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager

    npu = torch.device("npu")
    a, b = torch.ones(2, device=npu), torch.full((3,), 2.0, device=npu)
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    assert a.cpu().tolist() == [1.0, 1.0] and b.cpu().tolist() == [2.0, 2.0, 2.0]
    outs = [torch.empty(2, device=npu), torch.empty(3, device=npu)]
    with _coalescing_manager():
        dist.all_gather_single(outs[0], a)
        dist.all_gather_single(outs[1], b)
    assert torch.equal(outs[1].cpu(), b.cpu())
    with _coalescing_manager():
        dist.reduce_scatter_single(outs[0], a)
    with _coalescing_manager(device=npu, async_ops=True) as cm:  # startCoalescing / endCoalescing
        dist.all_reduce(a)
        dist.broadcast(b, src=0)
    cm.wait()
    assert a.cpu().tolist() == [1.0, 1.0]


# ----------------------------------------------------------------------------------------- error contract
SUFFIX = re.compile(  # DIST_ERROR(...): NPUException.cpp formatErrorCode
    r"\n\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:-?\d+, RankID:-?\d+\) ERR02\d{3} DIST "
)


@pytest.mark.parametrize("op,name", [("AVG", "AVG"), ("BAND", "BAND"), ("BOR", "BOR"), ("BXOR", "BXOR")])
def test_unsupported_reduce_ops_rejected(one_rank_group, op, name):
    import torch.distributed as dist

    with pytest.raises(RuntimeError) as info:
        dist.all_reduce(torch.ones(2, device="npu"), op=getattr(dist.ReduceOp, op))
    msg = str(info.value)
    assert msg.startswith(f"Cannot use ReduceOp.{name} with HCCL\n[ERROR] ")
    assert SUFFIX.search(msg) and msg.endswith("ERR02007 DIST feature not supported")


def test_avg_rejected_in_every_reducing_collective(one_rank_group):
    import torch.distributed as dist

    t = torch.ones(4, device="npu")
    calls = [
        lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG),
        lambda: dist.reduce(t, dst=0, op=dist.ReduceOp.AVG),
        lambda: dist.reduce_scatter_tensor(torch.empty(4, device="npu"), t, op=dist.ReduceOp.AVG),
        lambda: dist.reduce_scatter(torch.empty(4, device="npu"), [t], op=dist.ReduceOp.AVG),
        lambda: dist.all_reduce_coalesced([t], op=dist.ReduceOp.AVG),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="^Cannot use ReduceOp.AVG with HCCL"):
            call()


def test_avg_policy_sum_div(one_rank_group):
    import torch.distributed as dist

    from ascend_shim.sim import hccl

    hccl.set_avg_policy("sum_div")
    t = torch.tensor([2.0, 4.0], device="npu")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)  # world size 1: SUM / 1
    assert t.cpu().tolist() == [2.0, 4.0]
    with pytest.raises(ValueError):
        hccl.set_avg_policy("maybe")


def test_cpu_tensors_rejected(one_rank_group):
    import torch.distributed as dist

    be = one_rank_group._get_backend(torch.device("npu"))
    # handed to the hccl backend: torch_npu's check_npu_* text
    with pytest.raises(RuntimeError, match="^Tensors must be NPU and dense\n") as info:
        be.allreduce([torch.ones(2)]).wait()
    assert str(info.value).endswith("ERR02002 DIST invalid type")
    with pytest.raises(RuntimeError, match="^Tensors must be NPU and dense"):
        be.broadcast([torch.ones(2)]).wait()
    # through torch.distributed: an hccl-only group has no backend for cpu tensors (torch's own check)
    with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
        dist.all_reduce(torch.ones(2))


def test_dtype_and_layout_rejections(one_rank_group):
    import torch.distributed as dist

    npu = torch.device("npu")
    with pytest.raises(RuntimeError, match="^HCCL allreduce: Unsupported data type at::kDouble\n"):
        dist.all_reduce(torch.ones(2, dtype=torch.float64, device=npu))
    with pytest.raises(RuntimeError, match="^HCCL reduce: Unsupported data type at::kDouble"):
        dist.reduce(torch.ones(2, dtype=torch.float64, device=npu), dst=0)
    with pytest.raises(RuntimeError, match="^HCCL _reduce_scatter_base: Unsupported data type at::kByte/at::kBool"):
        dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.uint8, device=npu),
                                   torch.ones(2, dtype=torch.uint8, device=npu))
    with pytest.raises(RuntimeError, match="^Tensors must be contiguous"):
        dist.all_reduce(torch.ones(3, 3, device=npu).t())
    with pytest.raises(RuntimeError, match="^PreMulSum Data type must be half, float, bfloat16 or double"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device=npu), op=dist._make_nccl_premul_sum(2.0))
    with pytest.raises(RuntimeError, match="^ProcessGroupHCCL does not support recv"):
        dist.recv(torch.empty(2, device=npu))  # any source
    with pytest.raises(ValueError, match="monitored_barrier is only implemented for GLOO backend"):
        dist.monitored_barrier()  # torch's own check, as on torch_npu
    # HCCL moves what it cannot reduce: fp64 broadcast / all-gather are fine; bool/uint8 all-reduce via int32
    t = torch.ones(2, dtype=torch.float64, device=npu)
    dist.broadcast(t, src=0)
    b = torch.tensor([True, False], device=npu)
    dist.all_reduce(b)
    assert b.cpu().tolist() == [True, False]


def test_tensor_lists_need_dense_not_contiguous(one_rank_group):
    """check_npu_tensors_same_device asks Tensor::is_non_overlapping_and_dense(): a transposed output is
    accepted (and written in its logical order); an overlapping one is not."""
    import torch.distributed as dist

    npu = torch.device("npu")
    x = torch.arange(6.0, device=npu).reshape(2, 3)
    out = torch.empty(3, 2, device=npu).t()
    dist.all_gather([out], x)
    assert torch.equal(out.cpu(), x.cpu())
    with pytest.raises(RuntimeError, match="^Tensors must be non-overlapping and dense"):
        dist.all_gather([torch.empty(2, 1, device=npu).expand(2, 3)], x)


def test_compact_error_output(one_rank_group, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setenv("TORCH_NPU_COMPACT_ERROR_OUTPUT", "1")
    with pytest.raises(RuntimeError) as info:
        dist.all_reduce(torch.ones(2, device="npu"), op=dist.ReduceOp.BAND)
    assert str(info.value) == "Cannot use ReduceOp.BAND with HCCL"


def test_collectives_are_zero_copy(one_rank_group):
    """With the device's cpu_alias, gloo works on the npu memory itself: no device-to-host sync counted."""
    import torch.distributed as dist

    from ascend_shim.sim import counters, hccl

    t = torch.arange(6, dtype=torch.float32, device="npu")
    h = hccl.host_view(t)
    assert h.device.type == "cpu" and h.data_ptr() == t.data_ptr()
    counters.reset()
    dist.all_reduce(t)
    out = torch.empty(6, device="npu")
    dist.all_gather_into_tensor(out, t)
    dist.broadcast(t, src=0)
    work = dist.all_reduce(t, async_op=True)
    assert work.is_completed() and work.wait()
    assert counters.d2h_syncs() == 0
    assert torch.equal(work.get_future().value()[0].cpu(), torch.arange(6.0))  # this read is one


# ----------------------------------------------------------------------------------------- 2 ranks, torchrun
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(script: str, *args: str, env_extra: dict | None = None) -> str:
    env = shim_free_env()
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["OMP_NUM_THREADS"] = "1"
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           os.path.join(SCRIPTS, script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TORCHRUN_TIMEOUT, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "ALL_DONE" in proc.stdout, proc.stdout[-4000:]
    return proc.stdout


def _checks(stdout: str) -> set[str]:
    return set(re.findall(r"^CHECK (\S+) ok$", stdout, flags=re.M))


COLLECTIVE_CHECKS = {
    "registration", "default_device_backend_map", "is_hccl_available",
    "all_reduce_sum_torch.float32", "all_reduce_sum_torch.bfloat16", "all_reduce_sum_torch.int16",
    "all_reduce_RedOpType.MAX", "all_reduce_RedOpType.PRODUCT", "all_reduce_bool", "all_reduce_uint8",
    "all_reduce_premul_sum", "work_api", "all_reduce_coalesced", "broadcast_torch.float64", "reduce",
    "all_gather", "all_gather_uneven", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all_single", "all_to_all_single_uneven", "all_to_all", "gather", "gather_warns", "scatter",
    "send_recv", "batch_isend_irecv", "backend_batch_isend_irecv", "all_gather_object", "broadcast_object_list",
    "barrier",
    "funcol_all_reduce", "funcol_all_gather", "funcol_reduce_scatter", "dtensor_shard", "dtensor_full_tensor",
    "reject_BAND", "reject_fp64_all_reduce", "reject_uint8_reduce_scatter", "reject_cpu_tensor_backend",
    "reject_noncontiguous", "after_errors", "new_group",
}


def test_avg_default_follows_the_torch_npu_line(npu):
    import torch

    from ascend_shim.sim.hccl import _impl

    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert _impl._default_avg_policy() == ("sum_div" if (major, minor) >= (2, 6) else "reject")


@pytest.mark.slow
def test_torchrun_collectives(npu):
    checks = _checks(_torchrun("hccl_collectives.py", env_extra={"ASCEND_SHIM_SIM_HCCL_AVG": "reject"}))
    assert COLLECTIVE_CHECKS | {"reject_AVG_all_reduce", "reject_AVG_reduce_scatter_tensor",
                                "reject_cpu_tensor_dist"} <= checks, COLLECTIVE_CHECKS - checks


@pytest.mark.slow
def test_torchrun_collectives_mixed_sum_div_host_copies(npu):
    """"cpu:gloo,npu:hccl" (cpu tensors go to gloo), torch_npu >= 2.6's AVG (SUM / size), and the copy
    path used when the device cannot alias npu memory."""
    out = _torchrun("hccl_collectives.py", "--init", "mixed",
                    env_extra={"ASCEND_SHIM_SIM_HCCL_AVG": "sum_div", "ASCEND_SHIM_SIM_HCCL_NO_ALIAS": "1"})
    checks = _checks(out)
    assert COLLECTIVE_CHECKS | {"avg_sum_div", "avg_reduce_scatter", "avg_reduce", "mixed_cpu_is_gloo",
                                "mixed_cpu_via_gloo"} <= checks, COLLECTIVE_CHECKS - checks
    assert "reject_AVG_all_reduce" not in checks


def test_torchrun_ddp(npu):
    """DDP; the group comes from init_process_group(device_id=npu:i) with no backend named."""
    checks = _checks(_torchrun("hccl_train.py", "--mode", "ddp", "--init", "device_id"))
    assert {"init_device_id_is_hccl", "ddp_ranks_identical", "ddp_matches_single_process",
            "ddp_weights_moved"} <= checks, checks


@pytest.mark.slow
def test_torchrun_fsdp2(npu):
    """FSDP2 over init_device_mesh("npu", (2,)); the group comes from init_process_group() with no backend."""
    checks = _checks(_torchrun("hccl_train.py", "--mode", "fsdp2", "--init", "none"))
    assert {
        "init_none_is_hccl",
        "fsdp2_avg_rejected",
        "fsdp2_force_sum_ranks_identical", "fsdp2_force_sum_matches_single_process",
        "fsdp2_avg_sum_div_ranks_identical", "fsdp2_avg_sum_div_matches_single_process",
    } <= checks, checks
