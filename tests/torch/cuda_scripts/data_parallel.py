"""nn.DataParallel as pytorch/examples (imagenet, dcgan) use it: the default wraps every visible device."""
import copy

import torch
import torch.nn as nn

torch.manual_seed(0)
base = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))


def train(model, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(4):
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


assert torch.cuda.device_count() > 1
model = copy.deepcopy(base)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
gpu = train(model.cuda(), "cuda")
cpu = train(copy.deepcopy(base), "cpu")
print("losses (all devices):", gpu)
print("losses (cpu)        :", cpu)
assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(gpu, cpu, strict=True)), (gpu, cpu)
out = nn.parallel.data_parallel(copy.deepcopy(base).cuda(), x.cuda(), device_ids=[0, 1])
assert torch.allclose(out.cpu(), base(x), atol=1e-5)
print("OK data_parallel")
