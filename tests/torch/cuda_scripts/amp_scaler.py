"""autocast + GradScaler, the fp16 recipe; loss scaling must really happen on the NPU."""
import torch
import torch.nn as nn

device = "cuda"
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.cuda.amp.GradScaler()
scaler2 = torch.amp.GradScaler("cuda", init_scale=1024.0)
assert scaler.is_enabled() and scaler2.is_enabled(), "GradScaler must not disable itself"
x = torch.randn(128, 16, device=device)
y = (x[:, :1] * 2 + 1)
losses = []
for _ in range(30):
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        out = model(x)
        assert out.dtype == torch.float16, out.dtype
        loss = ((out.float() - y) ** 2).mean()
    with torch.cuda.amp.autocast():
        assert torch.is_autocast_enabled("cuda")
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    losses.append(loss.item())
scale = scaler.get_scale()
assert scaler._scale.device.type == "npu", scaler._scale.device
assert scale != 1.0 and scale > 1.0, scale
assert losses[-1] < losses[0], losses
print("OK amp_scaler", losses[0], losses[-1], scale)
