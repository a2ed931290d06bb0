"""Patch sets used by the scan tests (through ASCEND_SHIM_PATCH_MODULES=tests.scan.fake_patches).

They declare coverage only; their factories are never run. Ids start with ``scantest`` so the tests can
select exactly these sets with ASCEND_SHIM_ONLY, whatever the built-in patch sets are.
"""
from ascend_shim.registry import Patch, PatchSet


def _factory(ctx):  # pragma: no cover - scan never applies patches
    return None


def patch(set_, target, fidelity="exact", covers=(), kind="wrap", id=None):
    return set_.add(Patch(id=id or f"{set_.id}.{target}", target=target, kind=kind, why="test", what="test",
                          remove_when="never: a test", factory=_factory, fidelity=fidelity, covers=tuple(covers)))


def build() -> list[PatchSet]:
    main = PatchSet(id="scantest", title="scan test coverage")
    patch(main, "torch.cuda:synchronize", covers=("torch.cuda.synchronize",), id="scantest.sync")
    patch(main, "torch.cuda:memory_allocated", id="scantest.memory_allocated")          # target only, no covers
    patch(main, "torch.cuda:get_device_capability", fidelity="neutral", kind="replace", id="scantest.capability")
    patch(main, "torch:compile", fidelity="fallback", covers=("torch.compile",), id="scantest.compile")
    patch(main, "torch:_scaled_mm", fidelity="unsupported", covers=("fp8",), kind="replace", id="scantest.fp8")
    patch(main, "env:CUDA_VISIBLE_DEVICES", kind="env", id="scantest.cvd")               # env target = symbol
    patch(main, "env:NCCL_TIMEOUT", kind="env", covers=("env:NCCL_*",), id="scantest.nccl_env")  # a glob
    patch(main, "flash_attn", kind="provide-module", fidelity="fallback", id="scantest.flash_attn")
    patch(main, "flash_attn:flash_attn_with_kvcache", fidelity="unsupported", kind="add",
          covers=("flash_attn.flash_attn_with_kvcache",), id="scantest.kvcache")        # exact beats the module
    patch(main, "torch.cuda:nvtx", fidelity="neutral", kind="replace", id="scantest.nvtx")   # parent key
    patch(main, "torch:Tensor.cuda", kind="replace", covers=("Tensor.cuda",), id="scantest.tensor_cuda")
    patch(main, "torch:device", kind="replace", covers=("device-string:cuda",), id="scantest.device")
    patch(main, "torch.distributed:init_process_group", covers=("nccl",), id="scantest.init_pg")
    patch(main, "torch.cuda:CUDAGraph", kind="replace", fidelity="unsupported", covers=("cuda-graph",),
          id="scantest.graphs")
    patch(main, "torch.cuda:graph", kind="replace", id="scantest.graph_ctx")  # exact beats the family
    # overrides known-unsupported
    patch(main, "pynvml", kind="provide-module", fidelity="neutral", id="scantest.pynvml")
    # two patches on one key: the best fidelity decides
    patch(main, "torch.cuda:empty_cache", fidelity="unsupported", kind="replace", id="scantest.empty_cache_a")
    patch(main, "torch.cuda:empty_cache", fidelity="exact", kind="wrap", id="scantest.empty_cache_b")
    sim_only = PatchSet(id="scantest_simonly", title="only under the emulator", backends=("sim",))
    patch(sim_only, "triton:jit", kind="replace", covers=("triton.jit",), id="scantest_simonly.jit")
    off = PatchSet(id="scantest_off", title="off by default", default_enabled=False)
    patch(off, "torch.backends.cudnn:benchmark", kind="replace", id="scantest_off.cudnn")
    return [main, sim_only, off]


PATCH_SETS = build()
