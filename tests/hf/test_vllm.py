"""The vllm set against the REAL vllm package (PyPI wheel, --no-deps) on CPU.

What runs for real: vllm 0.33.0's ``EngineArgs`` / ``AsyncEngineArgs`` dataclasses (``__post_init__`` included),
``AsyncEngineArgs.add_cli_args`` + ``from_cli_args`` and the ``vllm serve`` parser (``make_arg_parser``) fed the
argv that ``trl vllm-serve`` builds. What is stood in: vllm-ascend (not installable here) -- its
``NPUPlatform`` is replaced by a minimal ``Platform`` subclass with vllm-ascend's class attributes, and the
installed-version lookup reports a vllm-ascend / torch_npu pairing. No engine is created (no model, no
``create_engine_config``), no server is started.
CI installs vllm==0.33.0 and its import-time pure deps --no-deps (tests/requirements-nodeps.txt).
"""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ascend_shim import versions
from ascend_shim.errors import ShimError, UnsupportedOnNPUError
from ascend_shim.report import REPORT

PIP = "DS_BUILD_OPS=0 pip install --no-deps --no-build-isolation -r tests/requirements-nodeps.txt"


def _require_vllm():
    if importlib.util.find_spec("vllm") is None:
        pytest.fail(f"vllm is not installed: these tests pin the set against the real package ({PIP})")


def _fake_pairing(monkeypatch):
    """vllm-ascend of vllm's release line, registered; torch_npu on torch's base version."""
    import ascend_shim.targets.vllm.impl as pv

    real = versions.installed_version
    vl = real("vllm")
    fake = {"vllm-ascend": vl + "rc1" if vl else None, "torch-npu": real("torch").split("+")[0]}
    monkeypatch.setattr(versions, "installed_version", lambda d: fake[d] if d in fake else real(d))
    monkeypatch.setattr(pv, "_ascend_plugin_registered", lambda: True)
    monkeypatch.setattr(versions, "requirements_of", lambda dist: [])
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)


def _stand_in_platform(monkeypatch):
    """vllm-ascend's NPUPlatform class attributes, without vllm-ascend."""
    import vllm.platforms as vp
    from vllm.platforms.interface import Platform, PlatformEnum

    class StandInNPUPlatform(Platform):
        _enum = PlatformEnum.OOT
        device_name = device_type = "npu"
        dispatch_key = "PrivateUse1"
        device_control_env_var = "ASCEND_RT_VISIBLE_DEVICES"
        supported_quantization = ["ascend", "compressed-tensors"]

    monkeypatch.setattr(vp, "_current_platform", StandInNPUPlatform())


@pytest.fixture
def on_npu(clean_shim, monkeypatch):
    _require_vllm()
    _fake_pairing(monkeypatch)
    clean_shim.activate("sim")
    _stand_in_platform(monkeypatch)
    from vllm.engine import arg_utils

    assert REPORT.sets["vllm"]["status"] == "active", REPORT.sets["vllm"]
    return arg_utils


def _events(api_part):
    return [e for e in REPORT.events() if api_part in e["api"]]


# -- the pairing rules (no vllm needed) ---------------------------------------------------------------------
def test_pairing_rules():
    from ascend_shim.targets.vllm.impl import check_pairing, pairing_problems

    good = {"vllm": "0.13.0", "vllm-ascend": "0.13.0rc1", "torch": "2.8.0", "torch-npu": "2.8.0.post2",
            "numpy": "1.26.4"}
    assert check_pairing(good) == ([], [])
    assert check_pairing(dict(good, vllm="0.14.1", **{"vllm-ascend": "0.14.0rc1"})) == ([], [])  # same line
    # vllm 0.15.1 + vllm-ascend 0.13.0, torch 2.9.1 + torch_npu 2.9.0: two mismatches (torch_npu 2.9.0 requires
    # torch==2.9.0.*), the same answer doctor gives
    errors, warnings = check_pairing(dict(good, vllm="0.15.1", torch="2.9.1", **{"torch-npu": "2.9.0"}))
    assert len(errors) == 2 and "different release lines" in errors[0] and "0.13.x" in errors[0]
    assert "torch_npu 2.9.0 is built for torch 2.9.0" in errors[1] and warnings == []
    errors, _ = check_pairing(dict(good, torch="2.9.0"))
    assert any("binary mismatch" in e for e in errors)
    assert any("vllm-ascend is not installed" in p for p in pairing_problems(dict(good, **{"vllm-ascend": None})))
    # numpy<2 up to vllm-ascend 0.19 (documented), dropped from 0.20 on; vllm-ascend's own metadata wins
    assert check_pairing(dict(good, numpy="2.1.0"))[1] == ["numpy 2.1.0: vllm-ascend 0.13.0rc1 needs numpy<2"]
    new = {"vllm": "0.23.0", "vllm-ascend": "0.23.0.post1", "torch": "2.10.0", "torch-npu": "2.10.0.post4",
           "numpy": "2.1.0"}
    assert check_pairing(new) == ([], [])
    pins = ["numpy", "torch==2.10.0", "torch-npu==2.10.0.post4", "pytest; extra == 'test'"]
    assert check_pairing(dict(new, **{"torch-npu": "2.10.0"}), pins)[1] == [
        "torch-npu 2.10.0: vllm-ascend 0.23.0.post1 is built and tested against torch-npu==2.10.0.post4"]


def test_translation_on_plain_kwargs():
    """The translation itself, on the keyword names vLLM's CLI produces (no vllm needed)."""
    from ascend_shim.targets.vllm.impl import translate_engine_args

    fields = {"model", "device", "kv_cache_dtype", "quantization", "enforce_eager", "weight_transfer_config"}
    kw = {"model": "m", "device": "cuda:0", "kv_cache_dtype": "fp8_e5m2", "weight_transfer_config": {"backend": "ipc"}}
    events = translate_engine_args(kw, fields=fields, quantization_methods=("ascend",))
    assert kw == {"model": "m", "device": "auto", "kv_cache_dtype": "auto", "enforce_eager": True,
                  "weight_transfer_config": {"backend": "npu_ipc"}}
    assert [c for c, _, _ in events] == ["translated", "fallback", "translated", "translated"]
    kw = {"enforce_eager": False, "kv_cache_dtype": "bfloat16", "quantization": "ascend"}
    assert translate_engine_args(kw, fields=fields, quantization_methods=("ascend",)) == []
    assert kw == {"enforce_eager": False, "kv_cache_dtype": "bfloat16", "quantization": "ascend"}
    with pytest.raises(UnsupportedOnNPUError, match=r"quantization='gptq_marlin'.*Marlin kernels are CUDA-only"):
        translate_engine_args({"quantization": "gptq_marlin"}, fields=fields, quantization_methods=("ascend",))
    kw = {"weight_transfer_config": {"backend": "nccl"}}
    events = translate_engine_args(kw, fields=fields, hccl_weight_transfer=False)
    assert kw["weight_transfer_config"] == {"backend": "nccl"} and events[0][0] == "unsupported"


# -- the real vllm package ----------------------------------------------------------------------------------
def test_vllm_is_installed_and_in_the_declared_range():
    _require_vllm()
    from ascend_shim.targets.vllm import vllm as pset

    version = versions.installed_version("vllm")
    assert versions.satisfies(version, pset.requires["vllm"]), version


def test_engine_args_are_translated_before_vllm_sees_them(on_npu):
    from vllm.config.weight_transfer import WeightTransferConfig

    args = on_npu.EngineArgs(model="some/model", kv_cache_dtype="fp8", weight_transfer_config={"backend": "nccl"})
    assert args.kv_cache_dtype == "auto" and args.enforce_eager is True
    assert isinstance(args.weight_transfer_config, WeightTransferConfig)  # vLLM's __post_init__ ran on it
    assert args.weight_transfer_config.backend == "hccl"
    assert any(e["category"] == "fallback" for e in _events("kv_cache_dtype='fp8'"))
    kept = on_npu.EngineArgs("some/model", enforce_eager=False, quantization="compressed-tensors")
    assert kept.enforce_eager is False and kept.model == "some/model" and kept.quantization == "compressed-tensors"
    with pytest.raises(UnsupportedOnNPUError, match="quantization='awq_marlin'") as info:
        on_npu.AsyncEngineArgs(model="some/model", quantization="awq_marlin")
    assert "ascend, compressed-tensors" in str(info.value)
    assert _events("quantization='awq_marlin'")[0]["category"] == "unsupported"


def test_vllm_serve_cli_defaults_to_eager_and_translates(on_npu):
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = on_npu.AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(["--model", "m", "--kv-cache-dtype", "fp8_e4m3",
                            "--weight-transfer-config", '{"backend": "nccl"}'])
    assert ns.enforce_eager is True  # the parser's default on the NPU
    args = on_npu.AsyncEngineArgs.from_cli_args(ns)
    assert (args.enforce_eager, args.kv_cache_dtype, args.weight_transfer_config.backend) == (True, "auto", "hccl")
    assert on_npu.AsyncEngineArgs.from_cli_args(parser.parse_args(["--model", "m", "--no-enforce-eager"])) \
        .enforce_eager is False


def test_trl_vllm_serve_command_through_the_real_serve_parser(on_npu):
    """The argv `trl vllm-serve` execs (`python -m vllm.entrypoints.cli.main serve ...`), parsed by vLLM's own
    `vllm serve` parser and turned into engine args as vLLM's server does."""
    pytest.importorskip("trl")
    from trl.scripts.vllm_serve import ScriptArguments, build_command
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    command = build_command(ScriptArguments(model="tiny/model", kv_cache_dtype="fp8"))
    argv = command[command.index("serve") + 1:]
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    ns.model = ns.model_tag  # what `vllm serve` does with the positional model
    args = on_npu.AsyncEngineArgs.from_cli_args(ns)
    assert args.model == "tiny/model" and args.enforce_eager is True
    assert args.kv_cache_dtype == "auto" and args.weight_transfer_config.backend == "hccl"


def test_missing_vllm_ascend_is_a_clear_error(clean_shim, monkeypatch):
    _require_vllm()
    _fake_pairing(monkeypatch)
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda d: None if d == "vllm-ascend" else real(d))
    clean_shim.activate("sim")
    _stand_in_platform(monkeypatch)
    from vllm.engine.arg_utils import EngineArgs

    with pytest.raises(ShimError, match="vllm-ascend is not installed"):
        EngineArgs(model="m")


def test_vllm_plugins_allow_list_gets_ascend(clean_shim, monkeypatch):
    _require_vllm()
    _fake_pairing(monkeypatch)
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    clean_shim.activate("sim")
    assert os.environ["VLLM_PLUGINS"] == "lora_filesystem_resolver,ascend"
    clean_shim.deactivate()
    assert os.environ["VLLM_PLUGINS"] == "lora_filesystem_resolver"


def test_without_the_shim_vllm_keeps_the_cuda_values(monkeypatch):
    _require_vllm()
    _stand_in_platform(monkeypatch)
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model="m", kv_cache_dtype="fp8", weight_transfer_config={"backend": "nccl"})
    assert (args.kv_cache_dtype, args.enforce_eager, args.weight_transfer_config.backend) == ("fp8", False, "nccl")


CHILD = textwrap.dedent("""
    import json, os, sys
    import ascend_shim, ascend_shim.targets.vllm.impl as pv
    assert ascend_shim.is_active(), "the bootstrap did not activate the shim in the child"
    pv.platform_problems = lambda: ([], [])  # vllm-ascend stands in (not installable here)
    import vllm.platforms as vp
    from vllm.platforms.interface import Platform, PlatformEnum
    class P(Platform):
        _enum = PlatformEnum.OOT; device_name = device_type = "npu"; dispatch_key = "PrivateUse1"
        device_control_env_var = "ASCEND_RT_VISIBLE_DEVICES"; supported_quantization = ["ascend"]
    vp._current_platform = P()
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.engine.arg_utils import AsyncEngineArgs
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
    a = AsyncEngineArgs.from_cli_args(ns)
    print(json.dumps({"eager": a.enforce_eager, "kv": a.kv_cache_dtype,
                      "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES")}))
""")


@pytest.mark.slow
def test_server_child_comes_up_translated_on_its_own_card(clean_shim, monkeypatch, tmp_path):
    """AReaL / TRL start each vLLM server as a child with its own CUDA_VISIBLE_DEVICES and os.environ.copy():
    the child must be activated and see ASCEND_RT_VISIBLE_DEVICES for *its* card, not the parent's list."""
    _require_vllm()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    clean_shim.activate("sim")
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
    script = tmp_path / "server_child.py"
    script.write_text(CHILD)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="2")
    out = subprocess.run([sys.executable, str(script), "m", "--kv-cache-dtype", "fp8"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"eager": True, "kv": "auto", "visible": "2"}
    clean_shim.deactivate()
    assert "ASCEND_RT_VISIBLE_DEVICES" not in os.environ
    assert "ASCEND_SHIM_DERIVED_CUDA_VISIBLE_DEVICES" not in os.environ
