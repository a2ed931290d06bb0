"""Each setting is one row: its command-line option and its environment variable give the same configuration,
the documentation table lists both, ``activate()`` takes it as a keyword, and its row parses every value (one
message wherever the value comes from)."""
import subprocess
import sys

import pytest

from ascend_shim import cli, config, fidelity, listing
from ascend_shim.config import ENV_VARS, Config
from ascend_shim.errors import ConfigError

from tests.subprocess_env import shim_free_env

SAMPLE = {"backend": "sim", "sim_layer": "builtin", "disable": "torch_features", "only": "torch_devices",
          "enable": "fast_ops", "strict": None, "report": "/tmp/r.json", "log_level": "debug",
          "patch_modules": "my_patches"}
WITH_OPTION = [v for v in ENV_VARS if v.flag]


def test_the_run_options_are_the_declared_ones():
    run = cli.build_parser()._subparsers._group_actions[0].choices["run"]
    declared = {v.flag for v in WITH_OPTION}
    offered = {o for a in run._actions for o in a.option_strings if o.startswith("--")}
    assert declared <= offered and offered - declared == {"--help", "--simulate"}


@pytest.mark.parametrize("var", WITH_OPTION, ids=lambda v: v.flag)
def test_an_option_and_its_environment_variable_configure_the_same(var, monkeypatch):
    value = SAMPLE[var.field]
    argv = ["run", var.flag] + ([] if var.switch else [value]) + ["x.py"]
    ns = cli.build_parser().parse_args(argv)
    for v in ENV_VARS:
        monkeypatch.delenv(v.name, raising=False)
    from_option = cli.config_from_args(ns)
    monkeypatch.setenv(var.name, "1" if var.switch else value)
    from_env = Config.from_env()
    assert getattr(from_option, var.field) == getattr(from_env, var.field) != getattr(Config(), var.field)


def test_the_documented_tables_come_from_the_declarations():
    table = listing.env_table()
    assert all(f"`{v.flag}`" in table for v in WITH_OPTION)
    assert all(f"| `{f.name}` | {f.verdict} |" in fidelity.markdown() for f in fidelity.FIDELITIES)


# -- each row parses its own values ------------------------------------------------------------------------------
#: a bad value of every setting whose text can be bad, and what its row's error says
BAD = {
    "enabled": ("maybe", "is not a boolean; use 1 or 0"),
    "backend": ("gpu", "is not a backend; valid values: npu, sim, auto"),
    "disable": ("a,,b", "is malformed: empty item in a comma list"),
    "only": ("bad id!", "'bad id!' is not a valid id; ids use ASCII letters"),
    "enable": ("x,", "is malformed: empty item in a comma list"),
    "strict": ("2", "is not a boolean; use 1 or 0"),
    "log_level": ("loud", "is not a log level; valid values: debug, info, warning, error, off"),
    "patch_modules": ("not-a-module", "'not-a-module' is not a valid module name"),
    "cuda_capability": ("9", "is not a capability; use major.minor, e.g. 8.0"),
    "compile_backend": ("no such", "is not a torch.compile backend; use none or a backend dynamo registers"),
    "save_device": ("cpu", "is not a checkpoint device; valid values: cuda, npu"),
    "rewrite": ("sometimes", "is not a boolean; use 1 or 0"),
    "gc_freeze": ("never", "is not a boolean; use 1 or 0"),
    "user_packages": ("1pkg", "'1pkg' is not a valid module name"),
    "native_packages": ("a,,b", "is malformed: empty item in a comma list"),
    "user_roots": ("/no/such/dir/xyz", "'/no/such/dir/xyz' is not a directory"),
    "sim_devices": ("65", "is out of range: use 1 to 64"),
    "sim_layer": ("cuda", "is not a layer; valid values: real, builtin, auto"),
    "sim_build_verbose": ("loud", "is not a boolean; use 1 or 0"),
    "sim_build_timeout": ("2x", "is not a whole number from 1 to 86400"),
    "sim_cann_version": ("latest", "is not a CANN version; e.g. 8.3.RC1 or 8.0.0"),
    "sim_hccl_avg": ("mean", "is not a policy; valid values: reject, sum_div"),
    "sim_hccl_no_alias": ("2", "is not a boolean; use 1 or 0"),
}
#: settings whose every text is a value: paths, made absolute
ANY_TEXT = {"report", "torch_npu_dir", "sim_build_dir"}


def test_every_setting_has_a_bad_value_here_or_takes_any_text():
    assert set(BAD) | ANY_TEXT == {v.field for v in ENV_VARS} and not set(BAD) & ANY_TEXT


@pytest.mark.parametrize("field", sorted(BAD))
def test_each_row_rejects_a_bad_value_with_its_own_message(field):
    var = config.row(field)
    raw, message = BAD[field]
    with pytest.raises(ConfigError) as info:
        var.parse(raw)
    assert str(info.value).startswith(var.name) and message in str(info.value), info.value
    with pytest.raises(ConfigError) as from_env:  # the same message from the environment and from a keyword
        Config.from_env({var.name: raw})
    assert str(from_env.value) == str(info.value)
    if var.keyword and not isinstance(var, config.Bool):  # a bool keyword takes True or False, never text
        with pytest.raises(ConfigError) as keyword:
            Config.from_env({}, **{field: raw})
        assert str(keyword.value) == str(info.value)


@pytest.mark.parametrize("var", [v for v in ENV_VARS if v.keyword], ids=lambda v: v.field)
def test_each_keyword_refuses_a_value_of_a_type_it_does_not_take(var):
    with pytest.raises(TypeError, match=f"^{var.field} must be "):
        Config.from_env({}, **{var.field: object()})


@pytest.mark.parametrize("var", ENV_VARS, ids=lambda v: v.field)
def test_the_default_is_the_documented_text_parsed_and_round_trips(var):
    assert getattr(Config(), var.field) == var.parse(var.default)
    assert var.format(getattr(Config(), var.field)) == var.default


@pytest.mark.parametrize("var", [v for v in ENV_VARS if v.keyword], ids=lambda v: v.field)
def test_a_keyword_is_named_after_the_option_or_else_the_variable(var):
    """What the documentation says of activate()'s keywords."""
    expected = var.flag[2:].replace("-", "_") if var.flag else var.name.removeprefix("ASCEND_SHIM_").lower()
    assert var.field == expected


# -- activate() takes every setting, through the same rows ---------------------------------------------------------
def test_activate_takes_every_setting_the_cli_takes():
    import inspect

    from ascend_shim.activation import activate

    takes_any = inspect.Parameter.VAR_KEYWORD in {p.kind for p in inspect.signature(activate).parameters.values()}
    assert takes_any and {v.field for v in WITH_OPTION} <= set(config.KEYWORDS)


def test_activate_with_an_unknown_keyword_names_the_known_ones(clean_shim):
    with pytest.raises(TypeError, match=r"^activate\(\): unknown setting 'sim_layers'; known: backend, .*sim_layer"):
        clean_shim.activate("sim", sim_layers="builtin")
    with pytest.raises(TypeError, match="unknown setting 'enabled'"):  # the switch of the environment, not a setting
        clean_shim.activate("sim", enabled=True)
    assert not clean_shim.is_active()


def test_a_second_activate_checks_its_keywords_and_warns_of_other_settings(clean_shim):
    clean_shim.activate("sim", inherit=False, log_level="off")
    with pytest.raises(TypeError, match="unknown setting 'sim_layers'"):
        clean_shim.activate(sim_layers=None)
    with pytest.warns(RuntimeWarning, match="sim_devices=2 \\(in force: 8\\)"):
        clean_shim.activate(sim_devices=2)


def test_activate_sim_layer_reaches_the_activation_and_its_children(tmp_path):
    code = ("import os, ascend_shim\n"
            "from ascend_shim.activation import current_config\n"
            "from ascend_shim.report import REPORT\n"
            "ascend_shim.activate('sim', sim_layer='builtin', sim_devices=2, log_level='off')\n"
            "print(current_config().sim_layer, REPORT.sim_layer, os.environ['ASCEND_SHIM_SIM_LAYER'],\n"
            "      os.environ['ASCEND_SHIM_SIM_DEVICES'], ascend_shim.current_backend())\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=shim_free_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["builtin", "builtin", "builtin", "2", "sim"]
