"""What a program observes of the NPU runtime through torch.npu / torch_npu (one ``key = value`` line per fact):
visible devices before and after the first use, fork, the caching device and host allocators, stream ids. The
differential test runs this on both emulator layers and compares."""
import gc
import os

import torch
import torch_npu  # noqa: F401  (the layer under test)

from _facts import fact  # the probe's directory is sys.path[0]

MiB = 1 << 20


# -- visible devices: torch_npu's parser, re-read until the program first uses a device
def visible(value):
    os.environ["ASCEND_RT_VISIBLE_DEVICES"] = value
    return torch.npu.device_count()


fact("is_initialized before use", lambda: torch.npu.is_initialized())
for value in ("0,1", "1,0", "0, 1", "0,32,1", "2,5,7", "1,1", "", "0,a1", "0,1,2"):
    fact(f"visible {value!r}", lambda v=value: visible(v))
fact("is_available with 3 visible", lambda: torch.npu.is_available())


# -- fork before the first use
def in_child(body):
    pid = os.fork()
    if pid == 0:
        code = 9
        try:
            code = body()
        except Exception as exc:
            code = 7 if "Cannot re-initialize NPU in forked subprocess" in str(exc) else 8
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def use_device():
    x = torch.ones(4, device="npu:2")
    return 0 if (x * 2).sum().item() == 8 and torch.npu.device_count() == 3 else 5


fact("child of an unused parent", lambda: in_child(use_device))
fact("is_initialized after the child", lambda: torch.npu.is_initialized())

# -- first use: the visible devices are fixed
first = torch.ones(1, device="npu")
fact("is_initialized after use", lambda: torch.npu.is_initialized())
fact("visible after use", lambda: visible("0"))
del os.environ["ASCEND_RT_VISIBLE_DEVICES"]
fact("visible unset after use", lambda: torch.npu.device_count())
fact("child of a used parent", lambda: in_child(use_device))

# -- the caching device allocator
torch.npu.empty_cache()
gc.collect()
base = torch.npu.memory_stats()
x = torch.empty(64 * MiB, dtype=torch.uint8, device="npu")
fact("allocated 64 MiB", lambda: torch.npu.memory_allocated() - base["allocated_bytes.all.current"])
fact("reserved 64 MiB", lambda: torch.npu.memory_reserved() - base["reserved_bytes.all.current"])
address = x.data_ptr()
del x
fact("allocated after del", lambda: torch.npu.memory_allocated() - base["allocated_bytes.all.current"])
fact("reserved after del", lambda: torch.npu.memory_reserved() - base["reserved_bytes.all.current"])
fact("reserved >= allocated", lambda: torch.npu.memory_reserved() >= torch.npu.memory_allocated())
fact("free is total - reserved", lambda: (lambda free, total: free == total - torch.npu.memory_reserved())(
    *torch.npu.mem_get_info()))
fact("same size after free: same address",
     lambda: torch.empty(64 * MiB, dtype=torch.uint8, device="npu").data_ptr() == address)
torch.npu.empty_cache()
fact("reserved after empty_cache", lambda: torch.npu.memory_reserved() - base["reserved_bytes.all.current"])
small = torch.empty(1000, device="npu")
large = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
after = torch.npu.memory_stats()
for key in ("requested_bytes", "reserved_bytes", "segment", "allocation"):
    for pool in ("small_pool", "large_pool"):
        fact(f"{key}.{pool} grew", lambda k=f"{key}.{pool}.current": after[k] - base[k])
del small
fact("accelerator memory_stats", lambda: dict(torch.accelerator.memory_stats()) == dict(torch.npu.memory_stats()))
fact("accelerator memory_reserved", lambda: torch.accelerator.memory_reserved() == torch.npu.memory_reserved())
fact("accelerator get_memory_info", lambda: torch.accelerator.get_memory_info(0) == torch.npu.mem_get_info(0))
segments = [s for s in torch.npu.memory_snapshot() if s["device"] == 0]
stats = torch.npu.memory_stats()
fact("snapshot segments", lambda: len(segments) == stats["segment.all.current"])
fact("snapshot reserved per pool", lambda: [
    sum(s["total_size"] for s in segments if s["segment_type"] == kind) == stats[f"reserved_bytes.{kind}_pool.current"]
    for kind in ("small", "large")])
fact("snapshot states", lambda: sorted({b["state"] for s in segments for b in s["blocks"]}))
fact("snapshot cached block", lambda: [(s["total_size"], s["allocated_size"], s["segment_type"]) for s in segments
                                       if s["blocks"][0]["state"] == "inactive"])


def exabyte():
    try:
        torch.empty(1 << 60, dtype=torch.uint8, device="npu")
    except torch.OutOfMemoryError as exc:
        return str(exc).splitlines()[0]
    return "allocated"


fact("1 EB", lambda: torch.empty(1 << 60, dtype=torch.uint8, device="npu"))
fact("1 EB message", exabyte)
address = torch.npu.caching_allocator_alloc(MiB)
fact("caching_allocator_alloc", lambda: address in {s["address"] for s in torch.npu.memory_snapshot()})
torch.npu.caching_allocator_delete(address)
fact("caching_allocator_delete twice", lambda: torch.npu.caching_allocator_delete(address))
torch.npu.empty_cache()
del large

# -- pinned host memory: the caching host allocator
pinned = torch.ones(1 << 18).pin_memory()
address = pinned.data_ptr()
del pinned
fact("pinned block reused", lambda: torch.ones(MiB, dtype=torch.uint8).pin_memory().data_ptr() == address)
fact("empty_host_cache", lambda: torch.accelerator.memory.empty_host_cache())
fact("pinned after empty_host_cache", lambda: torch.ones(8).pin_memory().is_pinned())


def host_cached():
    from ascend_shim.sim import _extension

    stats = _extension.load().host_memory_stats()
    return stats["allocated_bytes"]["current"] - stats["active_bytes"]["current"]


keep = torch.ones(1 << 18).pin_memory()
del keep
fact("host cache holds the freed block", lambda: host_cached())
torch.npu.host_empty_cache()
fact("torch.npu.host_empty_cache", lambda: host_cached())

# -- streams: (type << 5) | index
fact("default stream id", lambda: torch.npu.default_stream().stream_id)
fact("Stream type", lambda: torch.npu.Stream().stream_id >> 5)
fact("Stream(priority=-1) type", lambda: torch.npu.Stream(priority=-1).stream_id >> 5)
fact("torch.Stream type", lambda: torch.Stream(device="npu").stream_id >> 5)
fact("Stream(device=1)", lambda: (lambda s: (s.stream_id >> 5, str(s.device)))(torch.npu.Stream(device=1)))
fact("pool of 32", lambda: len({torch.npu.Stream().stream_id for _ in range(40)}))
fact("rebuilt stream", lambda: torch.npu.Stream(stream_id=97, device_index=0, device_type=20).stream_id)
stream = torch.npu.Stream()
with torch.npu.stream(stream):
    fact("current inside", lambda: (torch.npu.current_stream() == stream,  # torch_npu: equal to its own Streams only
                                    torch.accelerator.current_stream().stream_id == stream.stream_id))
fact("current after", lambda: torch.npu.current_stream().stream_id)
