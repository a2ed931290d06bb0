"""What a program observes of the NPU through torch.npu / torch_npu (one ``key = value`` line per fact): the
differential test runs this on both emulator layers and compares."""
import torch
import torch_npu


def fact(key, fn):
    try:
        value = fn()
    except Exception as exc:  # the error's type is part of the contract
        value = f"raises {type(exc).__name__}"
    print(f"{key} = {value}")


fact("torch.npu is torch_npu.npu", lambda: torch.npu is torch_npu.npu)
fact("version", lambda: torch_npu.__version__)
fact("is_initialized before use", lambda: torch.npu.is_initialized())
fact("is_available", lambda: torch.npu.is_available())
fact("device_count", lambda: torch.npu.device_count())
fact("current_device", lambda: torch.npu.current_device())
fact("get_device_name()", lambda: torch.npu.get_device_name())
fact("get_device_name(0)", lambda: torch.npu.get_device_name(0))
fact("get_device_properties.name", lambda: torch.npu.get_device_properties(0).name)
fact("get_device_properties.total_memory", lambda: torch.npu.get_device_properties(0).total_memory)
fact("is_bf16_supported", lambda: torch.npu.is_bf16_supported())
fact("set_device(99)", lambda: torch.npu.set_device(99))
torch.manual_seed(7)  # before the device's first use: torch_npu queues the seed until its lazy init
fact("first npu tensor after torch.manual_seed", lambda: [round(v, 6) for v in torch.randn(3, device="npu").cpu().tolist()])
x = torch.ones(256, 256, device="npu")
fact("is_initialized after use", lambda: torch.npu.is_initialized())
fact("tensor device", lambda: x.device)
fact("is_npu", lambda: x.is_npu)
fact("memory_allocated", lambda: torch.npu.memory_allocated())
fact("max_memory_allocated", lambda: torch.npu.max_memory_allocated())
fact("memory_reserved", lambda: torch.npu.memory_reserved())
fact("memory_stats allocated_bytes.all.current", lambda: torch.npu.memory_stats()["allocated_bytes.all.current"])
fact("mem_get_info total", lambda: torch.npu.mem_get_info()[1])
fact("empty_cache", lambda: torch.npu.empty_cache())
fact("typed class", lambda: isinstance(x, torch.npu.FloatTensor))
fact("x.type()", lambda: x.type())
fact("x.type(HalfTensor).dtype", lambda: x.type(torch.npu.HalfTensor).dtype)
torch.npu.manual_seed(1234)
fact("randn after manual_seed", lambda: [round(v, 6) for v in torch.randn(4, device="npu").cpu().tolist()])
fact("initial_seed", lambda: torch.npu.initial_seed())
fact("rng state", lambda: (torch.npu.get_rng_state().dtype, tuple(torch.npu.get_rng_state().shape)))
fact("generator device", lambda: torch.Generator(device="npu").device)
fact("stream type", lambda: type(torch.npu.current_stream()).__name__)
fact("default stream id", lambda: torch.npu.default_stream().stream_id)
fact("new stream query", lambda: torch.npu.Stream().query())
fact("event elapsed", lambda: (lambda a, b: (a.record(), b.record(), b.synchronize(), a.elapsed_time(b) >= 0)[3])(
    torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)))
fact("event without timing", lambda: torch.npu.Event().elapsed_time(torch.npu.Event()))
fact("synchronize", lambda: torch.npu.synchronize())
fact("autocast dtype", lambda: torch.get_autocast_dtype("npu"))
with torch.autocast("npu", dtype=torch.float16):
    fact("autocast mm dtype", lambda: torch.mm(x, x).dtype)
fact("mixed devices", lambda: x + torch.ones(256, 256))
fact("0-dim cpu operand", lambda: (x * torch.tensor(2.0)).sum().item())
fact("to cpu", lambda: x.cpu().sum().item())
fact("non_blocking copy", lambda: x.to("cpu", non_blocking=True).device)
fact("pin_memory", lambda: torch.ones(2).pin_memory().is_pinned())
fact("double on npu", lambda: torch.ones(2, dtype=torch.float64, device="npu").dtype)
fact("complex on npu", lambda: torch.ones(2, dtype=torch.complex64, device="npu").dtype)
fact("op packet", lambda: torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm)
g = torch.ones(8, device="npu", dtype=torch.float16)
h = torch.arange(16, device="npu", dtype=torch.float16).reshape(2, 8) / 16
fact("npu_rms_norm", lambda: [round(v, 4) for v in torch_npu.npu_rms_norm(h, g)[0].float().sum(-1).cpu().tolist()])
fact("npu_swiglu", lambda: round(torch_npu.npu_swiglu(h.float(), dim=-1).sum().item(), 5))
fact("npu_rms_norm on cpu", lambda: torch_npu.npu_rms_norm(h.cpu(), g.cpu()))
fact("get_npu_format", lambda: torch_npu.get_npu_format(x))
fact("npu_format_cast ND", lambda: torch_npu.npu_format_cast(x, 2).shape)
fact("npu_format_cast NZ", lambda: torch_npu.npu_format_cast(x, 29).shape)
fact("torch.npu_rms_norm", lambda: torch.npu_rms_norm(h, g))
fact("an op the emulator does not implement", lambda: torch.ops.npu.npu_gelu(x))
fact("hccl in backend map", lambda: torch.distributed.Backend.default_device_backend_map.get("npu"))
fact("is_hccl_available", lambda: torch.distributed.is_hccl_available())
fact("NpuFusedAdamW", lambda: torch_npu.optim.NpuFusedAdamW.__name__)
fact("checkpoint default device", lambda: torch.utils.checkpoint.DefaultDeviceType.get_device_type())
fact("device module", lambda: torch.get_device_module("npu") is torch.npu)
fact("accelerator", lambda: torch.accelerator.current_accelerator())
