"""A GCN layer as CUDA code writes it (pygcn, pytorch/examples gcn): sparse COO features and adjacency moved to the
GPU, torch.spmm / torch.mm with a sparse operand, trained against the same run on the CPU."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
N, F_IN, HIDDEN, CLASSES = 60, 24, 8, 3
edges = torch.randint(0, N, (2, 240))
adj = (torch.sparse_coo_tensor(edges, torch.rand(240), (N, N)) + torch.eye(N).to_sparse()).coalesce()
features = (torch.rand(N, F_IN) > 0.8).float().to_sparse()
labels = torch.randint(0, CLASSES, (N,))
W1, W2 = torch.randn(F_IN, HIDDEN) * 0.1, torch.randn(HIDDEN, CLASSES) * 0.1


def train(device):
    w1, w2 = (w.clone().to(device).requires_grad_() for w in (W1, W2))
    a, x, y = adj.to(device), features.to(device), labels.to(device)
    assert a.is_sparse and a.device.type == torch.device(device).type
    opt = torch.optim.Adam([w1, w2], lr=0.05)
    losses = []
    for _ in range(6):
        hidden = F.relu(torch.spmm(a, torch.mm(x, w1)))
        out = torch.sparse.mm(a, hidden @ w2)
        loss = F.nll_loss(F.log_softmax(out, 1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


gpu, cpu = train("cuda"), train("cpu")
print("losses (gpu):", gpu)
print("losses (cpu):", cpu)
assert all(abs(g - c) <= 1e-6 * abs(c) for g, c in zip(gpu, cpu, strict=True)), (gpu, cpu)
assert torch.equal(adj.cuda().to_dense().cpu(), adj.to_dense())
print("OK sparse_gcn")
