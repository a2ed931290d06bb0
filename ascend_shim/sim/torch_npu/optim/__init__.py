"""``torch_npu.optim``: the fused optimizers, implemented by :mod:`ascend_shim.sim.ops.optim` when present."""
try:
    from ascend_shim.sim.ops.optim import NpuFusedAdamW  # noqa: F401
except ModuleNotFoundError as _exc:
    if _exc.name not in ("ascend_shim.sim.ops", "ascend_shim.sim.ops.optim"):
        raise
