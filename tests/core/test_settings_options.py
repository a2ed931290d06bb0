"""Each command-line option is the setting's own declaration: the option and its environment variable give
the same configuration, and the documentation table lists both."""
import pytest

from ascend_shim import cli, fidelity, listing
from ascend_shim.config import ENV_VARS, Config

SAMPLE = {"backend": "sim", "sim_layer": "builtin", "disable": "torch_features", "only": "torch_devices",
          "enable": "fast_ops", "strict": None, "report": "/tmp/r.json", "log": "debug", "patch_modules": "my_patches"}
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
