"""``torch_npu._C`` of the builtin layer: the runtime bindings the facade itself rests on.

torch_npu's Python and programs that reach below it (the inductor's ``_empty_strided_npu`` allocation path, the
raw device count, the stream triples) call these; they are the same functions the real layer's stand-in
provides (:data:`ascend_shim.sim.runtime.NATIVE`). The rest of torch_npu's native layer is absent here:
an unknown name raises AttributeError, as on a build without it.
"""
from ascend_shim.sim import runtime as _runtime

globals().update(_runtime.NATIVE)


def __getattr__(name: str):
    raise AttributeError(f"module 'torch_npu._C' has no attribute '{name}' (the builtin layer provides the device "
                         f"runtime's bindings only)")
