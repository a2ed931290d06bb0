"""torch_sparse: sparse COO @ dense on the NPU by dense NPU ops (torch_npu has no sparse addmm)."""
import pytest
import torch

from ascend_shim.report import REPORT


def _operands():
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, 40, (2, 300), generator=g)
    adj = torch.sparse_coo_tensor(edges, torch.randn(300, generator=g), (40, 40))  # uncoalesced
    return adj, torch.randn(40, 16, generator=g), torch.randn(40, 16, generator=g)


def test_sparse_dense_products_match_the_cpu(clean_shim):
    adj, x, t = _operands()
    clean_shim.activate("sim")
    a, xn, tn = adj.to("npu"), x.to("npu").requires_grad_(), t.to("npu")
    cases = [(torch.spmm(a, xn), torch.spmm(adj, x)), (torch.sparse.mm(a, xn), torch.sparse.mm(adj, x)),
             (a @ xn, adj @ x), (torch.mv(a, xn[:, 0]), torch.mv(adj, x[:, 0])),
             (torch.sparse.addmm(tn, a, xn, beta=0.5, alpha=2.0), torch.sparse.addmm(t, adj, x, beta=0.5, alpha=2.0))]
    for got, want in cases:
        assert got.device.type == "npu" and torch.allclose(got.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    torch.spmm(a, xn).sum().backward()
    xc = x.clone().requires_grad_()
    torch.spmm(adj, xc).sum().backward()
    assert torch.equal(xn.grad.cpu(), xc.grad)
    assert any(e["api"] == "sparse @ dense (aten::addmm)" and e["file"].endswith("test_sparse_patch.py")
               for e in REPORT.events())


def test_what_the_npu_does_without_it(clean_shim):
    adj, x, _ = _operands()
    clean_shim.activate("sim", disable=["torch_sparse"])
    with pytest.raises(RuntimeError, match="CAUTION: The operator 'aten::addmm' is not currently supported"):
        torch.spmm(adj.to("npu"), x.to("npu"))


def test_deactivation_removes_the_kernel(clean_shim):
    clean_shim.activate("sim")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::addmm", "SparsePrivateUse1")
    clean_shim.deactivate()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::addmm", "SparsePrivateUse1")


def test_layouts_other_than_coo_times_dense_keep_the_npu_error(clean_shim):
    adj, x, _ = _operands()
    clean_shim.activate("sim")
    with pytest.raises(RuntimeError, match="not currently supported"):
        torch.mm(adj.to("npu"), adj.to("npu"))  # sparse @ sparse
