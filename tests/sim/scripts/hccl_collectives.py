"""torchrun worker: every collective of the emulated hccl backend, checked against values computed locally.

Run by tests/sim/test_hccl.py as ``torchrun --nproc_per_node 2 hccl_collectives.py [--device cpu]``.
``--device npu`` (default): ``ascend_shim.sim.install()`` + the real ``hccl`` registration, tensors on
``npu:{LOCAL_RANK}``. ``--device cpu``: the same backend registered for cpu tensors under the name
``hcclcpu`` (lets the gloo delegation be tested without the emulated device). Each check prints
``CHECK <name> ok`` or raises; the test counts the lines.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="npu", choices=["npu", "cpu"])
    ap.add_argument("--init", default="hccl", help="hccl | none | mixed | device_id")
    args = ap.parse_args()

    from ascend_shim.sim import hccl

    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "npu":
        import ascend_shim.sim as sim

        sim.install()
        hccl.register()
        torch.npu.set_device(local_rank)
        dev = torch.device("npu", local_rank)
        backend = "hccl"
    else:
        hccl._register_for_device("hcclcpu", "cpu")
        dev = torch.device("cpu")
        backend = "hcclcpu"

    if args.init == "hccl":
        dist.init_process_group(backend)
    elif args.init == "none":
        dist.init_process_group()
    elif args.init == "mixed":
        dist.init_process_group(f"cpu:gloo,{dev.type}:{backend}")
    elif args.init == "device_id":
        dist.init_process_group(device_id=dev)
    else:
        raise SystemExit(f"bad --init {args.init}")

    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, world

    def check(name, cond, detail=""):
        if not cond:
            raise AssertionError(f"rank {rank}: {name} failed {detail}")
        if rank == 0:
            print(f"CHECK {name} ok", flush=True)

    def val(r, n=6, dtype=torch.float32):
        """Rank r's known input."""
        return (torch.arange(n, dtype=torch.float32) + 10 * r + 1).to(dtype)

    pg = dist.distributed_c10d._get_default_group()
    be = pg._get_backend(dev)
    be = getattr(be, "wrapped_pg", be)  # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps it in a _ProcessGroupWrapper
    check("registration", type(be).__name__ == "ProcessGroupHCCL" and be.name() == "hccl", f"{type(be)} {be.name()}")
    if args.device == "npu":
        check("default_device_backend_map", dist.Backend.default_device_backend_map.get("npu") == "hccl")
        check("is_hccl_available", dist.is_hccl_available() is True)
    if args.init == "mixed":
        check("mixed_cpu_is_gloo", pg._get_backend(torch.device("cpu")).name() == "gloo")

    # all_reduce: SUM / MAX / MIN / PRODUCT, several dtypes
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.int16):
        t = val(rank, dtype=dtype).to(dev)
        dist.all_reduce(t)
        exp = (val(0, dtype=dtype).to(torch.float64) + val(1, dtype=dtype).to(torch.float64)).to(dtype)
        check(f"all_reduce_sum_{dtype}", torch.equal(t.cpu(), exp), f"{t.cpu()} vs {exp}")
    for op, fn in ((dist.ReduceOp.MAX, torch.maximum), (dist.ReduceOp.MIN, torch.minimum),
                   (dist.ReduceOp.PRODUCT, torch.mul)):
        t = val(rank).to(dev)
        dist.all_reduce(t, op=op)
        check(f"all_reduce_{op}", torch.equal(t.cpu(), fn(val(0), val(1))))
    # bool / uint8: torch_npu all-reduces them as int32 and casts back
    b = torch.tensor([rank == 0, False, True]).to(dev)
    dist.all_reduce(b)
    check("all_reduce_bool", b.cpu().tolist() == [True, False, True])
    u = torch.tensor([1, 2, 200], dtype=torch.uint8).to(dev)
    dist.all_reduce(u)
    check("all_reduce_uint8", u.cpu().tolist() == [2, 4, 400 % 256], u.cpu().tolist())
    # PREMUL_SUM
    t = val(rank).to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce_premul_sum", torch.allclose(t.cpu(), 0.5 * (val(0) + val(1))))
    # async + work API
    t = val(rank).to(dev)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    w.wait()
    check("work_api", w.is_completed() and fut.done() and torch.equal(fut.value()[0].cpu(), val(0) + val(1)))
    # all_reduce_coalesced
    xs = [val(rank, 3).to(dev), val(rank, 5).to(dev)]
    dist.all_reduce_coalesced(xs)
    check("all_reduce_coalesced", torch.equal(xs[0].cpu(), val(0, 3) + val(1, 3))
          and torch.equal(xs[1].cpu(), val(0, 5) + val(1, 5)))

    # broadcast (several dtypes, incl. ones HCCL only moves)
    for dtype in (torch.float32, torch.float64, torch.bool, torch.int64):
        t = val(rank, dtype=dtype).to(dev)
        dist.broadcast(t, src=1)
        check(f"broadcast_{dtype}", torch.equal(t.cpu(), val(1, dtype=dtype)))

    # reduce (root 0): root gets the sum, the other rank keeps its input
    t = val(rank).to(dev)
    dist.reduce(t, dst=0)
    check("reduce", torch.equal(t.cpu(), val(0) + val(1) if rank == 0 else val(rank)))

    # all_gather, incl. different shapes per rank
    outs = [torch.empty(6, device=dev) for _ in range(world)]
    dist.all_gather(outs, val(rank).to(dev))
    check("all_gather", all(torch.equal(outs[r].cpu(), val(r)) for r in range(world)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = [torch.empty(3 + r, device=dev) for r in range(world)]
        dist.all_gather(outs, val(rank, 3 + rank).to(dev))
    check("all_gather_uneven", all(torch.equal(outs[r].cpu(), val(r, 3 + r)) for r in range(world)))

    # all_gather_into_tensor (_allgather_base)
    out = torch.empty(world * 6, device=dev)
    dist.all_gather_into_tensor(out, val(rank).to(dev))
    check("all_gather_into_tensor", torch.equal(out.cpu(), torch.cat([val(0), val(1)])))
    out2 = torch.empty(world, 6, device=dev)
    dist.all_gather_into_tensor(out2, val(rank).to(dev))
    check("all_gather_into_tensor_2d", torch.equal(out2.cpu(), torch.stack([val(0), val(1)])))
    if hasattr(dist, "all_gather_single"):  # torch 2.13's successor names of the two above
        out = torch.empty(world * 6, device=dev)
        dist.all_gather_single(out, val(rank).to(dev))
        check("all_gather_single", torch.equal(out.cpu(), torch.cat([val(0), val(1)])))
        out = torch.empty(3, device=dev)
        dist.reduce_scatter_single(out, torch.cat([val(rank, 3), val(rank, 3) * 2]).to(dev))
        check("reduce_scatter_single", torch.equal(out.cpu(), (val(0, 3) + val(1, 3)) * (rank + 1)))

    # reduce_scatter (list) and reduce_scatter_tensor (_reduce_scatter_base)
    ins = [val(rank, 4).to(dev) * (j + 1) for j in range(world)]
    out = torch.empty(4, device=dev)
    dist.reduce_scatter(out, ins)
    check("reduce_scatter", torch.equal(out.cpu(), (val(0, 4) + val(1, 4)) * (rank + 1)))
    inp = torch.cat([val(rank, 4) * (j + 1) for j in range(world)]).to(dev)
    out = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(out, inp)
    check("reduce_scatter_tensor", torch.equal(out.cpu(), (val(0, 4) + val(1, 4)) * (rank + 1)))
    out = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.MAX)
    check("reduce_scatter_tensor_max", torch.equal(out.cpu(), val(1, 4) * (rank + 1)))

    # all_to_all_single, even and uneven splits; all_to_all (lists)
    inp = torch.stack([val(rank, 3) + 100 * j for j in range(world)]).to(dev)  # row j goes to rank j
    out = torch.empty(world, 3, device=dev)
    dist.all_to_all_single(out, inp)
    check("all_to_all_single", torch.equal(out.cpu(), torch.stack([val(r, 3) + 100 * rank for r in range(world)])))
    # uneven: rank r sends (r+1) rows to rank 0 and (2-r) rows to rank 1
    in_splits = [rank + 1, 2 - rank]
    out_splits = [(r + 1) if rank == 0 else (2 - r) for r in range(world)]
    rows = torch.arange(3, dtype=torch.float32).unsqueeze(1) + 10 * rank
    out = torch.empty(sum(out_splits), 1, device=dev)
    dist.all_to_all_single(out, rows.to(dev), out_splits, in_splits)
    exp = []
    for r in range(world):
        r_rows = torch.arange(3, dtype=torch.float32).unsqueeze(1) + 10 * r
        start = 0 if rank == 0 else r + 1
        exp.append(r_rows[start:start + (r + 1 if rank == 0 else 2 - r)])
    check("all_to_all_single_uneven", torch.equal(out.cpu(), torch.cat(exp)),
          f"{out.cpu().flatten()} {torch.cat(exp).flatten()}")
    ins = [val(rank, 2 + j).to(dev) for j in range(world)]  # to rank j: 2+j elements
    outs = [torch.empty(2 + rank, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    check("all_to_all", all(torch.equal(outs[r].cpu(), val(r, 2 + rank)) for r in range(world)))

    # gather (torch_npu: implemented with allgather, warns on dst) and scatter
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gl = [torch.empty(6, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(val(rank).to(dev), gl, dst=0)
    if rank == 0:
        check("gather", all(torch.equal(gl[r].cpu(), val(r)) for r in range(world)))
        check("gather_warns", any("Implemented with allgather instead" in str(w.message) for w in caught))
    sl = [val(j).to(dev) for j in range(world)] if rank == 1 else None
    out = torch.empty(6, device=dev)
    dist.scatter(out, sl, src=1)
    check("scatter", torch.equal(out.cpu(), val(rank)))

    # send / recv (tags are ignored by HCCL), isend/irecv, batch_isend_irecv
    if rank == 0:
        dist.send(val(0).to(dev), dst=1, tag=7)
        t = torch.empty(6, device=dev)
        dist.recv(t, src=1)
        check("send_recv", torch.equal(t.cpu(), val(1)))
    else:
        t = torch.empty(6, device=dev)
        dist.recv(t, src=0, tag=3)
        dist.send(val(1).to(dev), dst=0)
    peer = 1 - rank
    recv_t = torch.empty(6, device=dev)
    ops = [dist.P2POp(dist.isend, val(rank).to(dev), peer), dist.P2POp(dist.irecv, recv_t, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check("batch_isend_irecv", torch.equal(recv_t.cpu(), val(peer)))
    # torch_npu's own ProcessGroupHCCL.batch_isend_irecv(op_type, tensors, remote_rank_list)
    recv_t = torch.empty(6, device=dev)
    be.batch_isend_irecv(["irecv", "isend"], [recv_t, val(rank).to(dev) * 2], [peer, peer]).wait()
    check("backend_batch_isend_irecv", torch.equal(recv_t.cpu(), val(peer) * 2))

    # object collectives ride on the npu backend when it is the only one
    objs = [None, None]
    dist.all_gather_object(objs, {"rank": rank})
    check("all_gather_object", objs == [{"rank": 0}, {"rank": 1}])
    bl = [f"from{rank}"]
    dist.broadcast_object_list(bl, src=1)
    check("broadcast_object_list", bl == ["from1"])

    dist.barrier()
    check("barrier", True)

    # functional collectives (what DTensor / tensor parallelism use) and a DTensor round trip
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    r = funcol.wait_tensor(funcol.all_reduce(val(rank).to(dev), "sum", dist.group.WORLD))
    check("funcol_all_reduce", torch.equal(r.cpu(), val(0) + val(1)))
    r = funcol.wait_tensor(funcol.all_gather_single(val(rank).to(dev), 0, dist.group.WORLD))
    check("funcol_all_gather", torch.equal(r.cpu(), torch.cat([val(0), val(1)])))
    r = funcol.wait_tensor(funcol.reduce_scatter_single(torch.cat([val(rank), val(rank)]).to(dev), "sum", 0,
                                                        dist.group.WORLD))
    check("funcol_reduce_scatter", torch.equal(r.cpu(), val(0) + val(1)))
    mesh = init_device_mesh(dev.type, (world,))
    full = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    check("dtensor_shard", torch.equal(d.to_local().cpu(), full[2 * rank:2 * rank + 2]))
    check("dtensor_full_tensor", torch.equal(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full))

    # ---- rejections (torch_npu 2.13 ProcessGroupHCCL texts)
    def raises(name, fn, text, exc=RuntimeError):
        try:
            fn()
        except exc as e:  # noqa: PERF203
            check(name, text in str(e), f"message was: {e!r}")
            return
        raise AssertionError(f"rank {rank}: {name} did not raise")

    for op, opname in ((dist.ReduceOp.BAND, "BAND"), (dist.ReduceOp.BOR, "BOR"), (dist.ReduceOp.BXOR, "BXOR")):
        raises(f"reject_{opname}", lambda op=op: dist.all_reduce(torch.ones(2, device=dev), op=op),
               f"Cannot use ReduceOp.{opname} with HCCL")
    if hccl.get_avg_policy() == "reject":
        raises("reject_AVG_all_reduce", lambda: dist.all_reduce(torch.ones(2, device=dev), op=dist.ReduceOp.AVG),
               "Cannot use ReduceOp.AVG with HCCL")
        raises("reject_AVG_reduce_scatter_tensor",
               lambda: dist.reduce_scatter_tensor(torch.empty(2, device=dev), torch.ones(4, device=dev),
                                                  op=dist.ReduceOp.AVG),
               "Cannot use ReduceOp.AVG with HCCL")
    else:
        t = val(rank).to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        check("avg_sum_div", torch.allclose(t.cpu(), (val(0) + val(1)) / 2))
        out = torch.empty(3, device=dev)
        dist.reduce_scatter_tensor(out, torch.cat([val(rank, 3), val(rank, 3) * 3]).to(dev), op=dist.ReduceOp.AVG)
        check("avg_reduce_scatter", torch.allclose(out.cpu(), (val(0, 3) + val(1, 3)) / 2 * (1 + 2 * rank)))
        # torch_npu's reduce divides tensors_cp on every rank: the non-root input ends divided too
        t = val(rank).to(dev)
        dist.reduce(t, dst=0, op=dist.ReduceOp.AVG)
        check("avg_reduce", torch.allclose(t.cpu(), (val(0) + val(1)) / 2 if rank == 0 else val(1) / 2))
    raises("reject_fp64_all_reduce", lambda: dist.all_reduce(torch.ones(2, dtype=torch.float64, device=dev)),
           "HCCL allreduce: Unsupported data type at::kDouble")
    raises("reject_uint8_reduce_scatter",
           lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.uint8, device=dev),
                                              torch.ones(4, dtype=torch.uint8, device=dev)),
           "HCCL _reduce_scatter_base: Unsupported data type at::kByte/at::kBool")
    if args.device == "npu":
        # a cpu tensor given to the hccl backend itself (what torch_npu's check_npu_* reject)
        raises("reject_cpu_tensor_backend", lambda: be.allreduce([torch.ones(2)]).wait(),
               "Tensors must be NPU and dense")
        if args.init in ("hccl", "none", "device_id"):
            # through torch.distributed: no backend serves cpu tensors on an hccl-only group
            raises("reject_cpu_tensor_dist", lambda: dist.all_reduce(torch.ones(2)),
                   "No backend type associated with device type cpu")
        else:
            t = torch.ones(2)
            dist.all_reduce(t)
            check("mixed_cpu_via_gloo", t.tolist() == [2.0, 2.0])
    raises("reject_noncontiguous", lambda: dist.all_reduce(torch.ones(4, 4, device=dev).t()),
           "Tensors must be contiguous")

    # the group still works after the rejections
    t = val(rank).to(dev)
    dist.all_reduce(t)
    check("after_errors", torch.equal(t.cpu(), val(0) + val(1)))

    # a subgroup (every rank in it) gets its own communicator
    sub = dist.new_group([0, 1])
    t = val(rank).to(dev)
    dist.all_reduce(t, group=sub)
    check("new_group", torch.equal(t.cpu(), val(0) + val(1)))

    dist.destroy_process_group()
    if rank == 0:
        print("ALL_DONE", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
