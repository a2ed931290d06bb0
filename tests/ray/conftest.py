"""A local Ray cluster on 127.0.0.1 started on its own (``ray start --head``), with or without the shim, and
stopped by the test: only the processes of this cluster (found by its own temp dir) are ended."""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from ascend_shim.activation import BOOTSTRAP_DIR

from tests.subprocess_env import shim_free_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra) -> dict:
    """The environment without any activation (the test runner's own is not inherited)."""
    env = shim_free_env("RAY_")
    env.pop("PYTHONPATH", None)
    # a private 127.0.0.1 cluster: no auth token (the token file in the home directory is shared by every cluster
    # started on this machine, so a cluster started meanwhile elsewhere would lock this test's driver out)
    env.update({"PYTHONPATH": REPO, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                "HF_HUB_OFFLINE": "1"})
    env.update(extra)
    return env


def _cluster_pids(temp_dir: str) -> list[int]:
    import psutil

    found, me = [], os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        try:
            if any(temp_dir in part for part in proc.info["cmdline"] or ()):
                found.append(proc.info["pid"])
        except (psutil.Error, TypeError):
            continue
    return found


def _stop(temp_dir: str) -> None:
    import psutil

    procs = []
    for pid in _cluster_pids(temp_dir):
        try:
            proc = psutil.Process(pid)
            procs += [proc] + proc.children(recursive=True)
        except psutil.Error:
            pass
    for proc in procs:
        with contextlib.suppress(psutil.Error):  # already gone
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture
def ray_head():
    """``start(shim: bool) -> address``: a head node on 127.0.0.1 with its own temp dir (short: Ray's socket
    paths must stay under the Unix limit)."""
    temp_dirs = []

    def start(shim: bool) -> str:
        temp_dir = tempfile.mkdtemp(prefix="rayt", dir="/tmp")
        temp_dirs.append(temp_dir)
        port = free_port()
        env = clean_env()
        if shim:  # a cluster set up by hand with the shim: ASCEND_SHIM=1 and the bootstrap on PYTHONPATH
            env.update(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND="sim", ASCEND_SHIM_LOG="error",
                       PYTHONPATH=os.pathsep.join([BOOTSTRAP_DIR, REPO]))
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port", str(port),
               "--node-ip-address", "127.0.0.1", "--temp-dir", temp_dir, "--num-cpus", "2",
               "--include-dashboard", "false", "--disable-usage-stats"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return f"127.0.0.1:{port}"

    yield start
    for temp_dir in temp_dirs:
        _stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def run_driver(tmp_path, source: str, *args, timeout=300, **env):
    """Run ``source`` as a script under ``ascend_shim run --backend sim``; its last stdout line is JSON."""
    import json

    script = tmp_path / "driver.py"
    script.write_text(source)
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--backend", "sim", str(script), *args],
                          cwd=tmp_path, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc
