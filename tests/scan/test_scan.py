"""``scan``: every category found at its exact line, verdicts from declared patch metadata, outputs, exit codes.

The tests declare their own patch sets (tests/scan/fake_patches.py); they never depend on the built-in ones.
"""
import csv
import io
import json
import os
import shutil

import pytest

from ascend_shim import scan
from ascend_shim.config import Config
from ascend_shim.scan import symbols
from ascend_shim.scan.coverage import CoverageIndex
from ascend_shim.scan.visitor import scan_source

from . import fake_patches

FIXTURE = os.path.join(os.path.dirname(__file__), "fixture_repo")
TEST_SETS = "scantest,scantest_simonly"  # ONLY would switch on the off-by-default set too

# (path, line, col, category, symbol, verdict under fake_patches with the default configuration)
EXPECTED = [
    ("pkg/attention.py", 2, 8, "triton", "triton", "not covered"),
    ("pkg/attention.py", 3, 8, "triton", "triton.language", "not covered"),
    ("pkg/attention.py", 4, 24, "flash-attn", "flash_attn.flash_attn_varlen_func", "fallback"),   # provided module
    ("pkg/attention.py", 4, 48, "flash-attn", "flash_attn.flash_attn_with_kvcache", "unsupported"),  # exact wins
    ("pkg/attention.py", 5, 37, "flash-attn", "flash_attn.bert_padding.pad_input", "fallback"),
    ("pkg/attention.py", 8, 12, "flash-attn", "flash_attn_interface", "unsupported"),   # known-unsupported FA3
    ("pkg/attention.py", 12, 21, "flash-attn", "kernels.get_kernel", "not covered"),
    ("pkg/attention.py", 17, 2, "triton", "triton.jit", "not covered"),     # the sim-only set does not count
    ("tools/monitor.py", 4, 8, "nvml", "pynvml", "neutral"),                 # a patch overrides known-unsupported
    ("tools/monitor.py", 5, 29, "cuda-ext", "apex.optimizers.FusedAdam", "not covered"),
    ("tools/monitor.py", 7, 1, "nvml", "pynvml.nvmlInit", "neutral"),
    ("tools/monitor.py", 8, 11, "env", "env:NCCL_DEBUG", "covered"),        # glob env:NCCL_*
    # line 9, an f-string launch command naming CUDA_VISIBLE_DEVICES, is command text: no environment read here
    ("tools/monitor.py", 10, 31, "env", "env:PYTORCH_CUDA_ALLOC_CONF", "not covered"),
    ("train.py", 6, 8, "torch.cuda", "torch.cuda", "not covered"),
    ("train.py", 8, 24, "torch.cuda", "torch.cuda.memory_allocated", "covered"),   # from the target alone
    ("train.py", 10, 12, "env", "env:CUDA_VISIBLE_DEVICES", "covered"),
    ("train.py", 12, 23, "device-string", "device-string:cuda", "covered"),         # torch.device("cuda", i)
    ("train.py", 13, 9, "device-string", "device-string:cuda", "covered"),          # f"cuda:{rank}"
    ("train.py", 14, 33, "nccl", "nccl", "covered"),
    ("train.py", 15, 8, "nccl", "torch.distributed.is_nccl_available", "covered"),   # general key "nccl"
    ("train.py", 17, 9, "device-string", "method:cuda", "covered"),                 # via "Tensor.cuda"
    ("train.py", 18, 23, "device-string", "device-string:cuda", "covered"),         # .to("cuda:0")
    ("train.py", 19, 4, "device-compare", "device-compare:cuda", "not covered"),    # x.device.type == "cuda"
    ("train.py", 20, 5, "torch.cuda", "torch.cuda.synchronize", "covered"),
    ("train.py", 21, 4, "device-compare", "device-compare:cuda", "not covered"),    # .startswith("cuda")
    ("train.py", 21, 38, "device-compare", "device-compare:cuda", "not covered"),   # "cuda" in str(device)
    ("train.py", 22, 5, "torch.cuda", "torch.cuda.empty_cache", "covered"),        # import alias tc; best fidelity
    ("train.py", 23, 4, "device-compare", "device-compare:nccl", "not covered"),
    ("train.py", 25, 4, "device-compare", "device-compare:is_cuda", "not covered"),
    ("train.py", 26, 31, "torch.cuda", "torch.cuda.get_device_capability", "neutral"),
    ("train.py", 27, 1, "cuda-backends", "torch.backends.cudnn.benchmark", "not covered"),  # its set is off
    ("train.py", 28, 12, "torch.compile", "torch.compile", "fallback"),
    ("train.py", 29, 11, "fp8", "torch.float8_e4m3fn", "unsupported"),
    ("train.py", 30, 5, "fp8", "torch._scaled_mm", "unsupported"),
    ("train.py", 31, 5, "cuda-graph", "torch.cuda.CUDAGraph", "unsupported"),
    ("train.py", 32, 6, "cuda-graph", "torch.cuda.graph", "covered"),              # exact beats the family
    ("train.py", 34, 8, "cuda-graph", "torch.cuda.make_graphed_callables", "unsupported"),  # family "cuda-graph"
    ("train.py", 35, 1, "torch.cuda", "torch.cuda.nvtx.range_push", "neutral"),     # parent torch.cuda.nvtx
    ("train.py", 36, 10, "device-string", "torch.amp.GradScaler", "covered"),       # implicit "cuda" default
    ("train.py", 37, 23, "nccl", "torch.distributed.ReduceOp.AVG", "not covered"),
    ("train.py", 38, 17, "nvml", "program:nvidia-smi", "unsupported"),
    ("train.py", 39, 6, "data-parallel", "torch.nn.DataParallel", "unsupported"),   # known-unsupported
]


def _rows(result):
    return [(f.path.replace(os.sep, "/"), f.line, f.col, f.category, f.symbol, f.verdict) for f in result.findings]


@pytest.fixture(scope="module")
def result():
    return scan.scan_paths([FIXTURE], patch_sets=fake_patches.build())


def test_fixture_findings_exact(result):
    assert _rows(result) == EXPECTED
    assert result.errors == []
    assert result.files_scanned == 4


def test_every_category_is_exercised(result):
    assert {f.category for f in result.findings} == set(symbols.CATEGORIES)


def test_verdicts_without_patches_are_known_unsupported_or_not_covered():
    res = scan.scan_paths([FIXTURE], patch_sets=[])
    verdicts = {(f.path.replace(os.sep, "/"), f.line, f.col): f.verdict for f in res.findings}
    unsupported = {k for k, v in verdicts.items() if v == "unsupported"}
    assert unsupported == {("pkg/attention.py", 8, 12), ("tools/monitor.py", 4, 8), ("tools/monitor.py", 7, 1),
                           ("train.py", 29, 11), ("train.py", 30, 5), ("train.py", 38, 17), ("train.py", 39, 6)}
    assert set(verdicts.values()) == {"unsupported", "not covered"}
    assert res.patch_sets == []


def test_configuration_selects_the_patches_that_count():
    sets = fake_patches.build()
    off = scan.scan_paths([FIXTURE], patch_sets=sets, config=Config(disable=("scantest.sync",),
                                                                     enable=("scantest_off",)))
    by_symbol = {f.symbol: f for f in off.findings}
    assert by_symbol["torch.cuda.synchronize"].verdict == "not covered"       # disabled patch
    assert by_symbol["torch.backends.cudnn.benchmark"].verdict == "covered"   # off-by-default set turned on
    assert by_symbol["torch.backends.cudnn.benchmark"].patches == ("scantest_off.cudnn",)
    sim = scan.scan_paths([FIXTURE], patch_sets=sets, backend="sim")
    assert {f.symbol: f.verdict for f in sim.findings}["triton.jit"] == "covered"   # the sim-only set counts


def test_deciding_patches_and_keys_are_reported(result):
    f = {x.symbol: x for x in result.findings}
    assert f["torch.cuda.empty_cache"].patches == ("scantest.empty_cache_b",)
    assert f["flash_attn.flash_attn_varlen_func"].patches == ("scantest.flash_attn",)
    assert f["method:cuda"].keys == ("method:cuda", "Tensor.cuda", "Module.cuda")
    assert f["torch.float8_e4m3fn"].keys == ("torch.float8_e4m3fn", "fp8")
    assert "Hopper" in f["flash_attn_interface"].reason


def test_skipped_dirs_and_unparsable_files(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    for d in (".git", "venv", "build", "lib/python3.11/site-packages", "__pycache__"):
        (repo / d).mkdir(parents=True, exist_ok=True)
        (repo / d / "hidden.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (repo / "broken.py").write_text("def f(:\n    torch.cuda.synchronize()\n")
    (repo / "binary.py").write_bytes(b"x = 1\x00\n")
    res = scan.scan_paths([str(repo)], patch_sets=[])
    assert res.files_scanned == 6
    assert len(res.findings) == len(EXPECTED)
    assert not any("hidden" in f.path for f in res.findings)
    errors = dict(res.errors)
    assert set(errors) == {"broken.py", "binary.py"}
    assert errors["broken.py"].startswith("SyntaxError") and "line 1" in errors["broken.py"]


@pytest.mark.parametrize("source, expected", [
    # aliases: from-import of the module, nested attribute chains, local names that shadow nothing
    ("from torch import cuda\ncuda.set_device(0)\n", [(1, "torch.cuda"), (2, "torch.cuda.set_device")]),
    ("import torch\ntorch.cuda.amp.autocast()\n", [(2, "torch.cuda.amp.autocast")]),
    ("import torch\nn = torch.cuda.get_device_properties(0).total_memory\n",
     [(2, "torch.cuda.get_device_properties")]),
    ("import torch as T\nT.cuda.is_available()\n", [(2, "torch.cuda.is_available")]),
    # device strings only when the whole literal is a device; comparisons are not double counted
    ('msg = "cuda is great"\nd = "cuda:1"\n', [(2, "device-string:cuda")]),
    ('ok = dev in ("cuda", "npu")\n', [(1, "device-compare:cuda")]),
    ('import torch\nsame = torch.device("cuda") == t.device\n', [(2, "device-compare:cuda")]),
    ('s = f"cuda: {x} failed"\n', []),
    # backend specs; env names only where the program reads or sets them, never in messages or command text
    ('be = "cpu:gloo,cuda:nccl"\n', [(1, "nccl")]),
    ('cmd = "NCCL_DEBUG=INFO CUDA_LAUNCH_BLOCKING=1 python x.py"\nprint("CUDA_BASIC_OK")\n', []),
    ('import os\nv = os.getenv("NCCL_DEBUG")\nw = "CUDA_HOME" in os.environ\nos.environ.pop("CUDNN_LOGINFO_DBG")\n',
     [(2, "env:NCCL_DEBUG"), (3, "env:CUDA_HOME"), (4, "env:CUDNN_LOGINFO_DBG")]),
    ('import os, subprocess\nsubprocess.run(["x"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})\n',
     [(2, "env:CUDA_VISIBLE_DEVICES")]),
    ('import os\nos.popen("nvidia-smi --query-gpu=name")\n', [(2, "program:nvidia-smi")]),
    ('import os\nos.environ["PYTORCH_ALLOC_CONF"] = "x"\nv = "PYTORCH_ALLOC_CONF=y python t.py"\n',
     [(2, "env:PYTORCH_ALLOC_CONF")]),
    # triton.language is reported where imported, not at each use
    ("from triton.language import core\nimport triton.language as tl\ntl.load(p)\n",
     [(1, "triton.language"), (2, "triton.language")]),
    # GradScaler with an explicit device is not a finding
    ('import torch\ntorch.amp.GradScaler("npu")\n', []),
    ("import torch\ntorch.version.cuda\n", [(2, "torch.version.cuda")]),
    ("from torch.utils.cpp_extension import CUDAExtension\n", [(1, "torch.utils.cpp_extension.CUDAExtension")]),
    ("import deepspeed\nfrom deepspeed.ops.adam import FusedAdam\ndeepspeed.initialize()\n",
     [(2, "deepspeed.ops.adam.FusedAdam")]),
    ("import bitsandbytes as bnb\nopt = bnb.optim.AdamW8bit\n",
     [(1, "bitsandbytes"), (2, "bitsandbytes.optim.AdamW8bit")]),
    ("def f():\n    '''os.environ['CUDA_VISIBLE_DEVICES'] = 'cuda'  -- docstrings are prose'''\n", []),
])
def test_visitor_cases(source, expected):
    got = [(f.line, f.symbol) for f in scan_source(source)]
    assert got == expected


def test_symbol_for_and_target_symbol():
    assert symbols.symbol_for("api", "torch.cuda:memory_allocated") == "torch.cuda.memory_allocated"
    assert symbols.symbol_for("device-string", "cuda:3") == symbols.DEVICE_STRING_CUDA == "device-string:cuda"
    assert symbols.symbol_for("device-compare", "nccl") == "device-compare:nccl"
    assert symbols.symbol_for("env", "CUDA_VISIBLE_DEVICES") == "env:CUDA_VISIBLE_DEVICES"
    assert symbols.symbol_for("family", "fp8") == "fp8"
    assert symbols.symbol_for("method", "cuda") == symbols.METHOD_CUDA
    assert symbols.target_symbol("env:NCCL_DEBUG") == "env:NCCL_DEBUG"
    assert symbols.target_symbol("flash_attn") == "flash_attn"
    for bad in (("device-string", "npu"), ("family", "gpu"), ("nope", "x"), ("env", "A B")):
        with pytest.raises(ValueError):
            symbols.symbol_for(*bad)


def test_coverage_index_rules():
    from ascend_shim.registry import Patch

    def p(id, target, fidelity="exact", covers=(), kind="wrap"):
        return Patch(id=id, target=target, kind=kind, why="w", what="w", remove_when="never: w", factory=lambda c: None,
                     fidelity=fidelity, covers=covers)

    idx = CoverageIndex([p("glob", "torch.cuda:x", "fallback", covers=("torch.cuda.*",)),
                         p("exact", "torch.cuda:y", "unsupported")])
    assert idx.verdict(["torch.cuda.y"]).verdict == "unsupported"          # exact beats a glob on the same key
    assert idx.verdict(["torch.cuda.z"]).verdict == "fallback"
    v = idx.verdict(["torch.float8_e5m2", "fp8"])
    assert (v.verdict, v.patches) == ("unsupported", ())                    # nothing covers it: known-unsupported
    assert idx.verdict(["triton.jit"]).verdict == "not covered"


# -- the command line -------------------------------------------------------------------------------------------
@pytest.fixture
def cli_env(monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_PATCH_MODULES", "tests.scan.fake_patches")
    monkeypatch.setenv("ASCEND_SHIM_ONLY", TEST_SETS)   # the built-in sets, whatever they are, do not count


def test_cli_json(cli_env, capsys):
    assert scan.main([FIXTURE, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"root", "files_scanned", "patch_sets", "findings", "errors", "summary", "unsupported"}
    assert data["patch_sets"] == ["scantest"]
    rows = [(f["path"], f["line"], f["col"], f["category"], f["symbol"], f["verdict"]) for f in data["findings"]]
    assert rows == EXPECTED
    assert set(data["findings"][0]) == {"path", "line", "col", "category", "symbol", "verdict", "patches", "text",
                                        "reason", "keys"}
    s = data["summary"]
    assert s["findings"] == len(EXPECTED) and s["files_with_findings"] == 3
    assert s["by_category"]["device-compare"] == 5 and s["by_category"]["fp8"] == 2
    assert s["by_verdict"] == {v: sum(e[-1] == v for e in EXPECTED) for v in symbols.VERDICTS}
    assert s["by_verdict"] == {"covered": 13, "fallback": 3, "neutral": 4, "unsupported": 8, "not covered": 14}
    assert s["by_category_verdict"]["cuda-graph"] == {"unsupported": 2, "covered": 1}
    assert data["unsupported"] == 8


def test_cli_csv_only_unsupported(cli_env, capsys):
    assert scan.main([FIXTURE, "--csv", "--only-unsupported"]) == 1
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["path", "line", "col", "category", "symbol", "verdict", "patches", "text", "reason"]
    assert {r["verdict"] for r in rows} == {"unsupported"}
    assert [(r["path"], int(r["line"]), r["symbol"]) for r in rows] == [
        (p, line, sym) for p, line, _c, _cat, sym, v in EXPECTED if v == "unsupported"]
    assert next(r for r in rows if r["symbol"] == "torch._scaled_mm")["patches"] == "scantest.fp8"


def test_cli_text_table_and_summary(cli_env, capsys):
    assert scan.main([FIXTURE]) == 1
    out = capsys.readouterr().out
    assert "train.py:20:5" in out and "torch.cuda.synchronize" in out and "[scantest.sync]" in out
    assert f"{len(EXPECTED)} finding(s) in 3 file(s); 4 .py file(s) scanned" in out
    assert "verdicts: covered 13, fallback 3, neutral 4, unsupported 8, not covered 14" in out
    table = [line.split() for line in out.splitlines() if line.startswith("  ") and not line.startswith("  category")]
    assert table[[r[0] for r in table].index("fp8")][:2] == ["fp8", "2"]


def test_cli_exit_codes(cli_env, tmp_path, capsys):
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\ntorch.cuda.synchronize()\n")
    assert scan.main([str(clean)]) == 0                     # covered only
    assert scan.main([str(tmp_path / "missing")]) == 2
    assert scan.main(["--json", "--csv", str(clean)]) == 2
    assert scan.main([]) == 2
    capsys.readouterr()


def test_cli_bad_configuration_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("ASCEND_SHIM_ONLY", "no_such_set")
    assert scan.main([FIXTURE]) == 2
    assert "no_such_set" in capsys.readouterr().err


def test_through_the_main_cli(cli_env, capsys):
    from ascend_shim import cli

    assert cli.main(["scan", FIXTURE, "--json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["findings"]) == len(EXPECTED)
