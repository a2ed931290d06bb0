"""``scan`` explains the rule for who believes in CUDA: the libraries the code imports, as a run treats them,
from the built-in patch sets' declarations and the settings; CUDA tensor type comparisons are findings."""
import json

from ascend_shim import scan
from ascend_shim.config import Config
from ascend_shim.scan import output

TRAIN = '''\
import os
import torch
import lightning as L
from megatron.core import parallel_state
from transformers import AutoModel
from mypkg.model import Net
from . import sibling


def fp16_or_fp32(p):
    return p.type() in ["torch.cuda.HalfTensor", "torch.cuda.FloatTensor"]
'''


def _repo(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "model.py").write_text("Net = object\n")
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_the_imported_libraries_are_named_as_a_run_treats_them(tmp_path):
    result = scan.scan_paths([str(_repo(tmp_path))], config=Config())
    assert result.rule == {"cuda_code": ["lightning", "megatron"], "native": ["torch", "transformers"]}
    text = output.to_text(result, result.findings)
    assert "imported, treated as CUDA code: lightning, megatron" in text
    assert "imported, NPU-native: torch, transformers" in text and "ASCEND_SHIM_NATIVE_PACKAGES" in text
    data = json.loads(output.to_json(result, result.findings))
    assert data["rule"]["cuda_code"] == ["lightning", "megatron"] and "not NPU-native" in data["rule"]["text"]


def test_the_settings_override_it_both_ways(tmp_path):
    config = Config(user_packages=("transformers",), native_packages=("megatron",))
    result = scan.scan_paths([str(_repo(tmp_path))], config=config)
    assert result.rule == {"cuda_code": ["lightning", "transformers"], "native": ["megatron", "torch"]}


def test_a_native_declaration_switched_off_makes_the_library_cuda_code(tmp_path):
    result = scan.scan_paths([str(_repo(tmp_path))], config=Config(disable=("hf_transformers.native",)))
    assert "transformers" in result.rule["cuda_code"]


def test_a_cuda_tensor_type_comparison_is_a_covered_finding(tmp_path):
    result = scan.scan_paths([str(_repo(tmp_path))], config=Config())
    hits = [f for f in result.findings if f.symbol == "device-compare:tensor-type"]
    assert [(f.path, f.line, f.verdict, f.patches) for f in hits] == [
        ("train.py", 11, "covered", ("torch_cuda.torch.Tensor.type",))]
