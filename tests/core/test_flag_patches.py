"""Every flag patch must change what it claims: a CUDA precision switch set by user code moves the NPU switch it
maps to, both ways. A flag patch that reports itself applied but leaves the NPU switch alone (as the cuDNN one did
when torch turned its flags into ContextProp descriptors) fails here; a new flag patch without a scenario too."""
import pytest
import torch

from ascend_shim.registry import builtin_patch_sets
from ascend_shim.report import REPORT


def _set_cudnn_flags_block(on):
    """The NPU switch inside a `with torch.backends.cudnn.flags(allow_tf32=...)` block."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=on):
        return torch.npu.conv.allow_hf32


def _conv_switch():
    return torch.npu.conv.allow_hf32


def _matmul_switch():
    return torch.npu.matmul.allow_hf32


#: flag patch id -> (how user code sets its CUDA flag on/off; returns the NPU switch when read inside a block)
SCENARIOS = {
    "torch_features.torch.backends.cudnn.allow_tf32":
        (lambda on: setattr(torch.backends.cudnn, "allow_tf32", on), _conv_switch),
    "torch_features.torch.backends.cudnn.conv":
        (lambda on: setattr(torch.backends.cudnn.conv, "fp32_precision", "tf32" if on else "ieee"), _conv_switch),
    "torch_features.torch.backends.cudnn.m.set_flags": (_set_cudnn_flags_block, None),
    "torch_features.torch.backends.cuda.matmul":
        (lambda on: setattr(torch.backends.cuda.matmul, "allow_tf32", on), _matmul_switch),
    "torch_features.torch.set_float32_matmul_precision":
        (lambda on: torch.set_float32_matmul_precision("high" if on else "highest"), _matmul_switch),
}
#: patches on torch.backends that are not switches
NOT_FLAGS = {"torch_features.torch.backends.cuda.is_built", "torch_features.torch.backends.cudnn.m.is_available",
             "torch_features.torch.backends.cudnn.m.version"}


def flag_patches():
    return sorted(p.id for s in builtin_patch_sets() for p in s.patches
                  if (p.target.startswith("torch.backends") or p.target == "torch:set_float32_matmul_precision")
                  and p.id not in NOT_FLAGS)


PRECISION_SLOTS = (("cuda", "conv"), ("cuda", "rnn"), ("cuda", "all"), ("cuda", "matmul"), ("generic", "all"))


@pytest.fixture(autouse=True)
def restore_flags():
    saved = {slot: torch._C._get_fp32_precision_getter(*slot) for slot in PRECISION_SLOTS}
    saved_matmul = torch.get_float32_matmul_precision()
    saved_cudnn = torch._C._get_cudnn_allow_tf32()
    saved_npu = (torch.npu.conv.allow_hf32, torch.npu.matmul.allow_hf32)
    yield
    for slot in reversed(PRECISION_SLOTS):
        torch._C._set_fp32_precision_setter(*slot, saved[slot])
    torch._C._set_cudnn_allow_tf32(saved_cudnn)  # torch also keeps the legacy switch, checked against the others
    torch.set_float32_matmul_precision(saved_matmul)
    torch.npu.conv.allow_hf32, torch.npu.matmul.allow_hf32 = saved_npu


def test_every_flag_patch_has_a_scenario():
    assert set(flag_patches()) == set(SCENARIOS), "give each flag patch a scenario in SCENARIOS"


@pytest.mark.parametrize("patch_id", flag_patches())
def test_an_applied_flag_patch_moves_the_npu_switch_both_ways(clean_shim, patch_id):
    clean_shim.activate("sim")
    assert REPORT.patches[patch_id]["status"] == "applied", REPORT.patches[patch_id]
    set_flag, read_switch = SCENARIOS[patch_id]
    for on in (False, True, False):
        seen = set_flag(on)
        seen = read_switch() if read_switch else seen
        assert seen is on, f"{patch_id}: CUDA flag set to {on}, NPU switch still {seen}"


def test_a_cudnn_flags_block_is_undone_on_the_npu_switch_after_it(clean_shim):
    clean_shim.activate("sim")
    torch.backends.cudnn.allow_tf32 = True
    assert _set_cudnn_flags_block(False) is False
    assert torch.npu.conv.allow_hf32 is True


def test_cudnn_flags_without_an_npu_switch_are_reported_as_having_no_effect(clean_shim):
    clean_shim.activate("sim")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    assert torch.backends.cudnn.benchmark is True  # torch's own flag is still set
    fallbacks = {e["api"]: e["detail"] for e in REPORT.events() if e["category"] == "fallback"}
    assert "autotuner" in fallbacks["torch.backends.cudnn.benchmark"]
    assert "use_deterministic_algorithms" in fallbacks["torch.backends.cudnn.deterministic"]
    torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = False


def test_deactivation_gives_torch_its_flag_descriptors_back(clean_shim):
    cls = type(torch.backends.cudnn)
    before = {name: cls.__dict__[name] for name in ("allow_tf32", "fp32_precision", "benchmark", "deterministic")}
    conv = torch.backends.cudnn.conv
    clean_shim.activate("sim")
    assert cls.__dict__["allow_tf32"] is not before["allow_tf32"]
    clean_shim.deactivate()
    assert {name: cls.__dict__[name] for name in before} == before
    assert torch.backends.cudnn.conv is conv
    torch.npu.conv.allow_hf32 = True
    torch.backends.cudnn.allow_tf32 = False
    assert torch.npu.conv.allow_hf32 is True


def test_is_built_follows_availability_for_code_that_believes_in_cuda(clean_shim):
    assert torch.backends.cuda.is_built() is False  # the CPU build of torch
    clean_shim.activate("sim")
    assert torch.cuda.is_available() and torch.backends.cuda.is_built()
