"""One rule for who believes in CUDA: user code and every library that is not NPU-native see CUDA available,
their devices compare as CUDA and ``x.type()`` reads ``torch.cuda.*``; torch and native libraries see the NPU.
The settings override it both ways."""
import importlib

import pytest
import torch

from ascend_shim import callers, rewrite
from ascend_shim.report import REPORT

LIBRARY = '''\
import torch


def on_gpu(t):
    return t.device.type == "cuda"


def available():
    return torch.cuda.is_available()


def type_name(t):
    return t.type()


def fp16_or_fp32(p):
    return p.type() in ["torch.cuda.HalfTensor", "torch.cuda.FloatTensor"]
'''


@pytest.fixture
def libraries(tree, clean_shim, monkeypatch):
    """Three installed libraries: ``{p}cudalib`` (no declaration), ``{p}nativelib`` (declared NPU-native, as a
    patch set declares transformers), ``{p}mixed`` (declared native, its ``mixed.cudapart`` named a user
    package). Activated with ``ASCEND_SHIM_NATIVE_PACKAGES`` naming ``{p}cudalib.nativepart``."""
    for name in ("cudalib", "nativelib", "mixed"):
        tree.write(tree.site, "{p}" + name + "/__init__.py", LIBRARY)
        tree.write(tree.site, "{p}" + name + "/nativepart.py" if name == "cudalib" else
                   "{p}" + name + "/cudapart.py", LIBRARY)
    added = callers.register_native(tree.p + "nativelib", tree.p + "mixed")
    monkeypatch.setenv("ASCEND_SHIM_USER_PACKAGES", tree.p + "mixed.cudapart")
    monkeypatch.setenv("ASCEND_SHIM_NATIVE_PACKAGES", tree.p + "cudalib.nativepart")
    clean_shim.activate("sim")
    yield lambda name: importlib.import_module(tree.p + name)
    callers.unregister_native(*added)


def _sees_cuda(lib):
    x = torch.ones(2, device="npu")
    answers = (lib.on_gpu(x), lib.available(), lib.type_name(x) == "torch.cuda.FloatTensor",
               lib.fp16_or_fp32(x), lib.fp16_or_fp32(x.half()))
    assert len(set(answers)) == 1, answers  # one rule: all CUDA, or all the real device
    return answers[0]


def test_one_rule_for_comparisons_availability_and_type_strings(libraries):
    assert _sees_cuda(libraries("cudalib")) is True                # a CUDA-first library (Lightning's case)
    assert _sees_cuda(libraries("nativelib")) is False             # declared NPU-native
    assert _sees_cuda(libraries("cudalib.nativepart")) is False    # ASCEND_SHIM_NATIVE_PACKAGES
    assert _sees_cuda(libraries("mixed")) is False
    assert _sees_cuda(libraries("mixed.cudapart")) is True         # ASCEND_SHIM_USER_PACKAGES, most specific
    x = torch.ones(2, device="npu")
    assert x.type() == "torch.cuda.FloatTensor"                    # this test module is user code
    assert torch.typename(x) == "torch.npu.FloatTensor"            # torch asks for itself
    assert x.type("torch.cuda.HalfTensor").dtype == torch.float16  # the conversion direction is unchanged
    assert any(e["api"] == "Tensor.type" and e["detail"] == "type='torch.npu.FloatTensor' -> 'torch.cuda.FloatTensor'"
               for e in REPORT.events())


def test_the_overrides_are_undone_with_the_activation(libraries, clean_shim, tree):
    assert not callers.is_native_module(tree.p + "mixed.cudapart")
    clean_shim.deactivate()
    assert callers.is_native_module(tree.p + "mixed.cudapart")
    assert not callers.is_native_module(tree.p + "cudalib.nativepart")


def test_torch_and_torch_npu_cannot_be_made_cuda_code():
    undo = callers.set_overrides(user=["torch", "torch_npu"], native=["shimtest_lib"])
    try:
        assert callers.is_native_module("torch.nn") and callers.is_native_module("torch_npu.npu")
        assert callers.is_native_module("shimtest_lib.x") and "shimtest_lib" in callers.native_packages()
    finally:
        undo()
    assert not callers.is_native_module("shimtest_lib.x")


def test_a_user_package_naming_torch_is_refused_by_the_rewrite(tree):
    from ascend_shim.errors import ConfigError

    with pytest.raises(ConfigError):
        rewrite.install([], packages=["torch.cuda"])

