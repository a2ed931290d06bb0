"""The CLI behaves like ``python`` (findings 8 and 9): what python accepts runs the same, what it rejects is one
line; user tracebacks start at the user's frame under both entry points; the bootstrap is silent in pythons
that cannot import ascend_shim; ``env`` prints what activates a process started by hand."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

import ascend_shim
from ascend_shim.activation import BOOTSTRAP_DIR
from ascend_shim.errors import ConfigError

from tests.subprocess_env import shim_free_env


def run_cli(args, cwd, env=None, timeout=300):
    full = shim_free_env()
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ascend_shim", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout)


# -- like python: what it accepts runs the same, what it rejects is one line ----------------------------------
def _one_line(stderr):
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("ascend_shim")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_run_directory_and_package_main_like_python(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(
        "import os, sys\nprint('APP', __name__, __spec__.name, sys.argv, sys.path[0],"
        " os.environ.get('DEV', 'npu') == 'cuda')\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text("import sys\nprint('PKG', __name__, __spec__.name, sys.argv)\n")
    for args, plain_args in ((["app", "x"], ["app", "x"]), (["-m", "pkg", "y"], ["-m", "pkg", "y"])):
        shim = run_cli(["run", "--simulate", "--log-level", "off", *args], cwd=tmp_path)
        plain = subprocess.run([sys.executable, *plain_args], cwd=tmp_path, capture_output=True, text=True)
        assert shim.returncode == plain.returncode == 0, shim.stderr
        if args[0] == "app":  # same output, except that the directory's __main__ is user code: rewritten
            assert shim.stdout.replace("True", "False") == plain.stdout.replace("True", "False")
            assert shim.stdout.split()[-1] == "True" and plain.stdout.split()[-1] == "False"
        else:
            assert shim.stdout == plain.stdout


def test_run_missing_module_is_one_line_exit_1(tmp_path):
    proc = run_cli(["run", "--simulate", "-m", "no_such_module_xyz"], cwd=tmp_path)
    plain = subprocess.run([sys.executable, "-m", "no_such_module_xyz"], capture_output=True, text=True)
    assert proc.returncode == plain.returncode == 1
    assert _one_line(proc.stderr) == "ascend-shim run: No module named no_such_module_xyz"
    assert plain.stderr.strip().endswith(": No module named no_such_module_xyz")


@pytest.mark.parametrize("source, needle", [
    ("y = 1\n", "does not define patch sets"),
    ("raise RuntimeError('broken on purpose')\n", "cannot import 'badpm': RuntimeError: broken on purpose"),
    ("x = (\n", "cannot import 'badpm': SyntaxError"),
])
def test_bad_patch_modules_are_one_line_exit_2(tmp_path, source, needle):
    (tmp_path / "badpm.py").write_text(source)
    (tmp_path / "t.py").write_text("print('ran')\n")
    proc = run_cli(["run", "--simulate", "--patch-modules", "badpm", "t.py"], cwd=tmp_path,
                   env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2 and "ran" not in proc.stdout
    line = _one_line(proc.stderr)
    assert line.startswith("ascend-shim: error: ASCEND_SHIM_PATCH_MODULES") and needle in line, line


UNSUPPORTED = '''\
import torch


def make():
    return torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")


make()
'''


def _console_script(tmp_path):
    script = tmp_path / "ascend-shim"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom ascend_shim.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return str(script)


def test_user_traceback_starts_at_the_user_and_is_identical_for_both_entry_points(tmp_path):
    (tmp_path / "uns.py").write_text(UNSUPPORTED)
    env = shim_free_env()
    as_module = run_cli(["run", "--simulate", "--log-level", "off", "uns.py"], cwd=tmp_path)
    as_script = subprocess.run([_console_script(tmp_path), "run", "--simulate", "--log-level", "off", "uns.py"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert as_module.returncode == as_script.returncode == 1
    assert as_module.stderr == as_script.stderr
    lines = as_module.stderr.strip().splitlines()
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    # the first frame is the user's, the last one the user's call: no runpy, CLI, rewrite or patch frames
    assert frames == [f'File "{tmp_path}/uns.py", line 8, in <module>', f'File "{tmp_path}/uns.py", line 5, in make']
    assert lines[-1].startswith("ascend_shim.errors.UnsupportedOnNPUError: torch.cuda.jiterator")


def test_plain_exception_traceback_matches_python(tmp_path):
    (tmp_path / "fail.py").write_text("def f():\n    return {}['k']\n\n\nf()\n")
    shim = run_cli(["run", "--simulate", "--log-level", "off", "fail.py"], cwd=tmp_path)
    plain = subprocess.run([sys.executable, "fail.py"], cwd=tmp_path, capture_output=True, text=True)
    assert shim.returncode == plain.returncode == 1
    assert shim.stderr == plain.stderr


def test_bootstrap_is_silent_where_ascend_shim_is_not_importable(tmp_path):
    """A python of the job without the shim (here: a venv without system packages) stays quiet and still runs
    the environment's own sitecustomize."""
    import venv

    from ascend_shim.activation import BOOTSTRAP_DIR

    venv.create(tmp_path / "bare", with_pip=False, system_site_packages=False, symlinks=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    env = shim_free_env("PYTHON")
    env.update({"ASCEND_SHIM": "1", "ASCEND_SHIM_BACKEND": "sim", "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR,
                                                                                                str(site)])})
    proc = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-c",
                           "import os, importlib.util; print(importlib.util.find_spec('ascend_shim') is None, "
                           "os.environ.get('USER_SITECUSTOMIZE_RAN'))"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.split() == ["True", "yes"]


# -- the Python API: a bad argument is a TypeError naming it ----------------------------------------------------
@pytest.mark.parametrize("kwargs, needle", [
    ({"disable": 123}, "disable must be a comma-separated str or a list of str, not int"),
    ({"only": [1, 2]}, "only must be a comma-separated str or a list of str, not list"),
    ({"strict": "yes"}, "strict must be True or False, not str"),
    ({"backend": 5}, "backend must be a str, not int"),
    ({"report": 1.5}, "report must be a str or a path, not float"),
    ({"sim_layer": True}, "sim_layer must be a str, not bool"),
    ({"sim_devices": 2.0}, "sim_devices must be an int or a str, not float"),
])
def test_bad_api_arguments_name_the_argument(clean_shim, kwargs, needle):
    with pytest.raises(TypeError, match=re.escape(needle)):
        ascend_shim.activate(**kwargs)
    assert not ascend_shim.is_active()


@pytest.mark.parametrize("good", ["torch_cuda", "torch_cuda.*", "torch-cuda", "t?rch_cuda", "torch_[ab]uda"])
def test_id_message_lists_only_accepted_characters(good):
    """Every character class the message names is accepted by the parser, and a refused one is not named."""
    from ascend_shim.config import row

    ids = row("disable")
    assert ids.parse(good) == (good,)
    with pytest.raises(ConfigError) as info:
        ids.parse("a!b")
    msg = str(info.value)
    for named in re.findall(r"'(.)'", msg.split(";", 1)[1]):
        assert ids.parse(f"a{named}b") == (f"a{named}b",), named


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 words these its own way")
@pytest.mark.parametrize("name, data", [
    ("nul", b"x = 1\n\x00\xff\xfe garbage\n"),
    ("nul_after_text", b"print(1)\x00\n"),
    ("elf", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\n\xff\xfe"),
    ("not_utf8", b"\xff\xfe\x00\x01print(1)\n"),
    ("not_utf8_in_a_comment", b"print('a')\n# \xe9\n"),
    ("latin1_declared_nul", b"# -*- coding: latin-1 -*-\nx = '\xe9'\x00\n"),
    ("bom_nul", b"\xef\xbb\xbfx = 1\r\n\xc3\xa9\x00\n"),
])
def test_a_binary_script_gets_pythons_message_and_status(tmp_path, name, data):
    (tmp_path / f"{name}.py").write_bytes(data)
    shim = run_cli(["run", "--simulate", f"{name}.py"], cwd=tmp_path)
    plain = subprocess.run([sys.executable, f"{name}.py"], cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 1 and "SyntaxError" in plain.stderr
    assert (shim.returncode, shim.stderr) == (plain.returncode, plain.stderr)


# -- the options reach the activation; `env` activates a process started by hand ------------------------------
#: what an activated Python shows of its activation (it never imports torch: nothing comes up)
SHOW = """\
import json, os, ascend_shim
from ascend_shim.activation import current_config
from ascend_shim.report import REPORT
c = current_config()
print(json.dumps({"active": ascend_shim.is_active(), "backend": c.backend, "sim_layer": c.sim_layer,
                  "report": c.report, "report_layer": REPORT.sim_layer,
                  "child_layer": os.environ.get("ASCEND_SHIM_SIM_LAYER"), "pythonpath": os.environ["PYTHONPATH"]}))
"""


def test_run_options_reach_the_activation_and_its_children(tmp_path):
    (tmp_path / "show.py").write_text(SHOW)
    proc = run_cli(["run", "--simulate", "--sim-layer", "builtin", "--log-level", "off", "--report", "r.json",
                    "show.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["active"] and (shown["backend"], shown["sim_layer"], shown["report_layer"]) == ("sim", "builtin",
                                                                                               "builtin")
    assert shown["child_layer"] == "builtin" and shown["report"] == str(tmp_path / "r.json")


def test_env_lines_evaluated_by_the_shell_activate_a_python_started_by_hand(tmp_path):
    odd = tmp_path / "a dir with 'quotes', $HOME and spaces"
    odd.mkdir()
    pythonpath = os.pathsep.join([str(odd), os.path.dirname(os.path.dirname(ascend_shim.__file__))])
    env = shim_free_env()
    env["PYTHONPATH"] = pythonpath
    python = shlex.quote(sys.executable)
    script = (f'eval "$({python} -m ascend_shim env --simulate --sim-layer builtin --report r.json)" && '
              f"exec {python} -c {shlex.quote(SHOW)}")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["active"] and (shown["backend"], shown["sim_layer"], shown["report_layer"]) == ("sim", "builtin",
                                                                                               "builtin")
    assert shown["report"] == str(tmp_path / "r.json")  # as given where `env` ran, whatever the process's cwd
    assert shown["pythonpath"] == os.pathsep.join([BOOTSTRAP_DIR, pythonpath])


def test_env_prints_the_switch_the_settings_given_and_the_bootstrap_once(tmp_path):
    holding = os.pathsep.join(["/somewhere", BOOTSTRAP_DIR])
    proc = run_cli(["env", "--backend", "sim", "--disable", " a , b", "--strict"], cwd=tmp_path,
                   env={"PYTHONPATH": holding})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["export ASCEND_SHIM=1", "export ASCEND_SHIM_BACKEND=sim",
                                        "export ASCEND_SHIM_DISABLE=a,b", "export ASCEND_SHIM_STRICT=1",
                                        f"export PYTHONPATH={shlex.quote(holding)}"]


@pytest.mark.parametrize("args, env, needle", [
    (["env", "--simulate"], {"ASCEND_SHIM_SIM_DEVICES": "abc"}, "ascend-shim: error: ASCEND_SHIM_SIM_DEVICES='abc'"),
    (["env", "--simulate", "--backend", "npu"], {}, "ascend-shim: error: --simulate contradicts --backend npu"),
    (["env", "--only", "a,,b"], {}, "ascend-shim: error: ASCEND_SHIM_ONLY='a,,b' is malformed"),
])
def test_env_with_a_bad_setting_prints_nothing_to_evaluate(tmp_path, args, env, needle):
    proc = run_cli(args, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc.stderr).startswith(needle), proc.stderr
