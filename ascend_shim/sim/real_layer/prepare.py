"""``ascend-shim fetch-torch-npu``: prepare Huawei's torch_npu Python to run over the emulated NPU.

The torch-npu wheel paired with the installed torch (or one given with ``--wheel``) is unpacked into a per-user
cache with its native parts left out: every shared library (``_C``, ``libtorch_npu.so``, the bundled CANN-linked
libraries, torchair's extensions) and the C++ headers. Two things take their place:

* ``torch_npu._C`` is served by the stand-in native layer (:mod:`.native`) when the shim enables the layer;
* ``torch_npu/lib/libop_plugin_atb.so`` becomes an empty file: torch_npu's ATB loader requires the path to exist,
  then treats a library that does not load as NNAL being absent, as on a machine without NNAL.

The op schemas and the lists of ops with NPU kernels, which the native library registers from its build-time
yaml, are read from the wheel's yaml into ``prepared.json`` beside the package, with the size and sha256 of every
file of the package (:func:`check_files`: the loader compares the file list and sizes before ``import torch_npu``,
``doctor --simulate`` every file's hash). The package is compiled to bytecode as pip does on install (quietly: the
wheel's invalid escape sequences would warn at every start of a process that compiles them), and its directories
and files get modes 0755 and 0644 whatever the umask: the loader refuses code others could have written. Nothing
is downloaded during a run: a run only uses what this command prepared.

A package lives in ``<root>/X.Y.Z``, the torch release it is built for (a ``.postN`` rebuild included), the one
place a run looks: a wheel for another torch is refused, as is a version that is not a release's (it is the wheel's
own text). Concurrent runs each unpack beside that place and replace it one after the other, under a lock.
"""
from __future__ import annotations

import compileall
import hashlib
import importlib.machinery
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from ...errors import ConfigError, ShimError
from .. import CANN_VERSION

#: the file ``prepared.json`` records; bumped when what is kept or recorded changes (3: every file's size and
#: sha256, bytecode compiled, modes set; 4: torchnpugen kept)
FORMAT = 4
#: the wheel's top-level Python packages: torch_npu, and torchnpugen (its code generator, which torch_npu's inductor
#: backend imports where Triton is installed)
PACKAGES = ("torch_npu", "torchnpugen")
_NATIVE = re.compile(r"(\.so(\.[0-9.]+)?|\.a|\.h|\.hpp|\.cuh)$")
_ATB_PLACEHOLDER = "torch_npu/lib/libop_plugin_atb.so"
_YAMLS = ("torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", "torch_npu/csrc/aten/npu_native_functions.yaml")


def torch_npu_root() -> Path:
    from ...config import setting

    root = setting("torch_npu_dir")
    return Path(root) if root else Path.home() / ".cache" / "ascend_shim" / "torch_npu"


def prepared_dir(version: str) -> Path:
    return torch_npu_root() / version


def format_problem(meta: dict) -> str:
    """Why a ``prepared.json`` is not one this version of the shim uses ("" when it is)."""
    found = meta.get("format")
    if found == FORMAT:
        return ""
    return (f"it was prepared by {'an older' if isinstance(found, int) and found < FORMAT else 'another'} version of "
            f"ascend_shim (format {found}, this one reads format {FORMAT})")


def _keep(name: str) -> bool:
    top = name.split("/", 1)[0]
    if top not in PACKAGES and not (top.startswith("torch_npu-") and top.endswith(".dist-info")):
        return False  # torch_npu.libs (bundled native libraries)
    return not name.endswith("/") and not _NATIVE.search(name)


def read_yaml_functions(text: str) -> dict[str, list[str]]:
    """The ``func`` of every item of each top-level list in torch_npu's native-functions yaml (an item is either a
    bare op name or a mapping with a ``func:`` key). A line reader: the files are flat and generated, and the
    shim depends on nothing but torch and packaging."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        header = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", line)
        if header:
            current = sections.setdefault(header.group(1), []) if not header.group(2) else None
            continue
        if current is None:
            continue
        item = re.match(r"^\s*-\s+(.*)$", line)
        body = item.group(1) if item else line.strip()
        func = re.match(r"^func:\s*(.+?)\s*$", body)
        if func:
            current.append(func.group(1).strip("'\""))
        elif item and ":" not in body:
            current.append(body.strip("'\""))
    return sections


def npu_metadata(zf: zipfile.ZipFile) -> dict:
    yamls = {}
    for name in _YAMLS:
        try:
            yamls[name.rsplit("/", 1)[-1]] = read_yaml_functions(zf.read(name).decode())
        except KeyError:
            continue
    by_codegen = yamls.get("npu_native_functions_by_codegen.yaml", {})
    symint = {f.split("(", 1)[0]: f for f in by_codegen.get("symint", []) if "(" in f}
    schemas = [symint.get(f.split("(", 1)[0], f) for f in by_codegen.get("custom", []) if "(" in f]
    kernels = sorted({f.split("(", 1)[0] for y in yamls.values() for section in ("supported", "autograd", "symint")
                      for f in y.get(section, [])})
    return {"npu_schemas": schemas, "aten_kernels": kernels}


def _emulated_cann(home: Path) -> None:
    """What torch_npu's import checks of a sourced CANN environment (``ASCEND_HOME_PATH`` with ``runtime``,
    ``compiler`` and ``opp``, and the toolkit's version record): the emulated machine's, so that importing the
    package over the emulated device says what it says on a prepared Ascend machine (nothing)."""
    for part in ("runtime", "compiler", "opp"):
        (home / part).mkdir(parents=True, exist_ok=True)
    (home / "ascend_toolkit_install.info").write_text(f"package_name=Ascend-cann-toolkit (emulated)\n"
                                                      f"version={CANN_VERSION}\n")


#: what may be imported from a package directory (``.py``, ``.pyc``, extension modules): a file of these kinds
#: that the package did not have is a problem, other extra files are not
_IMPORTABLE = tuple(importlib.machinery.all_suffixes())
_DIR_MODE, _FILE_MODE = 0o755, 0o644


def _set_modes(top: Path) -> None:
    """Directories 0755 and files 0644, whatever the umask was when they were written."""
    for dirpath, _dirs, files in os.walk(top):
        os.chmod(dirpath, _DIR_MODE)
        for name in files:
            os.chmod(os.path.join(dirpath, name), _FILE_MODE)


def _compile(site: Path) -> None:
    """Bytecode for the package, as pip writes it on install: quietly (the wheel's invalid escape sequences warn
    when compiled, a SyntaxWarning on every start from Python 3.12) and once, not in every process that imports it
    (``PYTHONDONTWRITEBYTECODE`` or a read-only cache would compile it each time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compileall.compile_dir(str(site), quiet=2)


def _scan(site: Path) -> tuple[dict[str, os.stat_result], list[tuple[str, os.stat_result]]]:
    """The files of the package (by path relative to ``site``, ``/``-separated; bytecode caches left out) and every
    directory (``__pycache__`` included), each with its ``lstat``."""
    files: dict[str, os.stat_result] = {}
    dirs = [(str(site), site.lstat())]
    stack = [(str(site), "")]
    while stack:
        path, rel = stack.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                name = f"{rel}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    dirs.append((name, entry.stat(follow_symlinks=False)))
                    if entry.name != "__pycache__":
                        stack.append((entry.path, name + "/"))
                else:
                    files[name] = entry.stat(follow_symlinks=False)
    return files, dirs


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_files(site: Path) -> dict[str, dict]:
    """What ``prepared.json`` records of each file of the package: its size and sha256."""
    files, _ = _scan(site)
    return {name: {"size": st.st_size, "sha256": _sha256(site / name)} for name, st in sorted(files.items())}


def check_files(where: Path, meta: dict, *, full: bool = False) -> list[str]:
    """What differs between the prepared package in ``where`` and what ``prepared.json`` (``meta``) recorded, one
    short phrase each: a recorded file missing or changed (its size; with ``full``, its sha256 too), an importable
    file the package did not have, a directory or file another user could have written, something that is not a
    regular file. Empty when the package is as prepared. Without ``full`` it reads only the directory entries
    (about 20 ms for torch_npu's 1,700 files): the check before every ``import torch_npu``; ``doctor`` hashes."""
    site = where / "site"
    recorded = meta.get("files") or {}
    try:
        files, dirs = _scan(site)
    except OSError as exc:
        return [f"{site} cannot be read ({exc.strerror})"]
    problems = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name, st in dirs + sorted(files.items()):
        if uid is not None and st.st_uid != uid:
            problems.append(f"{name} is owned by uid {st.st_uid}")
        elif stat.S_IMODE(st.st_mode) & 0o022:
            problems.append(f"{name} is writable by others (mode {oct(stat.S_IMODE(st.st_mode))})")
    for name in sorted(set(recorded) - set(files)):
        problems.append(f"{name} is missing")
    for name, st in sorted(files.items()):
        want = recorded.get(name)
        if want is None:
            if name.endswith(_IMPORTABLE):
                problems.append(f"{name} is not part of the package")
        elif not stat.S_ISREG(st.st_mode):
            problems.append(f"{name} is not a regular file")
        elif st.st_size != want.get("size") or (full and _sha256(site / name) != want.get("sha256")):
            problems.append(f"{name} has changed")
    return problems


def version_of(zf: zipfile.ZipFile) -> str:
    name = Path(zf.filename or "the wheel").name
    try:
        text = zf.read("torch_npu/version.py").decode("utf-8", "replace")
    except KeyError:
        raise ConfigError(f"{name} has no torch_npu/version.py: it is not a torch-npu wheel; pass the torch-npu "
                          f"wheel") from None
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if not match:
        raise ConfigError(f"{name}: its torch_npu/version.py names no __version__: it is not a torch-npu wheel; pass "
                          f"the torch-npu wheel")
    return match.group(1)


#: a torch-npu release: ``X.Y.Z`` with PEP 440's pre, post, dev and local parts (``2.7.1.post8``, ``2.6.0rc1``).
#: Nothing else may name a directory of the cache: a version is the wheel's own text
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?"
                      r"(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?")


def _release_for_torch(got: str, source: str, torch_base: str) -> str:
    """The torch release ``X.Y.Z`` the torch-npu version ``got`` (named by ``source``) is built for, which must be
    the installed torch's (``torch_base``): the run looks for the package prepared for that torch only."""
    from ...versions import base

    if not _VERSION.fullmatch(got):
        raise ConfigError(f"{source} names torch-npu version {got[:40]!r}, which is not a release version (X.Y.Z, "
                          f"e.g. 2.7.1.post8): pass a torch-npu wheel")
    release = base(got)
    if release != torch_base:
        raise ConfigError(f"{source} is torch-npu {got}, built for torch {release}, but the installed torch is "
                          f"{torch_base}: it would never be used; use torch-npu {torch_base} (or a "
                          f"{torch_base}.postN rebuild)")
    return release


def _check_members(zf: zipfile.ZipFile, path: Path) -> None:
    """Refuse, before anything is written, a member that would land outside the package."""
    for name in zf.namelist():
        if ".." in Path(name).parts or name.startswith("/"):
            raise ConfigError(f"{path}: unsafe member {name!r} (a path outside the package): it is not a torch-npu "
                              f"wheel as published; download it again")


def _final_dir(root: Path, release: str) -> Path:
    """``root/release``, which must be a directory of ``root`` itself (not a link elsewhere)."""
    final = root / release
    if final.resolve().parent != root.resolve():
        raise ConfigError(f"{final} leads outside {root} (a link): delete it and run `ascend-shim fetch-torch-npu` "
                          f"again")
    return final


#: how long a run waits for another's publishing (renames and the removal of the package it replaces: seconds)
_PUBLISH_WAIT = 300.0


def _publish(staging: Path, final: Path) -> None:
    """Put ``staging`` in place of ``final``, under the root's lock (concurrent runs publish one after the other):
    the package it replaces is renamed aside before the new one is renamed in, then removed."""
    from ... import build_cache

    root = final.parent
    lock = build_cache.LockFile(root / ".publish.lock", "the lock of the prepared torch_npu packages",
                                f"publishing torch_npu in {root}")

    def unusable(why: str) -> ConfigError:
        return ConfigError(f"{root} cannot be used ({why}); set ASCEND_SHIM_TORCH_NPU_DIR to a directory you can "
                           f"write")

    with build_cache.hold(lock, _PUBLISH_WAIT, unusable):
        for left in root.glob(f".{final.name}.old-*"):  # left by a run that was killed: only the holder makes them
            _remove(left)
        aside = None
        if os.path.lexists(final):
            try:
                stale = format_problem(json.loads((final / "prepared.json").read_text()))
            except (OSError, ValueError, AttributeError):
                stale = ""
            if stale:
                print(f"fetch-torch-npu: replacing {final}: {stale}", file=sys.stderr)
            aside = root / f".{final.name}.old-{os.getpid()}-{os.urandom(4).hex()}"
            os.rename(final, aside)
        os.rename(staging, final)
        if aside is not None:
            _remove(aside)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _download(version: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(into),
           f"torch-npu=={version}"]
    print(f"fetch-torch-npu: downloading torch-npu=={version} (no dependencies)", file=sys.stderr)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wheels = sorted(into.glob("torch_npu-*.whl"))
    if done.returncode or not wheels:
        tail = "\n".join(done.stdout.strip().splitlines()[-3:])
        raise ConfigError(f"could not download torch-npu=={version} from the package index:\n{tail}\n"
                          f"On an offline machine, download the wheel elsewhere and pass --wheel PATH.")
    return wheels[0]


def prepare(wheel: str | os.PathLike | None = None, version: str | None = None) -> Path:
    """Prepare the torch_npu Python paired with the installed torch (or ``wheel``); returns its directory.

    Safe against concurrent runs: the package is unpacked beside its final place, which is replaced under a lock.
    Whatever happens, nothing of the unpacking is left behind."""
    from ...versions import base, installed_version

    torch_version = installed_version("torch")
    if not torch_version:
        raise ConfigError("torch is not installed: torch_npu is prepared for the installed torch; install torch first")
    torch_base = base(torch_version)
    if version is not None:
        _release_for_torch(version, "--version", torch_base)
    wanted = version or torch_base
    root = torch_npu_root()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(f"cannot create {root} ({exc.strerror}); set ASCEND_SHIM_TORCH_NPU_DIR to a directory "
                          f"you can write") from None
    with tempfile.TemporaryDirectory(dir=root, prefix=".download-") as scratch:
        path = Path(wheel) if wheel else _download(wanted, Path(scratch))
        if not path.is_file():
            raise ConfigError(f"--wheel {path}: no such file")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise ConfigError(f"{path} is not a wheel (not a zip archive)") from None
        with zf:
            got = version_of(zf)
            if wheel is None and got != wanted:
                raise ConfigError(f"the package index gave torch-npu {got}, not {wanted}")
            final = _final_dir(root, _release_for_torch(got, path.name, torch_base))
            _check_members(zf, path)
            staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}-"))
            try:
                _unpack(zf, path, staging, {"format": FORMAT, "torch_npu": got, "wheel": path.name, "sha256": digest})
                _publish(staging, final)
            finally:
                _remove(staging)  # gone once published; else what was unpacked
    return final


def _unpack(zf: zipfile.ZipFile, path: Path, staging: Path, meta: dict) -> None:
    """The package's Python into ``staging/site``, its record into ``staging/prepared.json``."""
    site = staging / "site"
    kept, left_out = 0, 0
    try:
        for info in zf.infolist():
            if _keep(info.filename):
                zf.extract(info, site)
                kept += 1
            elif not info.filename.endswith("/"):
                left_out += 1
        meta.update(files_kept=kept, native_left_out=left_out, **npu_metadata(zf))
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ConfigError(f"{path} is damaged ({exc}): download it again") from None
    placeholder = site / _ATB_PLACEHOLDER
    placeholder.parent.mkdir(parents=True, exist_ok=True)
    placeholder.write_bytes(b"")
    _compile(site)
    _emulated_cann(staging / "cann")
    meta["files"] = record_files(site)
    meta["file_count"] = len(meta["files"])
    (staging / "prepared.json").write_text(json.dumps(meta, indent=1))
    _set_modes(staging)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="ascend-shim fetch-torch-npu",
        description="Prepare Huawei's torch_npu Python (native parts left out) to run over the emulated NPU: "
                    "`--simulate` then uses it (ASCEND_SHIM_SIM_LAYER=auto|real).")
    parser.add_argument("--wheel", help="a torch-npu wheel already downloaded (offline machines)")
    parser.add_argument("--version", help="the torch-npu release to fetch (default: the one paired with torch)")
    ns = parser.parse_args(argv)
    try:
        where = prepare(ns.wheel, ns.version)
    except ShimError as exc:  # a ConfigError, or a lock file that is not to be trusted
        print(f"ascend-shim fetch-torch-npu: {exc}", file=sys.stderr)
        return 2
    meta = json.loads((where / "prepared.json").read_text())
    print(f"torch_npu {meta['torch_npu']} prepared in {where} ({meta['files_kept']} files kept, "
          f"{meta['native_left_out']} native files left out, {len(meta['npu_schemas'])} npu op schemas)")
    return 0
