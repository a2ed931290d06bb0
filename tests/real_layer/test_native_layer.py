"""The stand-in native layer under Huawei's torch_npu Python: absent names look absent (``hasattr``-probed
features switch off), declared but unemulated ones raise naming themselves when called, and the storage helpers
torch_npu's fused optimizers rely on behave as its C++ does."""
import pytest
import torch

from .conftest import run_shim

pytestmark = pytest.mark.slow

_PROBE = """
import torch, torch_npu
from torch_npu import _C

print("rpc agent", hasattr(_C, "_rpc_npu_init"))
try:
    _C._graph_pool_handle()
except NotImplementedError as exc:
    print("not emulated:", type(exc).__name__, "_graph_pool_handle" in str(exc))
try:
    torch.ops.npu.npu_gelu(torch.ones(2, device="npu"))
except NotImplementedError as exc:
    print("op not emulated:", "npu_gelu" in str(exc))

src = torch.arange(12, dtype=torch.float32, device="npu")
dst = torch.zeros(4, device="npu")
print("storage size", torch.ops.npu.get_storage_size(dst))
torch.ops.npu.npu_change_data_ptr(dst, src, 4)
print("window", dst.cpu().tolist())
src.add_(100)
print("shared", dst.cpu().tolist())
print("format", torch_npu.get_npu_format(dst), tuple(torch_npu.npu_format_cast(dst, 2).shape))
try:
    torch_npu.npu_format_cast(dst, 29)
except NotImplementedError as exc:
    print("NZ refused", type(exc).__name__, "acl_format 29" in str(exc) and "private" in str(exc))
"""


def test_absent_unemulated_and_storage_helpers(prepared, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = run_shim("real", "--log-level", "off", str(probe))
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert "rpc agent False" in out
    assert "not emulated: NotEmulatedError True" in out
    assert "op not emulated: True" in out
    assert "storage size 4" in out
    assert "window [4.0, 5.0, 6.0, 7.0]" in out
    assert "shared [104.0, 105.0, 106.0, 107.0]" in out
    assert "format ND (4,)" in out  # torch_npu wraps the int in its Format enum
    assert "NZ refused NotEmulatedError True" in out


_RUNTIME_PROBE = r"""
import ctypes, os, sys, tempfile, uuid, warnings
import torch, torch_npu
from torch_npu import _C


def check(key, fn):
    try:
        value = fn()
    except Exception as exc:
        value = f"raises {type(exc).__name__}: {exc}".splitlines()[0]
    print(f"{key} = {value}")


# -- visible devices: torch_npu's binding re-reads ASCEND_RT_VISIBLE_DEVICES until the device is first used
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0,1"
check("binding count 0,1", lambda: (_C._npu_getDeviceCount(), torch.npu.device_count()))
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "1,0"
check("binding count 1,0", lambda: (_C._npu_getDeviceCount(), torch.npu.device_count()))
del os.environ["ASCEND_RT_VISIBLE_DEVICES"]
check("binding count unset", lambda: (_C._npu_getDeviceCount(), torch.npu.device_count()))
x = torch.ones(4, device="npu")
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0"
check("binding count after use", lambda: (_C._npu_getDeviceCount(), torch.npu.device_count()))
del os.environ["ASCEND_RT_VISIBLE_DEVICES"]

# -- stream ids: (type << 5) | index
check("stream type", lambda: torch.npu.Stream().stream_id >> 5)
check("high priority stream type", lambda: torch.npu.Stream(priority=-1).stream_id >> 5)
check("sync launch stream type", lambda: torch.npu.Stream(is_sync_launch=1).stream_id >> 5)
check("SyncLaunchStream type", lambda: torch_npu.npu.SyncLaunchStream().stream_id >> 5)
check("sync launch pool", lambda: sorted({torch.npu.Stream(is_sync_launch=1).stream_id & 31 for _ in range(9)}))
check("rebuild a valid stream", lambda: torch.npu.Stream(stream_id=96, device_index=0, device_type=20).stream_id)
BAD = {"id": (7, 0, 20), "sync launch index": (2 << 5 | 4, 0, 20), "device type": (96, 0, 1),
       "device index": (96, 99, 20), "negative id": (-1, 0, 20), "external id": (1 << 30 | 9, 0, 20)}
for name, triple in BAD.items():
    check(f"rebuild with a bad {name}", lambda t=triple: torch.npu.Stream(stream_id=t[0], device_index=t[1],
                                                                         device_type=t[2]).stream_id)
check("_npu_setStream with a bad id", lambda: _C._npu_setStream(stream_id=7, device_index=0, device_type=20))

# -- raw handles
s1, s2 = torch.npu.Stream(), torch.npu.Stream()
check("default npu_stream is the current raw stream",
      lambda: torch.npu.current_stream().npu_stream == _C._npu_getCurrentRawStream(0) != 0)
check("NoWait agrees", lambda: _C._npu_getCurrentRawStreamNoWait(0) == _C._npu_getCurrentRawStream(0))
check("handles distinct", lambda: len({torch.npu.default_stream().npu_stream, s1.npu_stream, s2.npu_stream}))
with torch.npu.stream(s1):
    check("in a stream context", lambda: (torch.npu.current_stream().npu_stream == s1.npu_stream
                                          == _C._npu_getCurrentRawStream(0)))

# -- external streams
handle = ctypes.c_void_p()
rt = torch_npu.npu.npurt()
check("npuStreamCreate", lambda: (rt.npuStreamCreate(ctypes.addressof(handle)), handle.value is not None))
external = torch_npu.npu.ExternalStream(handle.value)
check("external stream id", lambda: (bool(external.stream_id & (1 << 30)), external.npu_stream == handle.value))
check("same handle, same stream", lambda: torch_npu.npu.ExternalStream(handle.value).stream_id == external.stream_id)
with torch.npu.stream(external):
    check("external is current", lambda: (_C._npu_getCurrentRawStream(0) == handle.value,
                                          torch.npu.current_stream().stream_id == external.stream_id))
    check("work on the external stream", lambda: (x * 3).sum().item())
check("rebuild the external stream",
      lambda: torch.npu.Stream(stream_id=external.stream_id, device_index=0, device_type=20) == external)
check("external with a priority", lambda: torch_npu.npu.ExternalStream(handle.value, priority=-1))
check("npuStreamDestroy", lambda: rt.npuStreamDestroy(handle.value))
check("npuStreamCreate(0)", lambda: rt.npuStreamCreate(0) != 0)

# -- events
e1, e2 = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
check("event is a torch.Event", lambda: isinstance(e1, torch.Event))
check("elapsed_time unrecorded", lambda: e1.elapsed_time(e2))
check("recorded_time unrecorded", lambda: e1.recorded_time())
check("elapsed_time without timing", lambda: torch.npu.Event().elapsed_time(torch.npu.Event()))
e1.record()
(x @ x).item()
e2.record()
e2.synchronize()
check("elapsed_time", lambda: e1.elapsed_time(e2) >= 0)
check("recorded_time", lambda: (type(e1.recorded_time()).__name__, e1.recorded_time() <= e2.recorded_time()))
check("event query", lambda: e2.query())
check("record on a stream", lambda: (torch.npu.Event().record(s2), True)[1])

# -- sync debug mode
def warned(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return sum("called a synchronizing NPU operation" in str(w.message) for w in seen)

check("sync debug off", lambda: (torch.npu.get_sync_debug_mode(), warned(lambda: (x.sum().item(), x.cpu()))))
torch.npu.set_sync_debug_mode(1)
check("sync debug warn", lambda: (torch.npu.get_sync_debug_mode(), warned(lambda: x.sum().item()),
                                  warned(lambda: x.cpu())))
torch.npu.set_sync_debug_mode("error")
check("sync debug error", lambda: x.cpu())
check("sync debug error keeps npu work", lambda: (torch.npu.get_sync_debug_mode(), str((x + 1).device)))
torch.npu.set_sync_debug_mode("default")
check("sync debug mode 3", lambda: torch.npu.set_sync_debug_mode(3))
check("sync debug back off", lambda: (torch.npu.get_sync_debug_mode(), warned(lambda: x.cpu())))

# -- device properties
props = torch.npu.get_device_properties(0)
check("uuid", lambda: (type(props.uuid).__name__, len(str(props.uuid)),
                       str(props.uuid) == str(torch.npu.get_device_properties(0).uuid),
                       props.uuid != torch.npu.get_device_properties(1).uuid))
check("uuid parses", lambda: uuid.UUID(str(props.uuid)) == props.uuid)
check("cuda-only fields", lambda: [getattr(props, f) for f in ("major", "minor", "warp_size", "is_integrated",
                                                               "is_multi_gpu_board", "max_threads_per_multi_processor",
                                                               "regs_per_multiprocessor", "gcnArchName")])
check("peer access", lambda: (torch.npu.can_device_access_peer(0, 0), torch.npu.can_device_access_peer(0, 1)))

# -- allocation and formats
check("_empty_strided_npu", lambda: (lambda t: (tuple(t.shape), t.stride(), t.dtype, str(t.device)))(
    _C._empty_strided_npu((2, 3), (1, 2), torch.float16)))
check("_empty_strided_npu arity", lambda: _C._empty_strided_npu((2, 3), (3, 1)))
check("base formats", lambda: [torch_npu.npu_format_cast(x, f) is x for f in (0, 1, 2, 27, 30)])
for fmt in (29, 3):
    check(f"format {fmt}", lambda f=fmt: torch_npu.npu_format_cast(x, f))
check("empty_with_format", lambda: (lambda t: (tuple(t.shape), t.dtype, str(t.device)))(
    torch_npu.empty_with_format((2, 3), dtype=torch.bfloat16, device="npu:1", acl_format=2)))
check("empty_with_format NZ", lambda: torch_npu.empty_with_format((2, 3), dtype=torch.float16, device="npu",
                                                                  acl_format=29))
allocated = torch.npu.memory_allocated()
address = torch.npu.caching_allocator_alloc(1 << 20)
check("caching_allocator_alloc", lambda: (address != 0, torch.npu.memory_allocated() - allocated >= 1 << 20))
torch.npu.caching_allocator_delete(address)
check("caching_allocator_delete", lambda: torch.npu.memory_allocated() == allocated)
check("caching_allocator_delete twice", lambda: torch.npu.caching_allocator_delete(address))

# -- pinned host memory
pinned = torch.ones(1 << 18).pin_memory()  # 1 MiB
host = torch.npu.host_memory_stats()
check("host stats", lambda: sorted(_C._npu_hostMemoryStats()))
check("host pinned active", lambda: host["active_bytes.current"] >= 1 << 20)
address = pinned.data_ptr()
del pinned
check("host freed block cached",
      lambda: torch.npu.host_memory_stats()["allocated_bytes.current"] == host["allocated_bytes.current"])
check("host block reused", lambda: torch.ones(1 << 18).pin_memory().data_ptr() == address)
torch.npu.host_empty_cache()
check("host cache emptied", lambda: (lambda s: s["allocated_bytes.current"] == s["active_bytes.current"])(
    torch.npu.host_memory_stats()))

# -- mstx with no profiler attached: ids, no output
from torch_npu.npu import mstx

with tempfile.TemporaryFile() as captured:
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(captured.fileno(), 1); os.dup2(captured.fileno(), 2)
    try:
        ids = [mstx.range_start("a"), mstx.range_start("b", torch.npu.current_stream()),
               mstx.range_push("c"), mstx.range_push("d", s1, "mine"), mstx.range_pop("mine"), mstx.range_pop(),
               mstx.mark("m"), mstx.mark("m", s1)]
        mstx.range_end(ids[0]); mstx.range_end(ids[1])
        with mstx.annotate("ann"):
            pass
        sys.stdout.flush(); sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    captured.seek(0)
    printed = captured.read()
check("mstx printed", lambda: printed)
check("mstx ids", lambda: (ids[0] > 0, ids[1] > ids[0], all(type(i) is int and i >= 0 for i in ids[2:6]), ids[6:]))

# -- autocast bindings
check("autocast binding", lambda: (_C.is_autocast_enabled(), _C.get_autocast_dtype()))
_C.set_autocast_enabled(True)
_C.set_autocast_dtype(torch.bfloat16)
check("autocast set", lambda: (_C.is_autocast_enabled(), _C.get_autocast_dtype(), torch.is_autocast_enabled("npu"),
                               torch.get_autocast_dtype("npu")))
_C.set_autocast_enabled(False)
_C.set_autocast_dtype(torch.float16)
check("autocast reset", lambda: (torch.is_autocast_enabled("npu"), torch.get_autocast_dtype("npu")))
"""

#: what each check of the runtime probe must print
_RUNTIME = {
    "binding count 0,1": "(2, 2)",
    "binding count 1,0": "(0, 0)",  # torch_npu's parser: ids must ascend
    "binding count unset": "(8, 8)",
    "binding count after use": "(8, 8)",  # fixed once the device is used
    "stream type": "3",
    "high priority stream type": "4",
    "sync launch stream type": "2",
    "SyncLaunchStream type": "2",
    "sync launch pool": "[0, 1, 2, 3]",
    "rebuild a valid stream": "96",
    "_npu_setStream with a bad id": "raises RuntimeError",
    "default npu_stream is the current raw stream": "True",
    "NoWait agrees": "True",
    "handles distinct": "3",
    "in a stream context": "True",
    "npuStreamCreate": "(0, True)",
    "external stream id": "(True, True)",
    "same handle, same stream": "True",
    "external is current": "(True, True)",
    "work on the external stream": "12.0",
    "rebuild the external stream": "True",
    "external with a priority": "raises RuntimeError",
    "npuStreamDestroy": "0",
    "npuStreamCreate(0)": "True",
    "event is a torch.Event": "True",
    "elapsed_time unrecorded": "raises RuntimeError",
    "recorded_time unrecorded": "raises RuntimeError",
    "elapsed_time without timing": "raises RuntimeError",
    "elapsed_time": "True",
    "recorded_time": "('int', True)",
    "event query": "True",
    "record on a stream": "True",
    "sync debug off": "(0, 0)",
    "sync debug warn": "(1, 1, 1)",
    "sync debug error": "raises RuntimeError: called a synchronizing NPU operation",
    "sync debug error keeps npu work": "(2, 'npu:0')",
    "sync debug mode 3": "raises RuntimeError: invalid value of debug_mode, expected one of 0,1,2",
    "sync debug back off": "(0, 0)",
    "uuid": "('UUID', 36, True, True)",
    "uuid parses": "True",
    "cuda-only fields": "[None, None, None, None, None, None, None, None]",
    "peer access": "(False, True)",
    "_empty_strided_npu": "((2, 3), (1, 2), torch.float16, 'npu:0')",
    "_empty_strided_npu arity": "raises RuntimeError",
    "base formats": "[True, True, True, True, True]",
    "format 29": "raises NotEmulatedError",
    "format 3": "raises NotEmulatedError",
    "empty_with_format": "((2, 3), torch.bfloat16, 'npu:1')",
    "empty_with_format NZ": "raises NotEmulatedError",
    "caching_allocator_alloc": "(True, True)",
    "caching_allocator_delete": "True",
    "caching_allocator_delete twice": "raises RuntimeError",
    "host stats": "['active_bytes', 'active_requests', 'allocated_bytes', 'allocations', 'host_alloc_time', "
                  "'host_free_time', 'num_host_alloc', 'num_host_free']",
    "host pinned active": "True",
    "host freed block cached": "True",
    "host block reused": "True",
    "host cache emptied": "True",
    "mstx printed": "b''",
    "mstx ids": "(True, True, True, [None, None])",  # range ids, push/pop depths (-1: refused), marks
    "autocast binding": "(False, torch.float16)",
    "autocast set": "(True, torch.bfloat16, True, torch.bfloat16)",
    "autocast reset": "(False, torch.float16)",
}
#: checks that must raise RuntimeError, whatever the message
_RAISES = ["rebuild with a bad id", "rebuild with a bad sync launch index", "rebuild with a bad device type",
           "rebuild with a bad device index", "rebuild with a bad negative id", "rebuild with a bad external id"]


def test_runtime_contract_of_the_native_layer(prepared, tmp_path):
    """torch_npu's runtime as its own tests state it, over the stand-in native layer: stream ids and their checks,
    raw handles and external streams, events, the sync debug mode, device properties, allocation helpers and
    formats, the host allocator's statistics, mstx markers, the autocast bindings, visible devices."""
    probe = tmp_path / "runtime_probe.py"
    probe.write_text(_RUNTIME_PROBE)
    done = run_shim("real", "--log-level", "off", str(probe))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    seen = dict(line.split(" = ", 1) for line in done.stdout.splitlines() if " = " in line)
    for key in _RAISES:
        assert seen.get(key, "").startswith("raises RuntimeError"), (key, seen.get(key))
    wrong = {}
    for key, expected in _RUNTIME.items():
        got = seen.get(key)
        if got is None or not (got == expected or (expected.startswith("raises ") and ":" not in expected
                                                   and got.startswith(expected + ":"))):
            wrong[key] = (got, expected)
    assert not wrong, f"got vs expected: {wrong}"
    assert "acl_format 29" in seen["format 29"] and "acl_format 3 " in seen["format 3"]

def test_manual_seed_reaches_the_device_after_a_later_activation(clean_shim):
    """Activating again in a process that already uses the device keeps its state: torch.manual_seed still seeds."""
    torch.ones(1, device="npu")  # the device in use
    clean_shim.activate("sim")
    clean_shim.deactivate()
    clean_shim.activate("sim")
    assert torch.npu.is_initialized()
    torch.manual_seed(123)
    a = torch.rand(3, device="npu").cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3, device="npu").cpu(), a)
    assert torch.npu.initial_seed() == 123
