"""What a CUDA program observes under the shim (one ``key = value`` line per fact): the differential test runs this on
both emulator layers and compares."""
import torch
import torch.nn as nn

from _facts import fact  # the probe's directory is sys.path[0]


fact("cuda.is_available", lambda: torch.cuda.is_available())
fact("cuda.device_count", lambda: torch.cuda.device_count())
fact("cuda.is_initialized", lambda: torch.cuda.is_initialized())
fact("cuda.get_device_name()", lambda: torch.cuda.get_device_name())
fact("cuda.get_device_name(0)", lambda: torch.cuda.get_device_name(0))
fact("cuda.get_device_capability", lambda: torch.cuda.get_device_capability())
fact("cuda.get_device_properties.name", lambda: torch.cuda.get_device_properties(0).name)
fact("cuda.is_bf16_supported", lambda: torch.cuda.is_bf16_supported())
fact("backends.cuda.is_built", lambda: torch.backends.cuda.is_built())
fact("cudnn.is_available", lambda: torch.backends.cudnn.is_available())
fact("torch.device('cuda')", lambda: torch.device("cuda"))
x = torch.ones(64, 64, device="cuda")
fact("x.device", lambda: x.device)
fact("x.is_cuda", lambda: x.is_cuda)
fact("x.device.type == 'cuda'", lambda: x.device.type == "cuda")
fact("x.type()", lambda: x.type())
fact(".cuda()", lambda: torch.ones(2).cuda().device)
fact(".to('cuda:1')", lambda: torch.ones(2).to("cuda:1").device)
fact("cuda.set_device(1)", lambda: torch.cuda.set_device(1))
fact("cuda.current_device", lambda: torch.cuda.current_device())
fact("cuda.set_device(0)", lambda: torch.cuda.set_device(0))
fact("cuda.memory_allocated", lambda: torch.cuda.memory_allocated())
fact("cuda.max_memory_allocated", lambda: torch.cuda.max_memory_allocated())
fact("cuda.memory_reserved", lambda: torch.cuda.memory_reserved())
fact("cuda.mem_get_info total", lambda: torch.cuda.mem_get_info()[1])
fact("cuda.empty_cache", lambda: torch.cuda.empty_cache())
fact("cuda.synchronize", lambda: torch.cuda.synchronize())
torch.cuda.manual_seed(7)
fact("randn after cuda.manual_seed", lambda: [round(v, 6) for v in torch.randn(3, device="cuda").cpu().tolist()])
torch.manual_seed(7)
fact("randn after manual_seed", lambda: [round(v, 6) for v in torch.randn(3, device="cuda").cpu().tolist()])
fact("cuda.get_rng_state", lambda: tuple(torch.cuda.get_rng_state().shape))
fact("cuda.Stream", lambda: type(torch.cuda.Stream()).__name__)
fact("cuda.Event elapsed", lambda: (lambda a, b: (a.record(), b.record(), b.synchronize(), a.elapsed_time(b) >= 0)[3])(
    torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
with torch.autocast("cuda", dtype=torch.bfloat16):
    fact("autocast('cuda') mm", lambda: torch.mm(x, x).dtype)
fact("amp.GradScaler('cuda')", lambda: torch.amp.GradScaler("cuda").is_enabled())
torch.backends.cuda.matmul.allow_tf32 = True
fact("matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)
torch.backends.cudnn.allow_tf32 = False
fact("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
fact("nccl available", lambda: torch.distributed.is_nccl_available())
fact("sdpa", lambda: tuple(torch.nn.functional.scaled_dot_product_attention(
    *(torch.randn(1, 2, 8, 16, device="cuda"),) * 3, is_causal=True).shape))
torch.manual_seed(0)
m = nn.Linear(8, 4).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True)
for _ in range(3):
    m(torch.ones(2, 8, device="cuda")).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
fact("fused AdamW weights", lambda: round(m.weight.detach().sum().item(), 6))
fact("state_dict device", lambda: next(iter(m.state_dict().values())).device)
fact("Module.cuda param", lambda: next(nn.Linear(2, 2).cuda().parameters()).device)
fact("pin_memory", lambda: torch.ones(2).pin_memory().is_pinned())
fact("cuda.amp.autocast", lambda: type(torch.cuda.amp.autocast()).__name__)
fact("compile", lambda: torch.compile(lambda t: t * 2 + 1)(torch.ones(2, device="cuda")).cpu().tolist())
