"""Sparse COO times dense on the NPU (``torch.sparse.mm``, ``torch.spmm``, ``torch.mm``/``@`` with a sparse operand).

torch_npu registers for sparse NPU tensors the kernels torch shares between CPU and CUDA, and those reach every
sparse-dense product through ``addmm``, for which it has no sparse kernel: ``torch.spmm(adj, x)`` on the NPU (a GCN
layer) stops with "The operator 'aten::addmm' is not currently supported on the NPU backend". The product is a
gather, a scale and an index-add over the nonzeros, all dense NPU ops: this set registers that as the NPU's sparse
``addmm`` (reported), with torch's autograd formula of ``addmm`` around it.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


sparse_set = PatchSet(
    id="torch_sparse", title="sparse COO @ dense on the NPU, by dense ops",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)


sparse_set.patch("torch.sparse:mm", kind="call", id="torch_sparse.addmm", fidelity="fallback",
                 why="torch_npu has no sparse addmm kernel, and every sparse COO @ dense product reaches it "
                     "(torch.spmm, torch.sparse.mm, torch.mm/@ with a sparse operand, mv, and their backward): "
                     "GCN layers stop on the NPU with 'aten::addmm is not currently supported'.",
                 what="registers the NPU's sparse addmm as a gather, a scale and an index_add over the nonzeros "
                      "(dense NPU ops; torch's addmm autograd formula around it), reported per call site. Not applied "
                      "where the backend registers a sparse addmm itself.",
                 remove_when="https://github.com/Ascend/op-plugin/blob/517f2e7d0f202f38b76310706cb977ca2388ad21/"
                             "op_plugin/config/op_plugin_functions.yaml: torch_npu registers no sparse COO addmm "
                             "kernel for the NPU",
                 factory="register_sparse_addmm")


PATCH_SETS = [sparse_set]
