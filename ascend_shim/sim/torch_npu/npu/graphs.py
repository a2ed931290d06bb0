"""NPU graph capture (aclgraph): not emulated.

The names exist so that code which only references them (``torch.cuda.CUDAGraph = torch.npu.NPUGraph``) keeps
working; using them raises :class:`NotEmulatedError`. No stream is ever capturing.
"""
import logging

from ._unemulated import module_getattr, placeholder_class, placeholder_function

__all__ = ["NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables",
           "graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end",
           "super_kernel_scope_begin", "super_kernel_scope_end", "NpuGraphOpHandler", "register_npu_graph_handler"]

_WHY = "graph capture needs the CANN graph runtime; run the captured code eagerly instead"


NPUGraph = placeholder_class("torch.npu.NPUGraph", _WHY, params="")
graph = placeholder_class("torch.npu.graph", _WHY, params="npu_graph, pool=None, stream=None, "
                                                          "auto_dispatch_capture=False, capture_error_mode='global'")
graph_pool_handle = placeholder_function("torch.npu.graph_pool_handle", _WHY, params="")
make_graphed_callables = placeholder_function("torch.npu.make_graphed_callables", _WHY,
                                              params="callables, sample_args, num_warmup_iters=3, "
                                                     "allow_unused_input=False, pool=None")


def is_current_stream_capturing() -> bool:
    return False


graph_task_group_begin = placeholder_function("torch.npu.graph_task_group_begin", _WHY, "stream")
graph_task_group_end = placeholder_function("torch.npu.graph_task_group_end", _WHY, "stream")
graph_task_update_begin = placeholder_function("torch.npu.graph_task_update_begin", _WHY, "stream, handle")
graph_task_update_end = placeholder_function("torch.npu.graph_task_update_end", _WHY, "stream")
super_kernel_scope_begin = placeholder_function("torch.npu.super_kernel_scope_begin", _WHY, "scope_name=None")
super_kernel_scope_end = placeholder_function("torch.npu.super_kernel_scope_end", _WHY, "scope_name=None")


class NpuGraphOpHandler:
    """Base class of the per-op handlers used while capturing NPU graphs (registered, never invoked here)."""


_NPU_GRAPH_OP_HANDLERS: dict[str, type] = {}


def register_npu_graph_handler(op_names):
    """Class decorator registering a handler for ops (as torch_npu; capture itself is not emulated)."""
    def decorator(cls):
        for name in (op_names if isinstance(op_names, (list, tuple)) else [op_names]):
            if name in _NPU_GRAPH_OP_HANDLERS:
                logging.getLogger(__name__).warning("NpuGraphOpHandler for '%s' is being overridden: %s -> %s",
                                                    name, _NPU_GRAPH_OP_HANDLERS[name].__name__, cls.__name__)
            _NPU_GRAPH_OP_HANDLERS[name] = cls
        return cls
    return decorator


__getattr__ = module_getattr("torch.npu.graphs")
