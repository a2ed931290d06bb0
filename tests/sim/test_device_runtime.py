"""The emulated device's runtime as torch_npu's own tests state its contract, on whichever torch_npu layer the test
run uses: the caching device allocator (a freed block stays reserved until empty_cache(), small and large pools,
statistics that agree with torch.accelerator's and with memory_snapshot()), the caching host allocator for pinned
memory, torch_npu's stream ids, ASCEND_RT_VISIBLE_DEVICES as torch_npu parses it (and re-read until the device is
first used), and fork() before and after the device's first use."""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
import torch

from ascend_shim.sim import _extension
from tests.subprocess_env import shim_free_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _device_zero(sim):
    torch.npu.set_device(0)
    gc.collect()  # earlier tests' garbage must not be freed while a test measures
    yield
    torch.npu.set_device(0)


def _stats(device=0) -> dict:
    return dict(torch.npu.memory_stats(device))


# ---- the caching device allocator ----------------------------------------------------------------------------


def test_a_freed_block_stays_reserved_until_empty_cache():
    torch.npu.empty_cache()
    allocated, reserved = torch.npu.memory_allocated(), torch.npu.memory_reserved()
    assert reserved >= allocated
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="npu")
    assert torch.npu.memory_allocated() - allocated >= 64 * MiB
    assert torch.npu.memory_reserved() - reserved >= 64 * MiB
    held = torch.npu.memory_reserved()
    del x
    assert torch.npu.memory_allocated() == allocated
    assert torch.npu.memory_reserved() == held  # cached for the next allocation, still reserved
    assert torch.npu.max_memory_reserved() >= held
    assert torch.npu.memory_reserved() >= torch.npu.memory_allocated()
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved() == reserved
    assert torch.npu.memory_allocated() == allocated


def test_an_allocation_after_a_free_gets_the_freed_block():
    torch.npu.empty_cache()
    before = _stats()
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="npu")
    address = x.data_ptr()
    del x
    y = torch.empty(64 * MiB, dtype=torch.uint8, device="npu")
    assert y.data_ptr() == address
    after = _stats()
    # one segment reserved from the host for both tensors: the second came from the cache
    assert after["num_device_alloc"] - before["num_device_alloc"] == 1
    assert after["segment.all.current"] - before["segment.all.current"] == 1
    assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 2
    del y
    torch.npu.empty_cache()
    assert _stats()["num_device_free"] - before["num_device_free"] == 1


def test_small_and_large_pools():
    """Blocks of at most 1 MiB come from the small pool, larger ones from the large pool; "all" is their sum."""
    torch.npu.empty_cache()
    before = _stats()
    small = torch.empty(256 * 1024, dtype=torch.uint8, device="npu")
    large = torch.empty(4 * MiB, dtype=torch.uint8, device="npu")
    now = _stats()

    def grew(key):
        return now[key] - before[key]

    assert grew("requested_bytes.small_pool.current") == 256 * 1024
    assert grew("requested_bytes.large_pool.current") == 4 * MiB
    assert 256 * 1024 <= grew("reserved_bytes.small_pool.current") <= MiB
    assert grew("reserved_bytes.large_pool.current") >= 4 * MiB
    assert grew("segment.small_pool.current") == grew("segment.large_pool.current") == 1
    assert grew("allocation.small_pool.current") == grew("allocation.large_pool.current") == 1
    for stat in ("allocated_bytes", "reserved_bytes", "requested_bytes", "active_bytes", "allocation", "segment",
                 "active"):
        small_, large_ = (f"{stat}.small_pool", f"{stat}.large_pool")
        for kind in ("current", "allocated", "freed"):
            assert now[f"{stat}.all.{kind}"] == now[f"{small_}.{kind}"] + now[f"{large_}.{kind}"], (stat, kind)
        assert max(now[f"{small_}.peak"], now[f"{large_}.peak"]) <= now[f"{stat}.all.peak"] <= \
            now[f"{small_}.peak"] + now[f"{large_}.peak"], stat
    del small, large
    freed = _stats()
    assert freed["allocated_bytes.small_pool.current"] == before["allocated_bytes.small_pool.current"]
    assert freed["reserved_bytes.small_pool.current"] == now["reserved_bytes.small_pool.current"]
    torch.npu.empty_cache()
    emptied = _stats()
    for pool in ("small_pool", "large_pool"):
        assert emptied[f"reserved_bytes.{pool}.current"] == before[f"reserved_bytes.{pool}.current"]


def test_torch_accelerator_reads_the_same_allocator():
    keep = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    cached = torch.empty(1000, device="npu")
    del cached
    npu, accelerator = _stats(), dict(torch.accelerator.memory_stats())
    assert accelerator.keys() == npu.keys()
    assert {k: (npu[k], accelerator[k]) for k in npu if npu[k] != accelerator[k]} == {}
    assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.npu.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.npu.max_memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.npu.max_memory_reserved()
    assert torch.accelerator.get_memory_info(0) == torch.npu.mem_get_info(0)
    del keep


def test_mem_get_info_counts_reserved_memory_as_used():
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="npu")
    del x  # cached: reserved, not allocated
    free, total = torch.npu.mem_get_info()
    assert total == torch.npu.get_device_properties(0).total_memory
    assert free == total - torch.npu.memory_reserved()
    assert torch.npu.memory_reserved() > torch.npu.memory_allocated()
    torch.npu.empty_cache()
    assert torch.npu.mem_get_info()[0] == total - torch.npu.memory_reserved()


def test_memory_snapshot_lists_every_block_as_memory_stats_counts_it():
    torch.npu.empty_cache()
    live = [torch.empty(n, dtype=torch.uint8, device="npu") for n in (1000, 300 * 1024, 2 * MiB, 5 * MiB)]
    cached = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    cached_address = cached.data_ptr()
    cached_small = torch.empty(700, dtype=torch.uint8, device="npu")
    del cached, cached_small
    segments = [s for s in torch.npu.memory_snapshot() if s["device"] == 0]
    stats = _stats()
    assert len(segments) == stats["segment.all.current"]
    for pool, kind in (("small_pool", "small"), ("large_pool", "large")):
        mine = [s for s in segments if s["segment_type"] == kind]
        assert len(mine) == stats[f"segment.{pool}.current"], pool
        assert sum(s["total_size"] for s in mine) == stats[f"reserved_bytes.{pool}.current"], pool
        assert sum(s["requested_size"] for s in mine) == stats[f"requested_bytes.{pool}.current"], pool
        assert all((s["total_size"] <= MiB) == (kind == "small") for s in mine)
    assert sum(s["total_size"] for s in segments) == torch.npu.memory_reserved()
    by_address = {s["address"]: s for s in segments}
    for tensor in live:
        block = by_address[tensor.data_ptr()]["blocks"][0]
        assert block["state"] == "active_allocated" and block["requested_size"] == tensor.nbytes
        assert block["size"] >= tensor.nbytes
    freed = by_address[cached_address]
    assert freed["blocks"][0]["state"] == "inactive" and freed["allocated_size"] == 0
    assert freed["total_size"] >= 3 * MiB and freed["segment_type"] == "large"
    torch.npu.empty_cache()
    assert cached_address not in {s["address"] for s in torch.npu.memory_snapshot()}
    del live


def test_an_allocation_of_an_exabyte_fails_as_on_the_npu():
    with pytest.raises(torch.OutOfMemoryError, match=r"^NPU out of memory\. Tried to allocate more than 1EB memory\."):
        torch.empty(1 << 60, dtype=torch.uint8, device="npu")
    with pytest.raises(torch.OutOfMemoryError, match="more than 1EB"):
        torch.empty(1 << 61, dtype=torch.uint8, device="npu")
    assert torch.npu.memory_reserved() >= torch.npu.memory_allocated()
    torch.ones(4, device="npu").sum().item()  # the device still works


def test_caching_allocator_alloc_and_delete():
    allocated = torch.npu.memory_allocated()
    address = torch.npu.caching_allocator_alloc(2 * MiB)
    assert address != 0
    assert torch.npu.memory_allocated() - allocated >= 2 * MiB
    assert address in {s["address"] for s in torch.npu.memory_snapshot()}
    torch.npu.caching_allocator_delete(address)
    assert torch.npu.memory_allocated() == allocated
    with pytest.raises(RuntimeError):
        torch.npu.caching_allocator_delete(address)


# ---- pinned host memory ----------------------------------------------------------------------------------------


def test_freed_pinned_memory_is_cached_and_reused():
    native = _extension.load()
    x = torch.empty(MiB // 4, dtype=torch.float32).pin_memory()  # 1 MiB
    assert x.is_pinned()
    address = x.data_ptr()
    before = native.host_memory_stats()
    del x
    cached = native.host_memory_stats()
    assert cached["allocated_bytes"]["current"] == before["allocated_bytes"]["current"]  # still held
    assert cached["active_bytes"]["current"] == before["active_bytes"]["current"] - MiB
    y = torch.empty(MiB, dtype=torch.uint8).pin_memory()  # the same block size
    assert y.data_ptr() == address and y.is_pinned()
    assert native.host_memory_stats()["num_host_alloc"] == before["num_host_alloc"]  # reused, not allocated
    y.fill_(3)
    assert torch.equal(y.to("npu", non_blocking=True).cpu(), torch.full((MiB,), 3, dtype=torch.uint8))


# ---- streams -----------------------------------------------------------------------------------------------------


def test_stream_ids_are_torch_npus():
    """(type << 5) | index: the default stream 0, NORMAL streams type 3 and HIGH priority ones type 4, each from a
    pool of 32 per device handed out round-robin."""
    assert torch.npu.default_stream().stream_id == 0
    assert torch.npu.current_stream().stream_id == 0
    normal = [torch.npu.Stream() for _ in range(33)]
    assert all(s.stream_id >> 5 == 3 for s in normal)
    assert len({s.stream_id for s in normal}) == 32 and normal[32].stream_id == normal[0].stream_id
    assert all(s.device == torch.device("npu:0") for s in normal)
    high = torch.npu.Stream(priority=-1)
    assert high.stream_id >> 5 == 4 and high.stream_id & 31 < 32
    assert torch.Stream(device="npu").stream_id >> 5 == 3
    other = torch.npu.Stream(device=1)
    assert other.stream_id >> 5 == 3 and other.device == torch.device("npu:1")
    with torch.npu.stream(high):
        assert torch.npu.current_stream().stream_id == high.stream_id
        assert torch.accelerator.current_stream().stream_id == high.stream_id
    assert torch.npu.current_stream().stream_id == 0
    again = torch.npu.Stream(stream_id=normal[5].stream_id, device_index=0, device_type=normal[5].device_type)
    assert again == normal[5]


# ---- the process: visible devices, fork, the host cache (in processes of their own) ----------------------------

PROBE = os.path.join(REPO, "tests", "real_layer", "probes", "device_runtime.py")


def test_the_process_rules():
    """Visible devices parsed as torch_npu parses them (ids ascend; the list stops at the first character that is
    neither a digit nor a comma, at an empty entry or an id the machine lacks) and re-read until the device is
    first used; a fork before the first use can use the device, one after it cannot; the host cache. The probe is
    the one the layers are compared with; here its answers are held to the runtime's."""
    env = shim_free_env("ASCEND_RT")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--log-level", "off", PROBE],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    facts = dict(line.split(" = ", 1) for line in proc.stdout.splitlines() if " = " in line)
    expected = {
        "is_initialized before use": "False",
        "visible '0,1'": "2",
        "visible '1,0'": "0",  # ids must ascend
        "visible '0, 1'": "1",  # the list ends at the first character that is neither a digit nor a comma
        "visible '0,32,1'": "1",  # ... and at the first id the machine (8 devices) lacks
        "visible '2,5,7'": "3",
        "visible '1,1'": "0",
        "visible ''": "0",
        "visible '0,a1'": "1",
        "visible '0,1,2'": "3",
        "child of an unused parent": "0",
        "is_initialized after the child": "False",
        "is_initialized after use": "True",
        "visible after use": "3",  # fixed once the device is used
        "child of a used parent": "7",  # Cannot re-initialize NPU in forked subprocess
        "pinned block reused": "True",
        "empty_host_cache": "None",
        "pinned after empty_host_cache": "True",
    }
    assert {key: facts.get(key) for key in expected} == expected, proc.stdout + proc.stderr[-3000:]
