"""Every worker a launcher starts from an activated process runs its main script the way ``run`` does.

The fixture ``train_ddp.py`` gates ``model.cuda()`` and its DDP wrap on ``device.type == "cuda"`` (False on an
NPU unless the worker's main script is rewritten); every rank writes what it saw. A CPU/gloo run of the same
script (no shim) gives the weights the NPU ranks must agree on.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.subprocess_env import run_plain_torch, shim_free_env

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _env(extra=None):
    env = shim_free_env()
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": FIXTURES})
    env.update(extra or {})
    return env


def shim_run(args, cwd=FIXTURES, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *args], cwd=cwd,
                          env=_env(env), capture_output=True, text=True, timeout=timeout)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _outputs(out_dir, n):
    results = []
    for r in range(n):
        with open(os.path.join(out_dir, f"out.rank{r}.json")) as fh:
            results.append(json.load(fh))
    return results


@pytest.fixture(scope="module")
def cpu_weight_sum(tmp_path_factory):
    """The same job on the CPU with gloo, without the shim: what every NPU rank must end with."""
    out = tmp_path_factory.mktemp("cpu")
    proc = run_plain_torch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                            "--master_port", str(_free_port()), "train_ddp.py", str(out)],
                           attempts=3, cwd=FIXTURES, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu = _outputs(out, 2)
    assert [r["gpu_branch"] for r in cpu] == [False, False] and cpu[0]["device"] == "cpu"
    return cpu[0]["weight_sum"]


def _check_ranks(results, cpu_weight_sum, world):
    assert [r["rank"] for r in results] == list(range(world))
    for r in results:
        assert r["world"] == world
        assert r["gpu_branch"] is True, r              # the worker's own main script was rewritten
        assert r["device"].startswith("npu:"), r        # so model.cuda() ran: the model is on the NPU
        assert r["backend"] == "nccl"                   # user code asked for nccl and is told nccl
        assert r["weight_sum"] == pytest.approx(cpu_weight_sum, rel=1e-5, abs=1e-6)


def _console_script(tmp_path, name, module):
    """A console script like pip writes, whose shebang is this interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / name
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return str(bindir)


LAUNCHERS = {
    "torch.distributed.run": lambda port, out: ["-m", "torch.distributed.run", "--nproc_per_node", "2",
                                                "--master_port", port, "train_ddp.py", out],
    "torch.distributed.launch": lambda port, out: ["-m", "torch.distributed.launch", "--nproc_per_node", "2",
                                                   "--master_port", port, "--use-env", "train_ddp.py", out],
    "torchrun-module-target": lambda port, out: ["-m", "torch.distributed.run", "--nproc_per_node", "2",
                                                 "--master_port", port, "-m", "mypkg.train", out],
    "accelerate": lambda port, out: ["-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines",
                                     "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                                     port, "train_ddp.py", out],
    "deepspeed": lambda port, out: ["-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", port,
                                    "train_ddp.py", out],
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_launcher_workers_run_the_rewritten_main(launcher, tmp_path, cpu_weight_sum):
    out = tmp_path / "out"
    out.mkdir()
    proc = shim_run(["--report", str(tmp_path / "r.json"), *LAUNCHERS[launcher](str(_free_port()), str(out))])
    assert proc.returncode == 0, proc.stderr[-4000:]
    # a plain `python -m torch.distributed.run` prints no warning of its module imported before it ran
    assert "found in sys.modules" not in proc.stderr, proc.stderr[-4000:]
    results = _outputs(out, 2)
    _check_ranks(results, cpu_weight_sum, 2)
    if launcher == "torchrun-module-target":
        assert all(r["module_gate"] is True and r["module_spec"] == "mypkg.train" for r in results)
    else:
        assert all(r["main"] == "__main__" and r["file"] == os.path.join(FIXTURES, "train_ddp.py") for r in results)
    for rank in range(2):  # each worker's report lists its rewritten sites
        report = json.loads((tmp_path / f"r.rank{rank}.json").read_text())
        sites = {(os.path.basename(e["file"]), e["line"]) for e in report["events"] if e["category"] == "rewritten"}
        assert ("train_ddp.py", 17) in sites, report["events"]
        if launcher == "torchrun-module-target":
            assert ("train.py", 9) in sites


SNIPPET = 'import torch\ndevice = torch.device("cuda"); print("GATE", device.type == "cuda")\n'


@pytest.mark.slow
def test_a_launchers_one_worker_without_a_rank_prints_the_summary(tmp_path):
    """accelerate launch --num_processes 1 starts one worker and sets no RANK: that worker prints the summary,
    once (the launcher leaves it to its workers)."""
    (tmp_path / "train.py").write_text(SNIPPET)
    proc = shim_run(["-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
                     "--mixed_precision", "no", "--dynamo_backend", "no", "train.py"], cwd=tmp_path)
    assert proc.returncode == 0 and "GATE True" in proc.stdout, proc.stderr[-3000:]
    assert proc.stderr.count("ascend_shim migration report") == 1, proc.stderr[-3000:]
    assert "train.py:2" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_torchrun_console_script_snippet_prints_true_in_every_worker(tmp_path):
    (tmp_path / "train.py").write_text(SNIPPET)
    bindir = _console_script(tmp_path, "torchrun", "torch.distributed.run")
    env = {"PATH": bindir + os.pathsep + os.environ["PATH"]}
    proc = shim_run(["--report", "r.json", "torchrun", "--nproc_per_node", "2", "--master_port", str(_free_port()),
                     "train.py"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # two workers share the pipe, so their words may interleave: count them, not lines
    out = proc.stdout
    assert out.count("GATE") == 2 and out.count("True") == 2 and "False" not in out, out
    for rank in range(2):
        report = json.loads((tmp_path / f"r.rank{rank}.json").read_text())
        assert [(e["line"], e["api"]) for e in report["events"] if e["category"] == "rewritten"] == \
            [(2, 'device.type == "cuda"')]
        assert any(n.startswith("user code: ") and str(tmp_path) in n for n in report["notes"]), report["notes"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["run", "torchrun-worker"])
def test_spawned_children_rewrite_the_main_functions(tmp_path, where):
    """torch.multiprocessing.spawn and multiprocessing spawn re-import the main script as __mp_main__, under
    ``run`` and in a launcher's worker alike."""
    out = tmp_path / "out"
    out.mkdir()
    launcher = [] if where == "run" else ["-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port",
                                          str(_free_port())]
    proc = shim_run([*launcher, "spawner.py", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(got) == ["mp0.json", "mp1.json", "parent.json", "tmp0.json", "tmp1.json"]
    assert all(v["gate"] is True for v in got.values()), got
    assert got["parent.json"]["codes"] == [0, 0]
    assert {got[k]["main"] for k in got if k != "parent.json"} == {"__mp_main__"}


@pytest.mark.slow
def test_two_torchrun_agents_on_localhost_give_four_workers_that_agree(tmp_path, cpu_weight_sum):
    out = tmp_path / "out"
    out.mkdir()
    port = str(_free_port())
    agents = [subprocess.Popen(
        [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--log-level", "off",
         "--report", str(tmp_path / f"node{node}.json"), "-m", "torch.distributed.run", "--nnodes", "2",
         "--node-rank", str(node), "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         f"127.0.0.1:{port}", "--rdzv-id", "shimtest", "train_ddp.py", str(out)],
        cwd=FIXTURES, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    try:
        errs = [a.communicate(timeout=400)[1] for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(e[-3000:] for e in errs)
    results = _outputs(out, 4)
    assert [r["rank"] for r in results] == [0, 1, 2, 3] and {r["world"] for r in results} == {4}
    for r in results:
        assert r["gpu_branch"] is True and r["device"].startswith("npu:"), r
    assert len({round(r["weight_sum"], 6) for r in results}) == 1   # DDP kept the 4 replicas equal
    reports = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("node"))
    assert sum(".rank" in n for n in reports) == 4, reports


WORKER_PROBE = textwrap.dedent('''\
    import json, sys
    print(json.dumps({"file": __file__, "spec": repr(__spec__), "package": __package__, "name": __name__,
                      "loader": type(__loader__).__name__, "argv": sys.argv, "path0": sys.path[0],
                      "main_is_globals": sys.modules["__main__"].__dict__ is globals(),
                      "gate": "cuda" == __import__("os").environ.get("PROBE_DEVICE", "cuda")}))
    if "--fail" in sys.argv:
        def inner():
            raise ValueError("boom")
        inner()
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    ''')


def _bootstrap_env(**extra):
    from ascend_shim.activation import BOOTSTRAP_DIR

    return _env({"ASCEND_SHIM": "1", "ASCEND_SHIM_BACKEND": "sim", "ASCEND_SHIM_LOG": "off",
                 "PYTHONPATH": BOOTSTRAP_DIR, **extra})


@pytest.mark.parametrize("argv", [["probe.py", "a", "3"], ["./probe.py", "--fail"], ["-P", "probe.py", "3"]])
def test_an_activated_child_runs_its_script_like_python(tmp_path, argv):
    """Same module attributes, argv, sys.path[0], exit status and traceback as plain python; only the rewrite
    differs (the probe's ``"cuda" == <npu>`` comparison is rewritten, so it holds for "npu")."""
    (tmp_path / "probe.py").write_text(WORKER_PROBE)
    # the same sys.path in both (the bootstrap on PYTHONPATH does nothing without ASCEND_SHIM=1)
    plain = subprocess.run([sys.executable, *argv], cwd=tmp_path,
                           env=_bootstrap_env(PROBE_DEVICE="npu", ASCEND_SHIM="0"),
                           capture_output=True, text=True, timeout=120)
    shim = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=_bootstrap_env(PROBE_DEVICE="npu"),
                          capture_output=True, text=True, timeout=120)
    assert shim.returncode == plain.returncode == (3 if argv[-1] == "3" else 1)
    p, s = json.loads(plain.stdout), json.loads(shim.stdout)
    assert p.pop("gate") is False and s.pop("gate") is True
    assert s == p
    assert s["spec"] == "None" and (s["path0"] == str(tmp_path)) == ("-P" not in argv)
    if "--fail" in argv:
        assert shim.stderr.strip().splitlines() == plain.stderr.strip().splitlines()
        assert shim.stderr.splitlines()[1].startswith(f'  File "{tmp_path}/./probe.py", line 9, in <module>')


def test_c_programs_are_not_claimed(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, ascend_shim.entry as e; print(e._armed, "
                           "e._main_path_hook in sys.path_hooks)"], cwd=tmp_path, env=_bootstrap_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["{}", "False"], proc.stderr


def test_rewrite_off_runs_the_script_plainly(tmp_path):
    (tmp_path / "probe.py").write_text(WORKER_PROBE)
    proc = subprocess.run([sys.executable, "probe.py"], cwd=tmp_path,
                          env=_bootstrap_env(PROBE_DEVICE="npu", ASCEND_SHIM_REWRITE="0"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gate"] is False
