"""SIGTERM (a preemption) and SIGINT end a job under the shim with every process's report written, and
otherwise exactly as without the shim: same exit status, the program's own handlers run."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from ascend_shim import exit_signals

from tests.conftest import LAYER, SIM_BACKEND
from tests.subprocess_env import shim_free_env

WAIT = 240  # seconds a process may take to come up (the emulator's first build, a loaded machine)


def _env(**extra) -> dict:
    env = shim_free_env()
    env.update({"OMP_NUM_THREADS": "1"}, **extra)
    return env


def _script(tmp_path, body: str = "") -> str:
    """Uses the device (so the report has something to say), says it is ready, then waits for a signal."""
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent("""\
        import os, sys, time
        import torch
        x = torch.ones(2, device="cuda") * 2
        """) + textwrap.dedent(body) + textwrap.dedent("""\
        rank = os.environ.get("RANK", "main")
        open(os.path.join(sys.argv[1], f"ready.{rank}"), "w").close()
        while True:
            time.sleep(0.05)
        """))
    return str(path)


def _as_from_a_shell() -> None:
    """The job starts with SIGTERM and SIGINT unblocked and at their default actions, as a shell starts it: a
    child inherits an ignored signal and the signal mask, which an earlier test in this worker may have changed."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def _start(tmp_path, args, **env):
    return subprocess.Popen([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report",
                             str(tmp_path / "r.json"), *args], cwd=tmp_path, env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_as_from_a_shell)


def _wait_ready(proc, tmp_path, names):
    deadline = time.monotonic() + WAIT
    while not all((tmp_path / f"ready.{n}").exists() for n in names):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the job did not come up (status {proc.returncode}):\n{err[-4000:]}")
        time.sleep(0.1)


def _end(proc):
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job did not end after the signal:\n{err[-4000:]}")


def _report(path) -> dict:
    with open(path) as fh:
        rep = json.load(fh)
    assert rep["process"]["backend"] == SIM_BACKEND and rep["process"]["sim_layer"] == LAYER, rep["process"]
    assert rep["patches"], rep
    return rep


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_writes_the_report_and_the_exit_status_is_unchanged(tmp_path, signum):
    proc = _start(tmp_path, [_script(tmp_path), str(tmp_path)])
    _wait_ready(proc, tmp_path, ["main"])
    proc.send_signal(signum)
    out, err = _end(proc)
    assert proc.returncode == -signum, err[-3000:]  # killed by the signal, as python itself would be
    _report(tmp_path / "r.json")
    assert "ascend_shim migration report" in err  # the summary, as at a normal exit
    assert err.count("ascend_shim migration report") == 1
    assert "ascend_shim/exit_signals.py" not in err  # no shim frame in a KeyboardInterrupt traceback


def test_the_programs_own_handler_still_decides(tmp_path):
    body = """\
        import signal
        def stop(signum, frame):
            print("stopping cleanly", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, stop)
        """
    proc = _start(tmp_path, [_script(tmp_path, body), str(tmp_path)])
    _wait_ready(proc, tmp_path, ["main"])
    proc.send_signal(signal.SIGTERM)
    out, err = _end(proc)
    assert proc.returncode == 3 and out == "stopping cleanly\n", err[-3000:]
    _report(tmp_path / "r.json")  # its sys.exit reached atexit


def test_a_handler_installed_before_activation_runs_after_the_report_is_written(tmp_path):
    """``activate()`` called by a program that already handles SIGTERM: the report, then its handler."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""\
        import os, signal, sys, time
        report = {str(tmp_path / "r.json")!r}
        def stop(signum, frame):
            print("report written before my handler:", os.path.exists(report), flush=True)
            os._exit(5)  # no atexit: only the signal path can have written it
        signal.signal(signal.SIGTERM, stop)
        import ascend_shim
        ascend_shim.activate("sim", report=report)
        import torch
        x = torch.ones(2, device="cuda")
        open(os.path.join({str(tmp_path)!r}, "ready.main"), "w").close()
        while True:
            time.sleep(0.05)
        """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_ready(proc, tmp_path, ["main"])
    proc.send_signal(signal.SIGTERM)
    out, err = _end(proc)
    assert proc.returncode == 5 and out == "report written before my handler: True\n", err[-3000:]
    _report(tmp_path / "r.json")


def test_a_forked_child_ends_by_the_signal_and_writes_nothing_of_its_own(tmp_path):
    """A fork-started worker (DataLoader, Pool) inherits the handler; its report would be its parent's."""
    body = """\
        import signal
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(0.05)
        time.sleep(0.5)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        print("child ended by signal", os.WIFSIGNALED(status) and os.WTERMSIG(status), flush=True)
        sys.exit(0)
        """
    proc = _start(tmp_path, [_script(tmp_path, body), str(tmp_path)])
    out, err = _end(proc)
    assert proc.returncode == 0 and out == f"child ended by signal {int(signal.SIGTERM)}\n", err[-3000:]
    assert sorted(p.name for p in tmp_path.glob("r*.json")) == ["r.json"]  # the parent's, at its exit


def test_handlers_are_given_back_on_deactivate(clean_shim):
    before = {s: signal.getsignal(s) for s in exit_signals.SIGNALS}
    mine = lambda signum, frame: None  # noqa: E731
    signal.signal(signal.SIGTERM, mine)
    try:
        clean_shim.activate("sim", inherit=False)
        assert signal.getsignal(signal.SIGTERM) is exit_signals._on_signal
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]  # python's own: KeyboardInterrupt
        clean_shim.deactivate()
        assert signal.getsignal(signal.SIGTERM) is mine
        clean_shim.activate("sim", inherit=False)
        replaced = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGTERM, replaced)  # the program's later choice stays
        clean_shim.deactivate()
        assert signal.getsignal(signal.SIGTERM) is replaced
    finally:
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.slow
def test_sigterm_to_a_torchrun_job_leaves_every_ranks_report(tmp_path):
    proc = _start(tmp_path, ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", _free_port(),
                             _script(tmp_path), str(tmp_path)])
    _wait_ready(proc, tmp_path, ["0", "1"])
    proc.send_signal(signal.SIGTERM)  # to torchrun, which passes it on to its workers
    out, err = _end(proc)
    assert proc.returncode != 0, err[-3000:]  # torchrun's own answer to a SIGTERM
    for rank in (0, 1):
        rep = _report(tmp_path / f"r.rank{rank}.json")
        assert rep["process"]["rank"] == rank


def _blocked_job(tmp_path, before: str = "", fork: str = "") -> str:
    """Uses the device, says it is ready, then waits in native code for a peer that never comes (the main
    thread never runs Python again). ``before``: code run first; ``fork``: code run just before the wait."""
    path = tmp_path / "job.py"
    path.write_text("import datetime, os, signal, socket, sys, time\n" + textwrap.dedent(before) + textwrap.dedent("""\
        import torch
        import torch.distributed as dist
        x = torch.ones(2, device="cuda") * 2
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=600))
        """) + textwrap.dedent(fork) + textwrap.dedent("""\
        open(os.path.join(sys.argv[1], "ready.main"), "w").close()
        store.wait(["a key no peer ever sets"])
        """))
    return str(path)


def _ends_within(proc, seconds: float) -> tuple[str, str]:
    """The process ends within ``seconds`` of the signal just sent."""
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still alive {seconds} s after the signal:\n{err[-3000:]}")
    return out, err


SIGNAL_TO_END = 15.0  # python itself ends in well under a second; the report's write has a budget of 5 s


def test_sigterm_ends_a_process_blocked_in_native_code_with_its_report(tmp_path):
    """A rank waiting in a rendezvous for a peer that never comes: the main thread never runs Python again."""
    proc = _start(tmp_path, [_blocked_job(tmp_path), str(tmp_path)])
    _wait_ready(proc, tmp_path, ["main"])
    time.sleep(0.5)  # into the wait
    proc.send_signal(signal.SIGTERM)
    out, err = _ends_within(proc, SIGNAL_TO_END)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    _report(tmp_path / "r.json")
    assert err.count("ascend_shim migration report") == 1


def test_sigint_with_the_default_action_ends_a_blocked_process_with_its_report(tmp_path):
    """SIGINT whose action is the default one (set before activation): as SIGTERM. Under Python's own SIGINT
    handler a process blocked in native code goes on waiting, with the shim as without it."""
    script = _blocked_job(tmp_path, before=f"""\
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        import ascend_shim
        ascend_shim.activate("sim", report={str(tmp_path / "r.json")!r})
        """)
    proc = subprocess.Popen([sys.executable, script, str(tmp_path)], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_ready(proc, tmp_path, ["main"])
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = _ends_within(proc, SIGNAL_TO_END)
    assert proc.returncode == -signal.SIGINT, err[-3000:]
    _report(tmp_path / "r.json")


def test_a_forked_child_blocked_in_native_code_ends_by_sigterm(tmp_path):
    """The child of a fork gets the handlers it had before the shim: the signal ends it at once, as without the
    shim, and its parent (which shared the shim's state) goes on."""
    fork = """\
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            print("child ended by signal", os.WIFSIGNALED(status) and os.WTERMSIG(status), flush=True)
            sys.exit(0)
        with open(os.path.join(sys.argv[1], "child"), "w") as fh:
            fh.write(str(os.getpid()))
        """
    proc = _start(tmp_path, [_blocked_job(tmp_path, fork=fork), str(tmp_path)])
    _wait_ready(proc, tmp_path, ["main"])  # written by the child, about to wait
    time.sleep(0.5)
    os.kill(int((tmp_path / "child").read_text()), signal.SIGTERM)
    out, err = _ends_within(proc, SIGNAL_TO_END)
    assert proc.returncode == 0 and out == f"child ended by signal {int(signal.SIGTERM)}\n", err[-3000:]
    assert sorted(p.name for p in tmp_path.glob("r*.json")) == ["r.json"]  # the parent's, at its exit


def test_the_programs_wakeup_fd_sees_no_trace_of_the_shims(clean_shim):
    """Event loops (asyncio, trio: it warns of any fd it finds) set their own: -1 before it, as without the
    shim; the shim's watcher listens again once the program gives its own up."""
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # pytest's own: the shim's handler goes where the default was
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        clean_shim.activate("sim", inherit=False)
        assert exit_signals._wakeup is not None and clean_shim.is_patched("signal.set_wakeup_fd")
        assert signal.set_wakeup_fd(write) == -1
        assert signal.set_wakeup_fd(-1) == write
        assert signal.set_wakeup_fd(-1) == -1  # the shim's again, unseen
        clean_shim.deactivate()
        assert signal.set_wakeup_fd(-1) == -1 and exit_signals._wakeup is None
        assert not clean_shim.is_patched("signal.set_wakeup_fd")
    finally:
        signal.signal(signal.SIGTERM, before)
        os.close(read)
        os.close(write)


def test_a_set_wakeup_fd_the_program_puts_in_place_later_stays(clean_shim):
    before, original = signal.getsignal(signal.SIGTERM), signal.set_wakeup_fd
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def theirs(fd, /, *, warn_on_full_buffer=True):
        return original(fd, warn_on_full_buffer=warn_on_full_buffer)

    try:
        clean_shim.activate("sim", inherit=False)
        signal.set_wakeup_fd = theirs
        clean_shim.deactivate()
        assert signal.set_wakeup_fd is theirs and not clean_shim.is_patched("signal.set_wakeup_fd")
    finally:
        signal.set_wakeup_fd = original
        signal.signal(signal.SIGTERM, before)
