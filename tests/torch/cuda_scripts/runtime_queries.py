"""Streams, events, memory statistics, properties, capability, RNG: the torch.cuda runtime surface."""
import uuid

import torch

from ascend_shim.errors import UnsupportedOnNPUError

major, minor = torch.cuda.get_device_capability()
assert (major, minor) >= (8, 0)
props = torch.cuda.get_device_properties(0)
assert props.major == major and props.total_memory > 0 and "Ascend" in props.name, props
# launch-geometry fields CUDA code sizes grids with (capability 8.0's limits), and the device's identity
assert (props.warp_size, props.regs_per_multiprocessor, props.max_threads_per_multi_processor) == (32, 65536, 2048)
assert uuid.UUID(str(props.uuid)) != uuid.UUID(str(torch.cuda.get_device_properties(1).uuid))
assert torch.cuda.is_bf16_supported()
assert "Ascend" in torch.cuda.get_device_name(0)

torch.cuda.set_device("cuda:1")
assert torch.cuda.current_device() == 1
torch.cuda.set_device(0)
before = torch.cuda.memory_allocated()
big = torch.empty(1024, 1024, device="cuda")
assert torch.cuda.memory_allocated() - before >= 4 * 1024 * 1024
assert torch.cuda.max_memory_allocated("cuda:0") >= torch.cuda.memory_allocated(0)
del big
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total

s = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.stream(s):
    start.record()
    z = torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
    end.record()
end.synchronize()
assert start.elapsed_time(end) >= 0
torch.cuda.current_stream().wait_stream(s)
assert isinstance(s.cuda_stream, int) and s.cuda_stream != torch.cuda.current_stream().cuda_stream
try:
    torch.cuda.Event(enable_timing=True).elapsed_time(torch.cuda.Event(enable_timing=True))
except ValueError as exc:  # what CUDA raises for events never recorded
    assert "recorded" in str(exc), exc
else:
    raise AssertionError("elapsed_time of unrecorded events must fail")
assert z.device.type == "npu"

torch.cuda.manual_seed(123)
# filled in at the device's first use, after torch.cuda was patched (megatron's RNG tracker indexes them)
gens = torch.cuda.default_generators
assert len(gens) == torch.cuda.device_count() and gens[torch.cuda.current_device()].initial_seed() == 123, gens
r1 = torch.randn(4, device="cuda")
torch.cuda.manual_seed(123)
r2 = torch.randn(4, device="cuda")
assert torch.equal(r1.cpu(), r2.cpu())
state = torch.cuda.get_rng_state()
r3 = torch.randn(4, device="cuda")
torch.cuda.set_rng_state(state)
assert torch.equal(r3.cpu(), torch.randn(4, device="cuda").cpu())

assert torch.cuda.ipc_collect() is None
assert torch.cuda.get_allocator_backend() == "native" and torch.cuda.get_sync_debug_mode() == 0
assert torch.cuda.list_gpu_processes().startswith("GPU:0\n")
assert torch.cuda.list_gpu_processes("cuda:1").startswith("GPU:1\n")

with torch.cuda.nvtx.range("step"):
    torch.cuda.nvtx.range_push("inner")
    torch.cuda.nvtx.range_pop()

d = torch.cuda.DoubleTensor(3)
assert d.dtype == torch.float64 and d.device.type == "npu", (d.dtype, d.device)
assert isinstance(d, torch.cuda.DoubleTensor)

try:
    torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")
except UnsupportedOnNPUError as exc:
    assert "jiterator" in str(exc)
else:
    raise AssertionError("jiterator must be refused")
print("OK runtime_queries")
