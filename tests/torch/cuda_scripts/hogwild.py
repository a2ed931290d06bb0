"""Hogwild training as pytorch/examples mnist_hogwild writes it: the model on the GPU, share_memory(), workers
started with the spawn method train the shared parameters in place. Workers run one after the other here so the
result is deterministic; it must equal the same steps on the CPU."""
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def make_data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)


def train(rank, model, device, steps):
    x, y = make_data(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()


def worker(rank, model, results):
    device = next(model.parameters()).device
    assert device.type == "cuda" or device.type == "npu", device
    train(rank, model, device, steps=3)
    results.put((rank, str(device)))


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    model.load_state_dict(reference.state_dict())
    model = model.cuda()
    model.share_memory()
    results = mp.Queue()
    for rank in range(2):
        p = mp.Process(target=worker, args=(rank, model, results))
        p.start()
        print("worker", results.get(timeout=300))
        p.join()
        assert p.exitcode == 0, p.exitcode
        train(rank, reference, "cpu", steps=3)
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values(), strict=True):
        assert torch.equal(got.cpu(), want), (name, (got.cpu() - want).abs().max())
    print("parameters equal to the CPU run:", [round(v, 6) for v in model[0].weight.detach().cpu()[0].tolist()])
    print("OK hogwild")
