"""CUDA idioms real code trips on, each a small unmodified CUDA script under `ascend-shim run --simulate`: the
script asserts the CUDA semantics itself (numbers against a CPU or one-device run where there are numbers)."""
from .test_cuda_scripts import run_script


def test_precision_flags_and_the_is_built_gate(tmp_path):
    report, _ = run_script("precision_flags.py", tmp_path)
    details = {(e["api"], e["detail"]) for e in report["events"]}
    assert ("torch.backends.cudnn.allow_tf32", "torch.npu.conv.allow_hf32 = False") in details
    assert ("torch.backends.cudnn.flags", "torch.npu.conv.allow_hf32 = False") in details
