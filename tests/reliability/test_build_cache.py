"""The emulator's build cache loads only what this user built, intact: nothing planted in a shared directory, no
lock that truncates what it points to, no half-written or damaged ``.so``, no silent wait, no raw traceback.

The cache logic runs against a tiny real extension module (compiled here in a fraction of a second) standing in
for the emulator's: ``load_or_build(name, directory, build)`` is the emulator's own entry point."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from ascend_shim.errors import ShimError
from ascend_shim.sim import _extension

from tests.subprocess_env import shim_free_env

REPO = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a file owned by another user needs root")


def _compile(name: str, out_dir: Path) -> Path:
    """A real extension module ``name`` whose init leaves a mark in ``sys`` (so a test sees that it ran)."""
    source = out_dir / f"{name}.c"
    source.write_text(textwrap.dedent(f"""
        #include <Python.h>
        static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
        PyMODINIT_FUNC PyInit_{name}(void) {{
            PySys_SetObject("{name}_ran", Py_True);
            return PyModule_Create(&def);
        }}
    """))
    so = out_dir / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", f"-I{sysconfig.get_paths()['include']}", str(source), "-o",
                    str(so)], check=True, capture_output=True)
    return so


class Builder:
    """Stands in for the compiler: leaves the probe's ``.so`` in the directory it is given (after ``delay``
    seconds) and imports it from there, as torch's loader does. ``so`` None: a build is a failure."""

    def __init__(self, name: str, so: Path | None, delay: float = 0.0, log: str | Path = ""):
        self.name, self.so, self.delay, self.log, self.dirs = name, so, delay, log, []

    def __call__(self, directory: Path):
        import importlib.util

        if self.so is None:
            raise AssertionError("built again")
        self.dirs.append(Path(directory))
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(f"build {os.getpid()}\n")
        time.sleep(self.delay)
        target = Path(directory) / f"{self.name}.so"
        shutil.copy(self.so, target)
        spec = importlib.util.spec_from_file_location(self.name, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module



class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def warnings_logged(monkeypatch):
    """The warnings the build cache logs, caught on a logger of the test's own put in the module's place: after
    earlier tests of the session (an activation stops ``ascend_shim`` propagating; libraries configure logging
    their way), neither pytest's capture nor a handler on the shared logger is sure to see them."""
    from ascend_shim import build_cache

    logger, handler = logging.Logger("ascend_shim.sim", logging.WARNING), _Lines()
    logger.addHandler(handler)
    monkeypatch.setattr(build_cache, "log", logger)
    return handler.records


@pytest.fixture
def probe(tmp_path):
    """(name, compiled .so, a cache entry directory under a fresh private root)."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    name = f"_cache_probe_{uuid.uuid4().hex[:10]}"
    src = tmp_path / "src"
    src.mkdir()
    so = _compile(name, src)
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    yield name, so, root / "torchX-0123456789abcdef"
    _forget(name)


def _forget(name: str) -> None:
    """As a new process would start: the module not loaded yet."""
    sys.modules.pop(name, None)
    if hasattr(sys, f"{name}_ran"):
        delattr(sys, f"{name}_ran")


def _plant(entry: Path, name: str, so: Path) -> None:
    """A .so with a manifest that matches it: all a planter needs to write."""
    entry.mkdir(parents=True, exist_ok=True)
    shutil.copy(so, entry / f"{name}.so")
    data = (entry / f"{name}.so").read_bytes()
    (entry / f"{name}.manifest.json").write_text(json.dumps(
        {"file": f"{name}.so", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


# -- planted code is never loaded -----------------------------------------------------------------------------
def test_a_so_planted_in_a_cache_others_can_write_is_refused(probe):
    name, so, entry = probe
    entry.parent.chmod(0o777)  # a team cache anyone can write to
    _plant(entry, name, so)
    builds = Builder(name, so)
    with pytest.raises(ShimError) as info:
        _extension.load_or_build(name, entry, builds)
    message = str(info.value)
    assert not hasattr(sys, f"{name}_ran") and builds.dirs == []  # its init never ran, nothing was built there
    assert str(entry.parent) in message and "writable by group and others" in message
    assert f"chmod go-w {entry.parent}" in message and "ASCEND_SHIM_SIM_BUILD_DIR" in message
    assert "\n" not in message


@needs_root
@pytest.mark.parametrize("planted", ["root", "entry", "so"])
def test_a_cache_item_owned_by_another_user_is_refused(probe, planted):
    name, so, entry = probe
    _plant(entry, name, so)
    path = {"root": entry.parent, "entry": entry, "so": entry / f"{name}.so"}[planted]
    os.chown(path, 54321, 54321)
    with pytest.raises(ShimError, match=f"{path}( in the emulator's build cache)? is owned by uid 54321, not by you"):
        _extension.load_or_build(name, entry, Builder(name, so))
    assert not hasattr(sys, f"{name}_ran")


def test_a_group_writable_so_in_a_private_cache_is_refused(probe):
    name, so, entry = probe
    _plant(entry, name, so)
    (entry / f"{name}.so").chmod(0o775)
    with pytest.raises(ShimError, match=r"writable by its group \(mode 0775\).*Fix: delete"):
        _extension.load_or_build(name, entry, Builder(name, so))
    assert not hasattr(sys, f"{name}_ran")


def test_a_symlink_at_the_lock_name_is_not_followed(probe):
    name, so, entry = probe
    victim = entry.parent.parent / "victim.txt"
    victim.write_text("precious\n")
    lock = entry.parent / f"{entry.name}.lock"
    lock.symlink_to(victim)
    builds = Builder(name, so)
    with pytest.raises(ShimError, match=f"build lock {lock} is a symbolic link.*rm {lock}"):
        _extension.load_or_build(name, entry, builds)
    assert victim.read_text() == "precious\n" and builds.dirs == []


# -- what is loaded is what was built ---------------------------------------------------------------------------
def test_a_build_happens_in_a_private_directory_and_is_published_whole(probe):
    name, so, entry = probe
    seen = []

    def build(directory):
        seen.append((entry / f"{name}.so").exists())
        return Builder(name, so)(directory)

    old_umask = os.umask(0o002)  # a permissive umask must not make the published .so group-writable
    try:
        module = _extension.load_or_build(name, entry, build)
    finally:
        os.umask(old_umask)
    assert module.__name__ == name and sys.modules[name] is module
    assert seen == [False]
    assert sorted(p.name for p in entry.iterdir()) == [f"{name}.manifest.json", f"{name}.so"]
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name, f"{entry.name}.lock"]  # no leftovers
    assert stat.S_IMODE((entry / f"{name}.so").stat().st_mode) & 0o022 == 0
    manifest = json.loads((entry / f"{name}.manifest.json").read_text())
    assert manifest["size"] == so.stat().st_size and len(manifest["sha256"]) == 64

    _forget(name)  # the next process loads it without a build
    again = Builder(name, so)
    assert _extension.load_or_build(name, entry, again).__name__ == name and again.dirs == []


def _new_process(name: str, entry: Path, so: Path | None, delay: float = 0.0, log: Path | None = None,
                 started: Path | None = None) -> subprocess.Popen:
    """Another process loading the probe from ``entry`` (building it with :class:`Builder` when it must); it
    prints ``OK <name> <whether its init ran>``. ``started`` is written just before it loads."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from ascend_shim.sim import _extension
        from tests.reliability.test_build_cache import Builder
        so = {str(so or "")!r}
        build = Builder({name!r}, Path(so) if so else None, {delay}, {str(log or "")!r})
        if {str(started or "")!r}:
            Path({str(started)!r}).write_text("1")
        module = _extension.load_or_build({name!r}, Path({str(entry)!r}), build)
        print("OK", module.__name__, getattr(sys, {name + "_ran"!r}, False))
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_a_process_starting_during_a_link_waits_for_the_whole_file(probe, tmp_path):
    """The linker writes its output in place: a process starting then must not import a half-written file."""
    name, so, entry = probe
    started = tmp_path / "started"
    results = []

    def slow_link(directory):
        target = Path(directory) / f"{name}.so"
        data = so.read_bytes()
        target.write_bytes(data[: len(data) // 2])  # half-way through the link
        proc = _new_process(name, entry, None, started=started)
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the other process is now loading, or waiting
        results.append(proc)
        return Builder(name, so)(directory)  # the link completes

    _extension.load_or_build(name, entry, slow_link)
    out, err = results[0].communicate(timeout=120)
    assert results[0].returncode == 0, err[-2000:]
    assert out.strip() == f"OK {name} True"


def _damage(kind: str, entry: Path, name: str, so: Path) -> None:
    entry.mkdir()
    target = entry / f"{name}.so"
    if kind == "empty, no manifest":
        target.write_bytes(b"")
    elif kind == "truncated":
        _plant(entry, name, so)
        target.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    elif kind == "not the built file":
        _plant(entry, name, so)
        target.write_bytes(so.read_bytes()[:-1] + b"\x01")
    elif kind == "manifest unreadable":
        _plant(entry, name, so)
        (entry / f"{name}.manifest.json").write_text("{")
    elif kind == "matches its manifest but does not import":
        garbage = entry.parent / "garbage.so"
        garbage.write_bytes(b"\x7fELF" + b"\0" * 60)
        _plant(entry, name, garbage)


@pytest.mark.parametrize("kind", ["empty, no manifest", "truncated", "not the built file", "manifest unreadable",
                                  "matches its manifest but does not import"])
def test_a_damaged_entry_is_rebuilt_with_one_line_saying_so(probe, kind, warnings_logged):
    name, so, entry = probe
    _damage(kind, entry, name, so)
    builds = Builder(name, so)
    module = _extension.load_or_build(name, entry, builds)
    assert module.__name__ == name and len(builds.dirs) == 1
    lines = [r.getMessage() for r in warnings_logged]
    assert len(lines) == 1 and "damaged" in lines[0] and "rebuilding it" in lines[0], lines
    assert str(entry) in lines[0]
    _forget(name)  # and the rebuilt entry loads as it is
    again = Builder(name, so)
    assert _extension.load_or_build(name, entry, again).__name__ == name and again.dirs == []


def test_a_truncated_so_in_a_new_process_is_rebuilt_not_a_crash(probe, tmp_path):
    """Mapping a truncated shared object kills the process with SIGBUS, before any Python error handling."""
    name, so, entry = probe
    _extension.load_or_build(name, entry, Builder(name, so))
    published = entry / f"{name}.so"
    data = published.read_bytes()
    published.unlink()  # a new file: this process has the built one mapped
    published.write_bytes(data[: len(data) // 2])
    proc = _new_process(name, entry, so)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert out.strip() == f"OK {name} True"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"damaged ({published} has {so.stat().st_size // 2} bytes, its build wrote {so.stat().st_size})" \
        in lines[0] and lines[0].endswith("rebuilding it"), lines


# -- waiting says what for, and ends -----------------------------------------------------------------------------
def _hold_lock(entry: Path):
    import fcntl

    fh = open(entry.parent / f"{entry.name}.lock", "a+")  # noqa: SIM115  (held: the caller closes it to unlock)
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.seek(0), fh.truncate(), fh.write(f"{os.getpid()}\n"), fh.flush()
    return fh


def test_a_wait_for_a_stuck_build_says_what_it_waits_for_and_gives_up(probe, monkeypatch, warnings_logged):
    name, so, entry = probe
    monkeypatch.setenv("ASCEND_SHIM_SIM_BUILD_TIMEOUT", "4")
    holder = _hold_lock(entry)
    outcome = []

    def wait():
        try:
            outcome.append(_extension.load_or_build(name, entry, Builder(name, so)))
        except Exception as exc:  # noqa: BLE001 (the outcome is checked below)
            outcome.append(exc)

    try:
        start = time.monotonic()
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(30)
        took = time.monotonic() - start
    finally:
        holder.close()
    lock = entry.parent / f"{entry.name}.lock"
    assert outcome and isinstance(outcome[0], ShimError), outcome
    assert 4 <= took < 10
    message = str(outcome[0])
    assert f"gave up after 4 s waiting for process {os.getpid()}" in message and str(lock) in message
    assert "ASCEND_SHIM_SIM_BUILD_TIMEOUT" in message
    lines = [r.getMessage() for r in warnings_logged]
    assert len(lines) == 1 and f"waiting for process {os.getpid()}" in lines[0] and str(lock) in lines[0], lines


@pytest.mark.slow
def test_two_processes_on_an_empty_cache_one_builds_the_other_waits_saying_so_then_loads(probe, tmp_path):
    name, so, entry = probe
    log_file = tmp_path / "builds.log"
    procs = [_new_process(name, entry, so, delay=5, log=log_file) for _ in range(2)]  # a build that takes a while
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == f"OK {name} True"
    builder = int(log_file.read_text().split()[1])
    assert log_file.read_text().count("build") == 1  # one build ran
    waiter_err = [err for proc, (out, err) in zip(procs, results, strict=True) if proc.pid != builder][0]
    lock = entry.parent / f"{entry.name}.lock"
    assert f"waiting for process {builder} to finish building the emulator's {name} (lock {lock}" in waiter_err


# -- an unusable location is one line ---------------------------------------------------------------------------
def test_an_unusable_cache_location_is_one_line_naming_the_variable(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    env = shim_free_env()
    env.update(PYTHONPATH=str(REPO), ASCEND_SHIM_SIM_BUILD_DIR=str(blocker / "cache"))
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"build cache {blocker / 'cache'} cannot be used" in lines[0]
    assert "ASCEND_SHIM_SIM_BUILD_DIR" in lines[0]


# -- doctor tells these states apart -----------------------------------------------------------------------------
def _doctor(root: Path):
    from ascend_shim import doctor

    e = doctor.Environment(env={"ASCEND_SHIM_SIM_BUILD_DIR": str(root), "PATH": os.environ.get("PATH", "")},
                           simulate=True, patch_sets=[])
    _, checks = doctor.run_checks(e)
    return [c for c in checks if c.name == "sim-cache"], doctor.exit_code(checks)


def _entry(root: Path, ext) -> Path:
    return root / _extension.cache_key(ext)


def test_doctor_reports_an_empty_cache_as_built_on_first_use(tmp_path):
    checks, code = _doctor(tmp_path / "cache")
    assert code == 0 and [c.verdict for c in checks] == ["info", "info"]
    assert "not built yet" in checks[0].message


def test_doctor_fails_on_a_cache_others_can_write(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o777)
    checks, code = _doctor(root)
    assert code == 1 and len(checks) == 1 and checks[0].verdict == "FAIL"  # said once for both extensions
    assert str(root) in checks[0].message and "writable by group and others" in checks[0].message
    assert checks[0].fix.startswith("set ASCEND_SHIM_SIM_BUILD_DIR")


@needs_root
def test_doctor_fails_on_a_cached_build_owned_by_another_user(tmp_path):
    root = tmp_path / "cache"
    entry = _entry(root, _extension.SIM)
    entry.mkdir(parents=True)
    (entry / f"{_extension.SIM.name}.so").write_bytes(b"planted")
    os.chown(entry / f"{_extension.SIM.name}.so", 54321, 54321)
    checks, code = _doctor(root)
    assert code == 1 and checks[0].verdict == "FAIL" and "owned by uid 54321" in checks[0].message
    assert checks[0].fix == f"delete {entry} (it is rebuilt on the next run)"


def test_doctor_warns_that_a_damaged_entry_will_be_rebuilt(tmp_path):
    root = tmp_path / "cache"
    entry = _entry(root, _extension.SIM)
    entry.mkdir(parents=True)
    (entry / f"{_extension.SIM.name}.so").write_bytes(b"")
    checks, code = _doctor(root)
    assert code == 0 and [c.verdict for c in checks] == ["warn", "info"]
    assert "damaged cached build" in checks[0].message and "the next run rebuilds it" in checks[0].message


def test_doctor_fails_on_a_location_that_cannot_hold_a_build(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    checks, code = _doctor(blocker / "cache")
    assert code == 1 and len(checks) == 1 and checks[0].verdict == "FAIL"
    assert "cannot be used" in checks[0].message and "ASCEND_SHIM_SIM_BUILD_DIR" in checks[0].fix


def test_doctor_fails_on_a_link_planted_at_a_build_lock(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    lock = root / f"{_extension.cache_key(_extension.SIM)}.lock"
    lock.symlink_to(tmp_path / "victim")
    checks, code = _doctor(root)
    assert code == 1 and checks[0].verdict == "FAIL" and checks[0].fix == f"delete it (rm {lock})"
    assert f"build lock {lock} is a symbolic link" in checks[0].message


def test_the_wait_bound_is_a_checked_setting():
    from ascend_shim import config
    from ascend_shim.errors import ConfigError

    assert config.setting("sim_build_timeout", {}) == 1200
    assert config.setting("sim_build_timeout", {"ASCEND_SHIM_SIM_BUILD_TIMEOUT": " 30 "}) == 30
    for raw in ("ten", "0", "-5", "1e3"):
        with pytest.raises(ConfigError, match="ASCEND_SHIM_SIM_BUILD_TIMEOUT"):
            config.check_environment({"ASCEND_SHIM_SIM_BUILD_TIMEOUT": raw})


def test_doctor_verifies_an_intact_entry(tmp_path, probe):
    name, so, _ = probe
    root = tmp_path / "cache"
    entry = _entry(root, _extension.SIM)
    root.mkdir(exist_ok=True)
    _plant(entry, _extension.SIM.name, so)
    checks, code = _doctor(root)
    assert code == 0 and checks[0].verdict == "ok" and "cached build verified" in checks[0].message
