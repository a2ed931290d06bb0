"""``ascend-shim run``: scripts, ``-m`` modules, child processes, JSON reports and the ``report`` command."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import SIM_BACKEND
from tests.subprocess_env import shim_free_env

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
    full = shim_free_env()
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
    assert all(r["active"] and r["backend"] == SIM_BACKEND and r["strict"] for r in results), results
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
        @s.patch("json:dumps", why="because", what="wraps dumps",
                 remove_when="pytest>=1: upstream fixes it")
        def dumps(ctx):
            return ctx.original
        PATCH_SETS = [s]
    '''))
    proc = run_cli(["list", "--patch-modules", "extra_sets"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "[active] extra: Extra set" in proc.stdout
    assert "why:  because" in proc.stdout and "remove when: pytest>=1: upstream fixes it" in proc.stdout
    assert "removable here: pytest " in proc.stdout  # the condition judged against the installed pytest
    removable = run_cli(["list", "--removable", "--patch-modules", "extra_sets"], cwd=tmp_path,
                        env={"PYTHONPATH": str(tmp_path)})
    assert "extra.json.dumps" in removable.stdout and "torch_cuda" not in removable.stdout
    md = run_cli(["list", "--format", "markdown", "--patch-modules", "extra_sets"], cwd=tmp_path,
                 env={"PYTHONPATH": str(tmp_path)})
    assert "| extra.json.dumps | `json:dumps` | wrap | exact | wraps dumps | `pytest>=1`: upstream fixes it |" \
        in md.stdout


GC_PROBE = '''
import gc, subprocess, sys
from ascend_shim import activation
frozen = gc.get_freeze_count()
child = subprocess.run([sys.executable, "-c", "import gc; print(gc.get_freeze_count())"], capture_output=True,
                       text=True, check=True)
print(frozen, int(child.stdout), activation.is_active())
'''


@pytest.mark.parametrize("setting", ["1", "0"])
def test_start_up_objects_are_frozen_before_the_first_line_unless_turned_off(tmp_path, setting):
    """The shim's own objects stay out of the program's full collections, in `run` and in its children; with
    ASCEND_SHIM_GC_FREEZE=0 the collector is left as Python sets it up."""
    (tmp_path / "probe.py").write_text(GC_PROBE)
    proc = run_cli(["run", "--simulate", "probe.py"], tmp_path, env={"ASCEND_SHIM_GC_FREEZE": setting,
                                                                      "ASCEND_SHIM_LOG": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    here, child, active = proc.stdout.split()
    assert active == "True"
    if setting == "1":
        assert int(here) > 5000 and int(child) > 5000  # the interpreter's and the shim's modules
    else:
        assert int(here) == 0 and int(child) == 0


def test_activating_inside_a_program_leaves_the_collector_alone():
    """Only a process the shim starts is settled: a program that calls activate() itself keeps its collector."""
    code = ("import gc, ascend_shim; ascend_shim.activate(backend='sim', inherit=False); "
            "print(gc.get_freeze_count())")
    env = shim_free_env()
    proc = subprocess.run([sys.executable, "-c", code], env=dict(env, ASCEND_SHIM_LOG="off"), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "0"
