"""The main program as ``python`` takes it: ``run -`` reads it from standard input, and a main program that
does not compile is shown as Python shows it (no frame of the shim, exit status 1, nothing else said)."""
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

PROBE = """\
import sys, torch
m = sys.modules["__main__"]
print(sys.argv, repr(sys.path[0]), __file__, m.__spec__, m.__loader__.__name__, __name__)
if torch.cuda.is_available():  # under the shim (python itself runs on a CPU build here)
    x = torch.zeros(1, device="cuda")
    print("gpu branch:", x.device.type == "cuda")
sys.exit(3)
"""


def _env(**extra) -> dict:
    env = shim_free_env()
    env.update(extra)
    return env


def _shim(args, cwd, stdin=None, input=None, **env):
    return subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *args], cwd=cwd, stdin=stdin,
                          input=input, env=_env(**env), capture_output=True, text=True, timeout=300)


def _python(args, cwd, input=None):
    return subprocess.run([sys.executable, *args], cwd=cwd, input=input, env=_env(), capture_output=True, text=True,
                          timeout=300)


# -- run - ----------------------------------------------------------------------------------------------------
def test_run_dash_reads_the_program_from_stdin_as_python_does(tmp_path):
    shim = _shim(["-", "a", "b"], tmp_path, input=PROBE, ASCEND_SHIM_LOG="off")
    plain = _python(["-", "a", "b"], tmp_path, input=PROBE)
    assert shim.returncode == plain.returncode == 3, shim.stderr[-3000:]
    first, branch = shim.stdout.splitlines()
    assert first == plain.stdout.strip() == "['-', 'a', 'b'] '' <stdin> None BuiltinImporter __main__"
    assert branch == "gpu branch: True"  # the user's code: its comparison rewritten, as a script's is


def test_run_dash_tracebacks_name_stdin_from_the_users_line_on(tmp_path):
    source = "def f():\n    return 1 / 0\nf()\n"
    shim = _shim(["-"], tmp_path, input=source, ASCEND_SHIM_LOG="off")
    plain = _python(["-"], tmp_path, input=source)
    assert shim.returncode == plain.returncode == 1
    assert shim.stderr == plain.stderr, shim.stderr


def test_run_dash_from_a_terminal_says_what_to_do(tmp_path):
    parent, child = os.openpty()
    try:
        shim = _shim(["-"], tmp_path, stdin=child)
    finally:
        os.close(parent)
        os.close(child)
    assert shim.returncode == 1 and "standard input is a terminal" in shim.stderr, shim.stderr


# -- a main program that does not compile ---------------------------------------------------------------------
@pytest.mark.parametrize("rewrite", ["1", "0"])
def test_a_scripts_syntax_error_is_shown_as_python_shows_it(tmp_path, rewrite):
    (tmp_path / "bad.py").write_text("import os\nx = (\n")
    shim = _shim(["bad.py"], tmp_path, ASCEND_SHIM_REWRITE=rewrite)
    plain = _python(["bad.py"], tmp_path)
    assert shim.returncode == plain.returncode == 1
    assert shim.stderr == plain.stderr and shim.stdout == "", shim.stderr


def test_a_syntax_error_on_stdin_is_shown_as_python_shows_it(tmp_path):
    shim = _shim(["-"], tmp_path, input="if True\n    pass\n")
    plain = _python(["-"], tmp_path, input="if True\n    pass\n")
    assert shim.returncode == plain.returncode == 1
    assert shim.stderr == plain.stderr, shim.stderr


def test_a_modules_syntax_error_shows_no_shim_frame(tmp_path):
    (tmp_path / "bad.py").write_text("import os\nx = (\n")
    shim = _shim(["-m", "bad"], tmp_path)
    plain = _python(["-m", "bad"], tmp_path)
    assert shim.returncode == plain.returncode == 1
    assert "ascend_shim" not in shim.stderr, shim.stderr
    tail = plain.stderr.splitlines()[-4:]  # the File line, the source line, the caret, the message
    assert shim.stderr.splitlines()[-4:] == tail and tail[-1] == "SyntaxError: '(' was never closed"


def test_a_syntax_error_the_program_raises_keeps_the_programs_traceback(tmp_path):
    (tmp_path / "main.py").write_text("def build():\n    compile('x = (', 'generated', 'exec')\nbuild()\n")
    shim = _shim(["main.py"], tmp_path, ASCEND_SHIM_LOG="off")
    plain = _python(["main.py"], tmp_path)
    assert shim.returncode == plain.returncode == 1
    assert shim.stderr == plain.stderr, shim.stderr
