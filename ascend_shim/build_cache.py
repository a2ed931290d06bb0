"""The emulator's build cache: a compiled extension is loaded from it only when this user built it, intact.

The root is ``ASCEND_SHIM_SIM_BUILD_DIR`` (default ``~/.cache/ascend_shim/sim``). An entry is the directory
``<root>/<key>`` holding ``<name>.so`` and ``<name>.manifest.json`` (the size and sha256 its build produced);
``<root>/<key>.lock`` serializes the builds of that entry across processes.
Every rule below answers a way the cache could hand a process code nobody here built, or break every later run:

* the root, the entry directory, the manifest and the ``.so`` must belong to this user and be writable by
  nobody else (a shared or planted cache): else the run stops with one line naming the path and the fix;
* a ``.so`` is imported only when it matches its manifest; a mismatch, a missing manifest or an import that
  fails is a damaged entry, rebuilt with one line saying so (a truncated ``.so`` would otherwise SIGBUS);
* a build runs in a fresh private directory and its ``.so`` is renamed into place, so no process ever sees a
  half-written file; existence is decided under the lock, or by a file that matches its manifest;
* the lock is opened without following links or truncating; it must be this user's plain file, in which the
  holder writes its pid (:func:`hold`; ``fetch-torch-npu`` publishes under the same discipline);
* a process waiting for another's build says what it waits for after a few seconds and gives up after
  ``ASCEND_SHIM_SIM_BUILD_TIMEOUT`` seconds;
* a location that cannot hold a build is one line naming ``ASCEND_SHIM_SIM_BUILD_DIR``; :func:`check_location`
  says so when the shim activates, before the program runs.

:func:`inspect` judges an entry without changing anything (``doctor`` reports it); :func:`load_or_build` acts.
This module does not import torch, so that activation can check the location at no cost.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from collections.abc import Callable, Iterator, Mapping

from .config import setting
from .errors import ShimError

log = logging.getLogger("ascend_shim.sim")

LOCATION_VAR = "ASCEND_SHIM_SIM_BUILD_DIR"
TIMEOUT_VAR = "ASCEND_SHIM_SIM_BUILD_TIMEOUT"
#: seconds a process waits for another's build before it says so
WAIT_NOTICE_AFTER = 3.0
_POLL = 0.2
_BUILD_PREFIX = "build-"  # a build's private directory: <root>/.<key>.build-XXXX


class UnsafeCacheError(ShimError):
    """Something in the build cache belongs to another user or can be written by others: nothing is loaded."""


class CacheLocationError(ShimError):
    """The build cache's location cannot hold a build (it cannot be created or written)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One extension's place in the cache."""

    directory: Path  # <root>/<key>
    name: str        # the module name, also the .so's stem

    @property
    def root(self) -> Path:
        return self.directory.parent

    @property
    def so(self) -> Path:
        return self.directory / f"{self.name}.so"

    @property
    def manifest(self) -> Path:
        return self.directory / f"{self.name}.manifest.json"

    @property
    def lock(self) -> Path:
        return self.root / f"{self.directory.name}.lock"

    @property
    def lock_file(self) -> LockFile:
        return LockFile(self.lock, "the emulator's build lock", f"building the emulator's {self.name}", TIMEOUT_VAR)


@dataclasses.dataclass(frozen=True)
class LockFile:
    """A lock file that serializes one task across processes (:func:`hold`), and how messages name it."""

    path: Path
    label: str              # what it is: "the emulator's build lock"
    task: str               # what its holder does, for those that wait: "building the emulator's sim_core"
    wait_setting: str = ""  # the variable that sets how long a process waits ("" when none does)


@dataclasses.dataclass(frozen=True)
class State:
    """What an entry is: ``ok`` (loadable as is), ``missing`` (built on first use), ``damaged`` (rebuilt),
    ``unsafe`` (refused) or ``unusable`` (no build can be stored there); ``detail`` says why in one line."""

    status: str
    detail: str = ""


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The cache's root for the environment ``environ`` (default: this process's)."""
    env = os.environ if environ is None else environ
    root = setting("sim_build_dir", env)
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return Path(root) if root else home / ".cache" / "ascend_shim" / "sim"


# -- judging -------------------------------------------------------------------------------------------------
def _unsafe(label: str, st: os.stat_result, fix: str) -> State | None:
    """``unsafe`` when the item ``label`` names (stat ``st``) is another user's or writable by group or others."""
    uid = os.geteuid()
    if st.st_uid != uid:
        return State("unsafe", f"{label} is owned by uid {st.st_uid}, not by you (uid {uid}): the emulator does not "
                               f"trust it. Fix: {fix}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group and others" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH else \
            "its group" if st.st_mode & stat.S_IWGRP else "others"
        return State("unsafe", f"{label} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): the emulator "
                               f"does not trust it. Fix: {fix}")
    return None


def _in_cache(path: Path) -> str:
    return f"{path} in the emulator's build cache"


def _root_fix(root: Path) -> str:
    return f"set {LOCATION_VAR} to a directory of your own, or `chmod go-w {root}` if it is yours and nothing " \
           f"was planted in it"


def _entry_fix(entry: Entry) -> str:
    return f"delete {entry.directory} (it is rebuilt on the next run)"


def _lock_fix(lock: LockFile) -> str:
    return f"delete it (rm {lock.path})"


def _bad_lock(lock: LockFile, st: os.stat_result) -> State:
    what = "a symbolic link: it is not followed" if stat.S_ISLNK(st.st_mode) else \
        "not a plain file of its own: it is not used"
    return State("unsafe", f"{lock.label} {lock.path} is {what}. Fix: {_lock_fix(lock)}")


def _unusable(root: Path, reason: str) -> State:
    return State("unusable", f"the emulator's build cache {root} cannot be used ({reason}). Fix: set "
                             f"{LOCATION_VAR} to a writable directory of your own")


def inspect_root(root: Path) -> State:
    """``ok``, ``missing`` (can be created), ``readonly`` (loads only), ``unsafe`` or ``unusable``."""
    try:
        st = os.stat(root)  # a link to a directory of the user's own is fine: its target is judged
    except FileNotFoundError:
        parent = root.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            return _unusable(root, f"{parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            return _unusable(root, f"{parent} is not writable")
        return State("missing", f"{root} does not exist yet")
    except OSError as exc:
        return _unusable(root, exc.strerror or str(exc))
    if not stat.S_ISDIR(st.st_mode):
        return _unusable(root, "not a directory")
    unsafe = _unsafe(f"the emulator's build cache {root}", st, _root_fix(root))
    if unsafe:
        return unsafe
    if not os.access(root, os.W_OK | os.X_OK):
        return State("readonly", f"{root} is not writable")
    return State("ok")


def _digest(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _inspect_files(entry: Entry) -> State:
    try:
        st = os.lstat(entry.directory)
    except FileNotFoundError:
        return State("missing", f"{entry.directory} is not built yet")
    if not stat.S_ISDIR(st.st_mode):
        return State("damaged", f"{entry.directory} is not a directory")
    unsafe = _unsafe(_in_cache(entry.directory), st, _entry_fix(entry))
    if unsafe:
        return unsafe
    stats = {}
    for path in (entry.manifest, entry.so):
        try:
            stats[path] = os.lstat(path)
        except FileNotFoundError:
            continue
        unsafe = _unsafe(_in_cache(path), stats[path], _entry_fix(entry))
        if unsafe:
            return unsafe
    if entry.so in stats and entry.manifest not in stats:
        return State("damaged", f"{entry.so} has no record of its build beside it (an earlier version built it, "
                                f"or its build was interrupted)")
    for path in (entry.manifest, entry.so):
        if path not in stats:
            return State("damaged", f"{path} is missing")
        if not stat.S_ISREG(stats[path].st_mode):
            return State("damaged", f"{path} is not a regular file")
    try:
        recorded = json.loads(entry.manifest.read_text())
        size, digest = int(recorded["size"]), str(recorded["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return State("damaged", f"{entry.manifest} is unreadable")
    if stats[entry.so].st_size != size:
        return State("damaged", f"{entry.so} has {stats[entry.so].st_size} bytes, its build wrote {size}")
    if _digest(entry.so)[1] != digest:
        return State("damaged", f"{entry.so} is not the file its build wrote (sha256 differs)")
    return State("ok")


def inspect(entry: Entry) -> State:
    """Judge ``entry`` without changing anything on disk."""
    root = inspect_root(entry.root)
    if root.status in ("unsafe", "unusable", "missing"):
        return root if root.status != "missing" else State("missing", f"{entry.directory} is not built yet")
    files = _inspect_files(entry)
    if files.status in ("missing", "damaged"):  # a build is due: its lock must be usable
        if root.status == "readonly":
            return _unusable(entry.root, f"not writable, and {files.detail}")
        try:
            lock = os.lstat(entry.lock)
        except FileNotFoundError:
            return files
        if not stat.S_ISREG(lock.st_mode) or lock.st_nlink != 1:
            return _bad_lock(entry.lock_file, lock)
        return _unsafe(f"the emulator's build lock {entry.lock}", lock, _lock_fix(entry.lock_file)) or files
    return files


# -- acting --------------------------------------------------------------------------------------------------
def _import_built(so_path: Path, name: str | None = None) -> ModuleType:
    name = name or so_path.stem
    spec = importlib.util.spec_from_file_location(name, so_path)
    if spec is None or spec.loader is None:  # not a file name an import loader knows (a built extension is)
        raise ImportError(f"{so_path} is not an importable extension module", name=name, path=str(so_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


def _acquire(fd: int, lock: LockFile, timeout: float) -> None:
    start = time.monotonic()
    noticed = False
    setting_hint = f", {lock.wait_setting}" if lock.wait_setting else ""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the OS even if this process dies
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited >= timeout:
            how_long = f"; {lock.wait_setting} sets how long to wait" if lock.wait_setting else ""
            raise ShimError(f"gave up after {timeout:g} s waiting for {_holder(fd)} to finish {lock.task} (lock "
                            f"{lock.path}): if that process is stuck, end it{how_long}")
        if not noticed and waited >= WAIT_NOTICE_AFTER:
            log.warning("waiting for %s to finish %s (lock %s; giving up after %g s%s)", _holder(fd), lock.task,
                        lock.path, timeout, setting_hint)
            noticed = True
        time.sleep(_POLL)


@contextlib.contextmanager
def hold(lock: LockFile, timeout: float, unusable: Callable[[str], ShimError]) -> Iterator[None]:
    """Hold ``lock``, waiting at most ``timeout`` seconds for its holder; the holder's pid is written in it for the
    processes that wait. ``unusable(reason)`` is the error raised when the lock file cannot be opened."""
    try:
        fd = os.open(lock.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeCacheError(_bad_lock(lock, os.lstat(lock.path)).detail) from None
        raise unusable(f"cannot open {lock.path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise UnsafeCacheError(_bad_lock(lock, st).detail)
        unsafe = _unsafe(f"{lock.label} {lock.path}", st, _lock_fix(lock))
        if unsafe:
            raise UnsafeCacheError(unsafe.detail)
        _acquire(fd, lock, timeout)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _build_lock(entry: Entry, timeout: float) -> contextlib.AbstractContextManager[None]:
    """Hold the entry's build lock."""
    return hold(entry.lock_file, timeout, lambda why: CacheLocationError(_unusable(entry.root, why).detail))


def _write_manifest(entry: Entry, size: int, digest: str) -> None:
    tmp = entry.directory / f".{entry.manifest.name}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as fh:
        json.dump({"file": entry.so.name, "size": size, "sha256": digest}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, entry.manifest)


def _build_into_place(entry: Entry, build: Callable[[Path], ModuleType]) -> ModuleType:
    """Build in a private directory, then rename the ``.so`` into the entry and record it. Lock held."""
    prefix = f".{entry.directory.name}.{_BUILD_PREFIX}"
    for stale in entry.root.glob(prefix + "*"):  # left by a killed build: only the lock holder builds
        shutil.rmtree(stale, ignore_errors=True)
    try:
        private = Path(tempfile.mkdtemp(prefix=prefix, dir=entry.root))
    except OSError as exc:
        raise CacheLocationError(_unusable(entry.root, exc.strerror or str(exc)).detail) from None
    try:
        module = build(private)
        built = private / entry.so.name
        if not built.is_file():
            raise ShimError(f"the build of the emulator's {entry.name} produced no {built.name}")
        os.chmod(built, 0o755)  # the linker honours the umask, which may leave it group-writable
        size, digest = _digest(built)
        if not entry.directory.is_dir() or entry.directory.is_symlink():
            entry.directory.unlink(missing_ok=True)
            entry.directory.mkdir(mode=0o700)
        os.replace(built, entry.so)
        _write_manifest(entry, size, digest)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    sys.modules[entry.name] = module  # torch's loader does not register it; the op modules look it up
    return module


def _ensure_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise CacheLocationError(_unusable(root, exc.strerror or str(exc)).detail) from None


def _refuse(state: State) -> None:
    if state.status == "unsafe":
        raise UnsafeCacheError(state.detail)
    if state.status == "unusable":
        raise CacheLocationError(state.detail)


def check_location(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a cache root that is unsafe or cannot be created (one line). A root that exists but is read-only
    passes: its entries may be intact, which :func:`load_or_build` decides once the keys are known."""
    _refuse(inspect_root(cache_root(environ)))


def load_or_build(name: str, directory: Path, build: Callable[[Path], ModuleType],
                  timeout: float | None = None) -> ModuleType:
    """The extension ``name``: imported from the cache entry ``directory`` when it holds an intact build of this
    user's, else built by ``build(private_dir)`` (which leaves ``<name>.so`` there and returns the module) and
    published. Concurrent builds (every rank under torchrun) serialize on the entry's lock; a waiter gives up
    after ``timeout`` seconds (default: ``ASCEND_SHIM_SIM_BUILD_TIMEOUT``)."""
    if name in sys.modules:  # loaded already under another import path
        return sys.modules[name]
    entry = Entry(Path(directory), name)
    state = inspect(entry)
    _refuse(state)
    if state.status == "ok":
        try:
            return _import_built(entry.so, name)
        except ImportError:
            pass  # judged again under the lock: another process may be replacing it
    if timeout is None:
        timeout = setting("sim_build_timeout")
    _ensure_root(entry.root)
    with _build_lock(entry, timeout):
        state = inspect(entry)
        _refuse(state)
        if state.status == "ok":
            try:
                return _import_built(entry.so, name)
            except ImportError as exc:
                state = State("damaged", f"{entry.so} does not import: {exc}")
        if state.status == "damaged":
            log.warning("the emulator's cached build is damaged (%s): rebuilding it", state.detail)
        return _build_into_place(entry, build)
