"""Sparse COO times dense on the NPU: ``addmm`` for a sparse ``mat1`` as a gather, a scale and an index-add over
the nonzeros (dense NPU ops), registered as the NPU's sparse ``addmm``; torch's autograd formula of ``addmm`` stays
around it."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report

#: the dispatch key of sparse tensors on the PrivateUse1 backend (the NPU)
KEY = "SparsePrivateUse1"


def sparse_dense_addmm(report: Report) -> Callable:
    """``beta * self + alpha * (mat1 @ mat2)`` for a sparse COO ``mat1`` (2 sparse dims) and a dense ``mat2``, done
    as CPU's kernel does it: the output starts as ``beta * self``, then for each stored nonzero, in storage order,
    the row of ``mat2`` it picks, times ``alpha * value``, is added into its output row."""

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        import torch

        if not mat1.is_sparse or mat2.is_sparse or mat1.sparse_dim() != 2 or mat1.dense_dim() != 0:
            raise RuntimeError("CAUTION: The operator 'aten::addmm' is not currently supported on the NPU backend "
                               "for these layouts (a sparse COO matrix times a dense one is).")
        if mat1.dtype != mat2.dtype:
            raise RuntimeError(f"addmm: expected mat1 and mat2 to have the same dtype, but got: {mat1.dtype} != "
                               f"{mat2.dtype}")
        if mat1.shape[1] != mat2.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                               f"{mat2.shape[0]}x{mat2.shape[1]})")
        in_backward = torch._C._current_graph_task_id() != -1  # the autograd engine's thread: no user frame
        report.event("fallback", "sparse @ dense (aten::addmm)", "gather, scale, index_add on the NPU",
                     site=("<autograd backward>", 0) if in_backward else None)
        shape = (mat1.shape[0], mat2.shape[1])
        if beta == 0:
            out = torch.zeros(shape, dtype=mat2.dtype, device=mat2.device)
        else:
            out = self.expand(shape) * beta if beta != 1 else self.expand(shape).clone()
        rows, cols = mat1._indices()
        values = mat1._values() * alpha if alpha != 1 else mat1._values()
        return out.index_add_(0, rows, values.unsqueeze(1) * mat2.index_select(0, cols))

    return addmm


def register_sparse_addmm(ctx: PatchContext) -> Callable[[], None]:
    """Register :func:`sparse_dense_addmm` as the NPU's sparse addmm unless the backend has one; returns the undo."""
    import torch

    from ascend_shim.errors import NotNeeded

    if torch._C._get_privateuse1_backend_name() != "npu":
        raise NotNeeded("no NPU backend in this process")
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::addmm", KEY):
        raise NotNeeded("the NPU backend registers a sparse addmm")
    library = torch.library.Library("aten", "IMPL")
    library.impl("addmm", sparse_dense_addmm(ctx.report), KEY)
    return library._destroy
