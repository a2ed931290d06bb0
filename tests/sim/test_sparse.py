"""Sparse COO tensors on the emulated NPU: the ops torch_npu registers for its sparse key give the CPU's results;
every other op raises torch_npu's error."""
import os

import pytest
import torch

from ascend_shim.sim import sparse

YAML = os.path.join(os.path.dirname(torch.__file__), "..", "torchgen", "packaged", "ATen", "native",
                    "native_functions.yaml")


def _coo():
    i = torch.tensor([[0, 1, 1, 2, 0], [2, 0, 2, 1, 2]])  # uncoalesced: (0, 2) twice
    return torch.sparse_coo_tensor(i, torch.tensor([3.0, 4.0, 5.0, -1.0, 0.5]), (3, 3))


def test_the_generic_list_is_torch_npus_rule():
    """torch_npu's generator registers each sparse kernel torch shares between CPU and CUDA."""
    yaml = pytest.importorskip("yaml")
    with open(YAML) as fh:
        functions = yaml.safe_load(fh)
    shared = set()
    for entry in functions:
        dispatch = {k.strip(): v for keys, v in entry.get("dispatch", {}).items() for k in keys.split(",")}
        if dispatch.get("SparseCPU") and dispatch.get("SparseCPU") == dispatch.get("SparseCUDA"):
            shared.add(entry["func"].split("(")[0])
    assert shared - set(sparse.COMPRESSED) == set(sparse.GENERIC)
    assert set(sparse.COMPRESSED) <= shared


def test_moves_to_the_npu_and_back():
    s = _coo()
    n = s.to("npu")
    assert n.device == torch.device("npu", 0) and n.layout == torch.sparse_coo and not n.is_coalesced()
    assert n._indices().device == n._values().device == n.device and n._nnz() == 5
    assert (n.sparse_dim(), n.dense_dim()) == (2, 0)
    assert torch.equal(n.to_dense().cpu(), s.to_dense())
    back = n.cpu()
    assert back.device.type == "cpu" and torch.equal(back._indices(), s._indices())
    assert torch.equal(s.to("npu:1").to_dense().to("cpu"), s.to_dense())
    d = torch.randn(4, 5)
    assert torch.equal(d.to_sparse().to("npu").to_dense().cpu(), d)
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]], device="npu")
    assert torch.equal(dense.to_sparse().to_dense().cpu(), dense.cpu())  # torch_npu's dense _to_sparse


@pytest.mark.parametrize("op", [
    lambda t: t.coalesce(), lambda t: t + t, lambda t: t * 2.5, lambda t: t * t, lambda t: t - t.coalesce(),
    lambda t: torch.sparse.sum(t, dim=1), lambda t: t.sum(), lambda t: -t, lambda t: t.abs(), lambda t: t.abs().sqrt(),
    lambda t: t.t(), lambda t: t.clone(), lambda t: t.unsqueeze(0), lambda t: torch.cat([t, t]),
    lambda t: t.coalesce().values(), lambda t: t.to_dense() + t,
])
def test_ops_give_the_cpu_results(op):
    s = _coo()
    want, got = op(s), op(s.to("npu"))
    assert got.device.type == "npu" and got.layout == want.layout and got.dtype == want.dtype
    if want.is_sparse:
        want, got = want.coalesce().to_dense(), got.coalesce().to_dense()
    assert torch.equal(got.cpu(), want)


def test_max_is_the_maximum_of_the_dense_tensor():
    n = _coo().to("npu")
    assert n.max().item() == 5.0 and (n * -1).max().item() == 1.0  # implicit zeros count, as in torch_npu's kernel


def test_in_place_ops_write_the_npu_tensor():
    s, n = _coo(), _coo().to("npu")
    n.mul_(2.0)
    n.add_(n)
    s.mul_(2.0)
    s.add_(s)
    assert torch.equal(n.to_dense().cpu(), s.to_dense())
    d = torch.ones(3, 3, device="npu")
    d.add_(n)
    assert torch.equal(d.cpu(), torch.ones(3, 3) + s.to_dense())
    n.zero_()
    assert n._nnz() == 0


def test_what_torch_npu_does_not_register_raises_its_error():
    n = _coo().to("npu")
    with pytest.raises(RuntimeError, match=r"CAUTION: The operator 'aten::addmm' is not currently supported on "
                                           r"the NPU backend\."):
        torch.mm(n, torch.ones(3, 2, device="npu"))  # sparse @ dense goes through addmm (torch_sparse patches it)
    with pytest.raises(RuntimeError, match="aten::_to_sparse_csr.*not currently supported"):
        n.to_sparse_csr()


def test_devices_are_checked_like_a_device_kernel():
    n = _coo().to("npu")
    with pytest.raises(RuntimeError, match="same device"):
        n + _coo()
