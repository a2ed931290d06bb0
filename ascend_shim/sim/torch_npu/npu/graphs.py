"""NPU graph capture (aclgraph): not emulated.

The names exist so that code which only references them (``torch.cuda.CUDAGraph = torch.npu.NPUGraph``) keeps
working; using them raises :class:`NotEmulatedError`. No stream is ever capturing.
"""
from ._unemulated import SUBMODULE_NAMES, module_getattr, not_emulated

__all__ = ["NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"]

_WHY = "graph capture needs the CANN graph runtime; run the captured code eagerly instead"


class NPUGraph:
    def __init__(self, *args, **kwargs):
        raise not_emulated("NPUGraph", _WHY)


class graph:
    def __init__(self, *args, **kwargs):
        raise not_emulated("torch.npu.graph", _WHY)


def graph_pool_handle():
    raise not_emulated("torch.npu.graph_pool_handle", _WHY)


def make_graphed_callables(*args, **kwargs):
    raise not_emulated("torch.npu.make_graphed_callables", _WHY)


def is_current_stream_capturing() -> bool:
    return False


__getattr__ = module_getattr("torch.npu.graphs", SUBMODULE_NAMES["graphs"])
