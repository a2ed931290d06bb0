"""``ascend-shim run``: scripts, ``-m`` modules, child processes, JSON reports and the ``report`` command."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SPAWNING_SCRIPT = '''
import json, multiprocessing as mp, os, subprocess, sys

def probe(tag):
    from ascend_shim import activation
    return {"tag": tag, "pid": os.getpid(), "active": activation.is_active(),
            "backend": activation.current_backend(), "strict": activation.current_config().strict}

def worker(q, tag):
    q.put(probe(tag))

if __name__ == "__main__":
    out = [probe("root")]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(q, f"spawn{i}")) for i in range(2)]
    for p in procs: p.start()
    out += [q.get(timeout=120) for _ in procs]
    for p in procs: p.join(120)
    child = subprocess.run([sys.executable, "-c",
        "import json, os; from ascend_shim import activation as a; "
        "print(json.dumps({'tag': 'subprocess', 'pid': os.getpid(), 'active': a.is_active(), "
        "'backend': a.current_backend(), 'strict': a.current_config().strict}))"],
        capture_output=True, text=True, check=True)
    out.append(json.loads(child.stdout))
    with open(sys.argv[1], "w") as fh:
        json.dump({"argv": sys.argv, "results": out}, fh)
'''


def run_cli(args, cwd, env=None, timeout=300):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ascend_shim", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_children_come_up_activated_with_the_same_settings(tmp_path):
    (tmp_path / "spawner.py").write_text(SPAWNING_SCRIPT)
    out = tmp_path / "out.json"
    # a sitecustomize already on the path must still run (we chain to it)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    proc = run_cli(["run", "--simulate", "--strict", "spawner.py", str(out)], cwd=tmp_path,
                   env={"PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["argv"] == ["spawner.py", str(out)] or data["argv"][1:] == [str(out)]
    results = data["results"]
    assert [r["tag"] for r in results] == ["root", "spawn0", "spawn1", "subprocess"] or \
        sorted(r["tag"] for r in results) == ["root", "spawn0", "spawn1", "subprocess"]
    assert all(r["active"] and r["backend"] == "sim" and r["strict"] for r in results), results
    assert len({r["pid"] for r in results}) == 4


def test_user_sitecustomize_is_chained(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    (tmp_path / "child.py").write_text(
        "import os, subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"USER_SITECUSTOMIZE_RAN\"))'],"
        " capture_output=True, text=True)\nprint('CHILD', r.stdout.strip())\n")
    proc = run_cli(["run", "--simulate", "child.py"], cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    assert "CHILD yes" in proc.stdout


def test_run_module_passes_argv_and_exit_code(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(textwrap.dedent('''
        import sys
        from ascend_shim import activation
        print("ARGV", sys.argv[1:], activation.is_active())
        sys.exit(3)
    '''))
    proc = run_cli(["run", "--simulate", "-m", "mypkg.main", "--lr", "3", "-x"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "ARGV ['--lr', '3', '-x'] True" in proc.stdout


def test_report_json_per_process_and_merge(tmp_path):
    script = tmp_path / "calls.py"
    script.write_text(textwrap.dedent('''
        import os, subprocess, sys
        from ascend_shim.report import REPORT
        REPORT.translated("torch.demo()", "npu")          # line 4
        subprocess.run([sys.executable, "-c",
            "from ascend_shim.report import REPORT; REPORT.translated('torch.demo()', 'npu')"], check=True)
    '''))
    report = tmp_path / "rep" / "report.json"
    proc = run_cli(["run", "--simulate", "--report", str(report), str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in report.parent.iterdir())
    assert "report.json" in files and any(f.startswith("report.pid") for f in files), files
    root = json.loads(report.read_text())
    [event] = [e for e in root["events"] if e["api"] == "torch.demo()"]
    assert (event["file"], event["line"], event["count"]) == (str(script), 4, 1)
    # the summary went to stderr once (root only), pointing at the JSON
    assert proc.stderr.count("ascend_shim migration report") == 1
    merged = run_cli(["report", "--json", *map(str, report.parent.iterdir())], cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    data = json.loads(merged.stdout)
    assert len(data["processes"]) == 2
    assert sum(e["count"] for e in data["events"] if e["api"] == "torch.demo()") == 2
    text = run_cli(["report", *map(str, report.parent.iterdir())], cwd=tmp_path)
    assert "2 processes merged" in text.stdout


def test_worker_ranks_write_rank_named_reports(tmp_path):
    (tmp_path / "w.py").write_text("print('hi')\n")
    report = tmp_path / "r.json"
    proc = run_cli(["run", "--simulate", "--report", str(report), "w.py"], cwd=tmp_path, env={"RANK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.rank1.json").exists()
    assert "migration report" not in proc.stderr  # only rank 0 talks


def test_list_shows_metadata_and_status(tmp_path):
    (tmp_path / "extra_sets.py").write_text(textwrap.dedent('''
        from ascend_shim.registry import PatchSet
        s = PatchSet(id="extra", title="Extra set", requires={"pytest": ">=1"}, checked_against="pytest 9")
        @s.patch("json:dumps", why="because", what="wraps dumps", remove_when="upstream fixes it")
        def dumps(ctx):
            return ctx.original
        PATCH_SETS = [s]
    '''))
    proc = run_cli(["list", "--patch-modules", "extra_sets"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "[active] extra: Extra set" in proc.stdout
    assert "why:  because" in proc.stdout and "remove when: upstream fixes it" in proc.stdout
    md = run_cli(["list", "--format", "markdown", "--patch-modules", "extra_sets"], cwd=tmp_path,
                 env={"PYTHONPATH": str(tmp_path)})
    assert "| extra.json.dumps | `json:dumps` | wrap | exact | wraps dumps | upstream fixes it |" in md.stdout


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_SHIM", "PYTHON"))}
    env.update({"ASCEND_SHIM": "1", "ASCEND_SHIM_BACKEND": "sim", "PYTHONPATH": os.pathsep.join([BOOTSTRAP_DIR,
                                                                                                str(site)])})
    proc = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-c",
                           "import os, importlib.util; print(importlib.util.find_spec('ascend_shim') is None, "
                           "os.environ.get('USER_SITECUSTOMIZE_RAN'))"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.split() == ["True", "yes"]
