"""Rewritten bytecode kept between runs, as Python keeps its own in ``__pycache__``.

Libraries such as Lightning have dozens of modules that mention CUDA; parsing, rewriting and compiling them on
every start would cost each run a second. The outcome of a rewrite (the code object, or "nothing to rewrite",
and the sites) is stored per source file, and reused while the source bytes, the interpreter's bytecode
format, the optimisation level and the rewrite rules (:mod:`.transform`'s own text) are unchanged.

Never next to the sources (``__pycache__`` belongs to the plain interpreter: a run without the shim must never
load rewritten code), but in ``$XDG_CACHE_HOME/ascend_shim/rewrite/<cache tag>`` (default ``~/.cache/...``),
which must be a real directory owned by the user and writable by nobody else; entries are read only when the
user owns them and nobody else can write them (a marshal payload is code: it must come from the user). The
directory is opened once and every entry is opened relative to that descriptor without following links, so a
directory swapped in later is never used. Anything unusable means no cache (each run compiles), never an error.
Entries are written atomically (a private temporary file renamed over the entry); ``PYTHONDONTWRITEBYTECODE``
stops the writing, as it does Python's.

Most modules of a library hold nothing to rewrite; telling so takes a search of their bytecode for "cuda" and
"nccl" (:func:`bytecode_clean`). Its answer is kept too, per top-level package, keyed by the bytecode file and
its header (which names the source's mtime and size, or its hash): a later run looks it up instead of searching.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import logging
import marshal
import os
import stat
import sys
from importlib.util import MAGIC_NUMBER

from .transform import Site

log = logging.getLogger("ascend_shim")

_FORMAT = b"ascend_shim-rewrite-1\n"
_DIGEST = 32  # sha256 of the source bytes
_UNSET = object()
_dir_fd = _UNSET  # the cache directory's descriptor, None when there is no usable cache
_stamp: bytes | None = None  # what the rewrite rules are


def location() -> str:
    """Where the cache lives for this interpreter."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ascend_shim", "rewrite", sys.implementation.cache_tag or "python")


def _safe(st) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_dir():
    if not (hasattr(os, "O_DIRECTORY") and hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd
            and os.rename in os.supports_dir_fd):
        return None
    path = location()
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        log.debug("ascend_shim rewrite cache: %s unusable (%s): compiling on every run", path, exc)
        return None
    if not (stat.S_ISDIR(os.fstat(fd).st_mode) and _safe(os.fstat(fd))):
        os.close(fd)
        log.warning("ascend_shim rewrite cache: %s is not owned by this user or is writable by others; "
                    "rewritten modules are compiled on every run (fix: chmod 700 or remove it)", path)
        return None
    return fd


def _directory():
    global _dir_fd
    if _dir_fd is _UNSET:
        _dir_fd = _open_dir()
    return _dir_fd


def reset() -> None:
    """Forget the directory and what was read from it (tests; a changed ``XDG_CACHE_HOME``): the next use
    opens it again."""
    global _dir_fd, _stamp
    fd, _dir_fd, _stamp = _dir_fd, _UNSET, None
    if isinstance(fd, int):
        os.close(fd)
    _clean.clear()
    _new_clean.clear()


def _rules_stamp() -> bytes:
    global _stamp
    if _stamp is None:
        from . import transform

        with open(transform.__file__, "rb") as fh:
            rules = fh.read()
        _stamp = hashlib.sha256(_FORMAT + MAGIC_NUMBER + rules).digest()
    return _stamp


def _entry_name(path: str) -> str:
    key = b"\0".join([_rules_stamp(), os.fsencode(path), str(sys.flags.optimize).encode()])
    return hashlib.sha256(key).hexdigest()[:40] + ".bin"


def load(path: str, source: bytes):
    """``(code or None, [Site, ...])`` stored for ``path`` with exactly this ``source``, else None."""
    fd = _directory()
    if fd is None:
        return None
    try:
        entry = os.open(_entry_name(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    try:
        with os.fdopen(entry, "rb") as fh:
            if not _safe(os.fstat(fh.fileno())):
                return None
            data = fh.read()
    except OSError:
        return None
    head = len(_FORMAT) + _DIGEST
    if data[:len(_FORMAT)] != _FORMAT or data[len(_FORMAT):head] != hashlib.sha256(source).digest():
        return None
    try:
        code, sites = marshal.loads(memoryview(data)[head:])
        return code, [Site(*s) for s in sites]
    except (ValueError, TypeError, EOFError):
        return None


def store(path: str, source: bytes, code, sites) -> None:
    """Keep the outcome of rewriting ``path`` (``code`` None: nothing was rewritten)."""
    fd = _directory()
    if fd is None or sys.dont_write_bytecode:
        return
    try:
        payload = marshal.dumps((code, tuple(dataclasses.astuple(s) for s in sites)))
    except ValueError:
        return
    name = _entry_name(path)
    tmp = f"{name}.{os.getpid()}.tmp"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        with os.fdopen(out, "wb") as fh:
            fh.write(_FORMAT + hashlib.sha256(source).digest() + payload)
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # POSIX rename replaces atomically
    except OSError as exc:
        log.debug("ascend_shim rewrite cache: could not store %s (%s)", path, exc)
        with contextlib.suppress(OSError):  # never written
            os.unlink(tmp, dir_fd=fd)


# -- bytecode known to name neither cuda nor nccl ---------------------------------------------------------------
_HEADER = 16  # a .pyc header: magic, flags, then the source's mtime and size (or its hash)
_clean: dict[str, dict[str, bytes]] = {}  # package -> {bytecode path: header of the clean version}
_new_clean: set[str] = set()  # packages with answers not yet kept


def mentions_cuda(data) -> bool:
    return b"cuda" in data or b"nccl" in data


def bytecode_clean(package: str, path: str, data: bytes) -> bool:
    """Does the bytecode ``data``, read from ``path`` for a module of ``package``, hold no "cuda"/"nccl"?"""
    known = _clean.get(package)
    if known is None:
        known = _clean[package] = _load_clean(package)
    head = bytes(data[:_HEADER])
    if known.get(path) == head:
        return True
    if mentions_cuda(data):
        return False
    known[path] = head
    if not _new_clean:
        atexit.register(_keep_clean)
    _new_clean.add(package)
    return True


def _clean_name(package: str) -> str:
    return "clean-" + hashlib.sha256(_rules_stamp() + package.encode()).hexdigest()[:32] + ".bin"


def _load_clean(package: str) -> dict:
    fd = _directory()
    if fd is None:
        return {}
    try:
        entry = os.open(_clean_name(package), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return {}
    try:
        with os.fdopen(entry, "rb") as fh:
            if not _safe(os.fstat(fh.fileno())):
                return {}
            known = marshal.loads(fh.read())
    except (OSError, ValueError, TypeError, EOFError):
        return {}
    return known if isinstance(known, dict) else {}


def _keep_clean() -> None:
    """At exit: the new answers, merged with what other processes kept meanwhile."""
    fd = _directory()
    if fd is None or sys.dont_write_bytecode:
        return
    for package in sorted(_new_clean):
        merged = {**_load_clean(package), **_clean[package]}
        name = _clean_name(package)
        tmp = f"{name}.{os.getpid()}.tmp"
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            with os.fdopen(out, "wb") as fh:
                fh.write(marshal.dumps(merged))
            os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            with contextlib.suppress(OSError):  # never written
                os.unlink(tmp, dir_fd=fd)
    _new_clean.clear()
