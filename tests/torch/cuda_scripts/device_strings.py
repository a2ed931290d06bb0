"""CUDA device idioms in the styles real projects use; asserts everything really lands on the NPU."""
import torch
import torch.nn as nn

assert torch.cuda.is_available(), "user code must see CUDA available"
assert torch.cuda.device_count() >= 2
dev = torch.device("cuda", 1)
assert dev.type == "npu" and dev.index == 1, dev

a = torch.zeros(4, device="cuda")
b = torch.ones(4, device="cuda:1")
c = torch.randn(4, 4).cuda()
d = torch.arange(3).to("cuda")
e = torch.empty(2, device=dev)
f = c.new_zeros(2, device="cuda:1")
g = torch.tensor([1.0, 2.0], device=torch.device("cuda:0"))
h = torch.full((2,), 3.0, device=0)
i = torch.randn(2).to(1)
j = torch.zeros_like(a, device="cuda:1")
for name, t in dict(a=a, b=b, c=c, d=d, e=e, f=f, g=g, h=h, i=i, j=j).items():
    assert t.device.type == "npu", (name, t.device)
assert (b.device.index, e.device.index, f.device.index, i.device.index) == (1, 1, 1, 1)
assert c.is_cuda, "user code sees npu tensors as CUDA tensors"

with torch.device("cuda"):
    inside = torch.ones(3)
assert inside.device.type == "npu", inside.device

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
assert next(model.parameters()).device.type == "npu"
model.to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 8, device="cuda")
y = x.sum(dim=1, keepdim=True)
losses = []
for _ in range(40):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0] * 0.5, losses
torch.cuda.synchronize()
print("OK device_strings", losses[0], losses[-1])
