"""Versions: what is installed, release lines, the pairing rules of the Ascend stack, and project gates.

The one home of every version rule, so that ``doctor``, the patch sets and activation give one answer:

* torch_npu is built against one torch release: its base version ``X.Y.Z`` must equal torch's (a ``.postN``
  is a rebuild of the same release). torch 2.13.1 with torch_npu 2.13.0 is a mismatch: torch_npu's own
  requirement (``torch==2.13.0.*``) refuses it.
* vllm / vllm-ascend pair as vllm-ascend's release compatibility matrix says (:mod:`ascend_shim.vllm_ascend_matrix`):
  each vllm-ascend release with its exact vllm, torch, torch_npu, CANN and Python; a vllm-ascend release the matrix
  does not list is checked against vllm's release line ``X.Y`` only (its versions follow vllm's). numpy follows
  vllm-ascend's own requirement, else its release's, else the documented ``numpy<2`` up to vllm-ascend 0.19.
* the CANN release each torch_npu build was published for, and the Pythons each torch_npu line has wheels for.
* a project used from a source checkout (no distribution metadata) is gated on the literal ``__version__`` of
  its version file, read without importing it (:class:`Project`).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import io
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    from .vllm_ascend_matrix import Release


#: Python versions with torch_npu wheels, per torch_npu release line
TORCH_NPU_PYTHON: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "2.7": ((3, 9), (3, 13)), "2.8": ((3, 9), (3, 13)),
    "2.9": ((3, 10), (3, 13)), "2.10": ((3, 10), (3, 13)),
    "2.11": ((3, 10), (3, 14)), "2.12": ((3, 10), (3, 14)), "2.13": ((3, 10), (3, 14)),
    "2.14": ((3, 10), (3, 14)),
}
#: the CANN release each torch_npu build was published for (Ascend/pytorch's compatibility table)
CANN_FOR_TORCH_NPU: dict[str, str] = {
    "2.12.0": "9.1.0", "2.11.0": "9.1.0", "2.10.0.post4": "9.1.0", "2.9.0.post6": "9.1.0", "2.7.1.post8": "9.1.0",
    "2.9.0.post2": "9.0.0", "2.8.0.post4": "9.0.0", "2.7.1.post4": "9.0.0",
    "2.9.0": "8.5.0", "2.8.0.post2": "8.5.0", "2.7.1.post2": "8.5.0", "2.6.0.post5": "8.5.0",
    "2.8.0": "8.3.RC1", "2.7.1": "8.3.RC1", "2.6.0.post3": "8.3.RC1", "2.1.0.post17": "8.3.RC1",
}
#: vllm-ascend releases from which numpy is no longer pinned below 2
NUMPY_UNPINNED_SINCE = (0, 20)


# -- what is installed ----------------------------------------------------------------------------------------
def installed_version(dist: str) -> str | None:
    """The installed version of ``dist``. Remembered per ``sys.path`` (reading a distribution's metadata parses
    its whole METADATA file, about a millisecond, and activation asks for a few dozen)."""
    key = (dist, tuple(sys.path))
    try:
        return _versions[key]
    except KeyError:
        pass
    try:
        version = version_of(importlib.metadata.distribution(dist))
    except importlib.metadata.PackageNotFoundError:
        version = None
    if len(_versions) < 4096:
        _versions[key] = version
    return version


_versions: dict[tuple, str | None] = {}


def version_of(dist: importlib.metadata.Distribution) -> str:
    """``dist.version``, read from the ``Version`` header alone: ``dist.version`` parses the whole METADATA
    file with the email parser (a millisecond for a large one), and activation asks for a dozen."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text:
        for line in io.StringIO(text):
            if not line.strip():
                break  # the headers end at the first empty line
            name, colon, value = line.partition(":")
            if colon and name.strip().lower() == "version":
                return value.strip()
    return dist.version


def forget_installed() -> None:
    """Distributions appeared or went (a virtual one registered): ask the metadata again."""
    _versions.clear()


def requirements_of(dist: str) -> list[str] | None:
    """``Requires-Dist`` lines of an installed distribution (None when it is not installed)."""
    try:
        return list(importlib.metadata.requires(dist) or ())
    except importlib.metadata.PackageNotFoundError:
        return None


def satisfies(version: str, specifier: str) -> bool:
    """``"2.13.0+cpu"`` satisfies ``">=2.4,<2.15"``; pre-releases and local builds count as their version."""
    plain = _plain_satisfies(version, specifier)
    if plain is not None:
        return plain
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


_PLAIN_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?", re.IGNORECASE)
#: a comparison with a final release R, or with a pre-/dev-release of R (``0.4.0.dev0``, ``2.0rc1``)
_PLAIN_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)((?:(?:a|b|rc)\d+)?(?:\.dev\d+)?)\s*")
_COMPARE = {">=": tuple.__ge__, "<=": tuple.__le__, "==": tuple.__eq__, "!=": tuple.__ne__, "<": tuple.__lt__,
            ">": tuple.__gt__}
#: a final release C against a pre-release S of R (R's pre-releases lie between the releases before R and R):
#: C >= S and C > S mean C >= R; C <= S and C < S mean C < R; C is never S
_AGAINST_PRE = {">=": tuple.__ge__, ">": tuple.__ge__, "<=": tuple.__lt__, "<": tuple.__lt__,
                "==": lambda c, r: False, "!=": lambda c, r: True}


def _plain_satisfies(version: str, specifier: str) -> bool | None:
    """PEP 440 for the common case -- a final release (a local label ignored, as PEP 440 ignores it against a
    specifier without one) against comparisons with releases -- without importing ``packaging`` at start-up.
    ``None``: not that case (a pre-, post- or dev-release installed, ``~=``, wildcards): ``packaging`` decides."""
    match = _PLAIN_VERSION.fullmatch(version.strip())
    if match is None:
        return None
    clauses: list[re.Match[str]] = []
    for text in specifier.split(",") if specifier.strip() else ():
        clause = _PLAIN_CLAUSE.fullmatch(text)
        if clause is None:
            return None
        clauses.append(clause)
    have = tuple(int(n) for n in match.group(1).split("."))
    for clause in clauses:
        want = tuple(int(n) for n in clause.group(2).split("."))
        width = max(len(have), len(want))  # 2.4 == 2.4.0
        padded_have, padded_want = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        compare = (_AGAINST_PRE if clause.group(3) else _COMPARE)[clause.group(1)]
        if not compare(padded_have, padded_want):
            return False
    return True


def check_requirements(requires) -> tuple[bool, str, dict[str, str | None]]:
    """``(ok, reason, found_versions)`` for ``{dist: specifier}`` (a dict or pairs); every version is looked up."""
    items = list(requires.items() if isinstance(requires, dict) else requires)
    found: dict[str, str | None] = {dist: installed_version(dist) for dist, _ in items}
    for dist, spec in items:
        version = found[dist]
        if version is None:
            return False, f"{dist} is not installed", found
        if spec and not satisfies(version, spec):
            return False, f"{dist} {version} is outside the supported range {spec}", found
    return True, "", found


# -- release lines ------------------------------------------------------------------------------------------
def release(version: str | None) -> tuple[int, ...] | None:
    """``(2, 13, 0)`` for ``"2.13.0.post3+cpu"``; None for no or an invalid version."""
    if not version:
        return None
    plain = _PLAIN_VERSION.fullmatch(version.strip())
    if plain is not None:  # a final release: without importing packaging (activation reads torch's this way)
        return tuple(int(n) for n in plain.group(1).split("."))
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:
        return None


def base(version: str) -> str:
    """``"X.Y.Z"`` of a version (what torch_npu builds are matched on)."""
    r = release(version)
    return ".".join(map(str, (r + (0, 0))[:3])) if r else version


def line(version: str | None) -> str | None:
    """``"X.Y"``, the release line."""
    r = release(version)
    return f"{r[0]}.{r[1]}" if r and len(r) >= 2 else None


# -- pairing rules --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Pairing:
    """The verdict on installed versions: ``ok`` True; False: it cannot work; None: it cannot be judged, or differs
    from what was released together in a way that may work (a warning)."""

    ok: bool | None
    message: str
    fix: str = ""


def torch_npu_pairing(torch_version: str, npu_version: str) -> Pairing:
    if release(torch_version) is None or release(npu_version) is None:
        return Pairing(None, f"cannot compare torch {torch_version} and torch_npu {npu_version}",
                       "install released versions")
    if base(torch_version) == base(npu_version):
        return Pairing(True, f"torch {torch_version} / torch_npu {npu_version}: same base version "
                             f"{base(torch_version)}")
    return Pairing(False, f"torch {torch_version} and torch_npu {npu_version} differ: torch_npu {npu_version} is "
                          f"built for torch {base(npu_version)}",
                   f"pip install torch=={base(npu_version)} --index-url https://download.pytorch.org/whl/cpu "
                   f"(or torch-npu=={base(torch_version)}.*)")


# -- vllm / vllm-ascend: vllm-ascend's release compatibility matrix ------------------------------------------
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _matrix() -> ModuleType:
    """The recorded matrix, imported when a vllm rule is asked (doctor, the vllm set), not at every start-up."""
    from . import vllm_ascend_matrix

    return vllm_ascend_matrix


@functools.lru_cache(maxsize=512)
def _version(version: str | None):
    """``packaging``'s Version, or None for no or an invalid version."""
    if not version:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version.strip())
    except InvalidVersion:
        return None


def _public(version: str | None):
    """The release a version names, a local label (``+empty`` of a source build) left out."""
    v = _version(version)
    return _version(v.public) if v is not None else None


def ascend_release(ascend_version: str | None) -> Release | None:
    """The matrix entry of an installed vllm-ascend (its local label ignored), when recorded."""
    want = _public(ascend_version)
    return next((r for r in _matrix().RELEASES if want is not None and _version(r.ascend) == want), None)


def releases_for_vllm(vllm_version: str | None) -> list[Release]:
    """The vllm-ascend releases made for a vllm version, newest first."""
    want = _public(vllm_version)
    found = [r for r in _matrix().RELEASES if want is not None and any(_version(v) == want for v in r.vllm)]
    return sorted(found, key=lambda r: _version(r.ascend), reverse=True)


def newest_release(final: bool = False) -> Release:
    """The newest vllm-ascend release recorded (``final``: the newest final release)."""
    pool = [r for r in _matrix().RELEASES if not (final and _version(r.ascend).is_prerelease)]
    return max(pool, key=lambda r: _version(r.ascend))


def _beyond(version: str, known: Iterable[str]) -> bool:
    """Whether ``version`` is newer than every version in ``known``."""
    v = _public(version)
    return v is not None and all(v > _version(k) for k in known)


def vllm_beyond_matrix(vllm_version: str) -> bool:
    return _beyond(vllm_version, (v for r in _matrix().RELEASES for v in r.vllm))


def ascend_beyond_matrix(ascend_version: str) -> bool:
    return _beyond(ascend_version, (r.ascend for r in _matrix().RELEASES))


def _matrix_end() -> str:
    newest, final = newest_release(), newest_release(final=True)
    text = f"the vllm-ascend releases it knows end at {newest.ascend} for vllm {newest.vllm[0]}"
    return text + (f" (newest final release: {final.ascend} for vllm {final.vllm[0]})" if final != newest else "")


def stack_of(r: Release) -> str:
    return f"torch {r.torch} / torch_npu {r.torch_npu}, CANN {r.cann}, Python {r.python}"


def pip_torch_npu(version: str, python: tuple[int, ...] | None = None, machine: str | None = None) -> str:
    """The command that installs torch_npu ``version``: PyPI, or where vllm-ascend's docs say the build is."""
    where = _matrix().TORCH_NPU_OFF_PYPI.get(version)
    if where is None:
        return f"pip install torch-npu=={version}"
    if where.endswith(".whl"):
        py = python or tuple(sys.version_info[:2])
        import platform

        arch = (machine or platform.machine()).lower()
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
        return "pip install " + where.format(py=f"cp{py[0]}{py[1]}", arch=arch)
    return f"pip install torch-npu=={version} --extra-index-url {where}"


def pip_pair(r: Release, python: tuple[int, ...] | None = None, machine: str | None = None) -> str:
    """The commands that install a release of the matrix: vllm first, then vllm-ascend (and a torch_npu build
    PyPI lacks)."""
    return _with_off_pypi_torch_npu(f"pip install vllm=={r.vllm[0]} && pip install vllm-ascend=={r.ascend}", r,
                                    python, machine)


def _with_off_pypi_torch_npu(cmd: str, r: Release, python, machine) -> str:
    """``cmd``, then the install of the release's torch_npu build where PyPI lacks it."""
    if r.torch_npu in _matrix().TORCH_NPU_OFF_PYPI:
        cmd += " && " + pip_torch_npu(r.torch_npu, python, machine)
    return cmd


def _names(releases: list[Release]) -> str:
    return ", ".join(r.ascend for r in releases)


def vllm_pairing(vllm_version: str | None, ascend_version: str | None, python: tuple[int, ...] | None = None,
                 machine: str | None = None) -> Pairing:
    """vllm and vllm-ascend against the matrix: the exact vllm each vllm-ascend release is made for."""
    where = (python, machine)
    if ascend_version is None:
        return _vllm_alone(vllm_version or "", *where)
    entry = ascend_release(ascend_version)
    if vllm_version is None:
        return _ascend_alone(ascend_version, entry, *where)
    if entry is None:
        return _unrecorded_pair(vllm_version, ascend_version, *where)
    if _public(vllm_version) in [_version(v) for v in entry.vllm]:
        return Pairing(True, f"vllm {vllm_version} / vllm-ascend {ascend_version}: a released pair (vllm-ascend "
                             f"{entry.ascend} is released for vllm {' / '.join(entry.vllm)})")
    return _mismatched_pair(vllm_version, ascend_version, entry, *where)


def _vllm_alone(vllm_version: str, python, machine) -> Pairing:
    head = f"vllm-ascend is not installed: vllm {vllm_version} has no NPU platform"
    found = releases_for_vllm(vllm_version)
    if found:
        return Pairing(False, f"{head}; vllm-ascend {_names(found)} {'is' if len(found) == 1 else 'are'} released for "
                              f"vllm {vllm_version} ({found[0].ascend}: {stack_of(found[0])})",
                       _ascend_for(vllm_version, python, machine))
    newest = newest_release()
    if vllm_beyond_matrix(vllm_version):
        why = f"no vllm-ascend release for vllm {vllm_version} is known to ascend-shim: {_matrix_end()}"
    else:
        same = [r for r in _matrix().RELEASES if line(r.vllm[0]) == line(vllm_version)]
        why = f"vllm-ascend has no release for vllm {vllm_version}" + (
            f" (its releases for vllm {line(vllm_version)}.x: " + ", ".join(f"{r.ascend} for vllm {r.vllm[0]}"
                                                                           for r in same) + ")" if same else "")
    return Pairing(False, f"{head}, and {why}",
                   f"{pip_pair(newest, python, machine)} (the newest released pair; {stack_of(newest)})")


def _ascend_alone(ascend_version: str, entry: Release | None, python, machine) -> Pairing:
    head = f"vllm-ascend {ascend_version} is installed without vllm"
    if entry is not None:
        return Pairing(False, f"{head}: it is released for vllm {' / '.join(entry.vllm)}",
                       f"pip install vllm=={entry.vllm[0]}")
    if ascend_beyond_matrix(ascend_version):
        return Pairing(False, f"{head}; vllm-ascend {ascend_version} is not known to ascend-shim, so neither is the "
                              f"vllm it needs: {_matrix_end()}",
                       f"install the vllm that vllm-ascend {ascend_version}'s release notes name (a vllm "
                       f"{line(ascend_version)}.x release)")
    same = sorted((r for r in _matrix().RELEASES if line(r.ascend) == line(ascend_version)),
                  key=lambda r: _version(r.ascend), reverse=True)
    if not same:
        return Pairing(False, f"{head}; vllm-ascend {ascend_version} is not a vllm-ascend release",
                       f"{pip_pair(newest_release(), python, machine)} (the newest released pair)")
    return Pairing(False, f"{head}; vllm-ascend {ascend_version} is not in vllm-ascend's release matrix, whose "
                          f"{line(ascend_version)} releases are made for vllm "
                          f"{' / '.join(sorted({v for r in same for v in r.vllm}))}",
                   f"pip install vllm=={same[0].vllm[0]} (what vllm-ascend {same[0].ascend} is released for)")


def _ascend_for(vllm_version: str, python, machine) -> str:
    """The command installing the newest vllm-ascend released for ``vllm_version`` ("" when none is)."""
    found = releases_for_vllm(vllm_version)
    if not found:
        return ""
    return _with_off_pypi_torch_npu(f"pip install vllm-ascend=={found[0].ascend}", found[0], python, machine)


def _mismatched_pair(vllm_version: str, ascend_version: str, entry: Release, python, machine) -> Pairing:
    made_for = " / ".join(entry.vllm)
    if line(vllm_version) != line(ascend_version):
        message = (f"vllm {vllm_version} and vllm-ascend {ascend_version} are different release lines: vllm-ascend "
                   f"{ascend_version} is built for vllm {line(ascend_version)}.x (released for vllm {made_for})")
    else:
        message = (f"vllm {vllm_version} does not pair with vllm-ascend {ascend_version}: vllm-ascend "
                   f"{ascend_version} is released for vllm {made_for}")
    other = _ascend_for(vllm_version, python, machine)
    return Pairing(False, message, f"pip install vllm=={entry.vllm[0]} (install vllm first, then vllm-ascend)"
                   + (f"; or keep vllm {vllm_version}: {other}" if other else ""))


def _unrecorded_pair(vllm_version: str, ascend_version: str, python, machine) -> Pairing:
    """A vllm-ascend the matrix does not list (a newer or an unlisted release, a source build): its versions
    follow vllm's, so only the release line is checked."""
    if line(vllm_version) != line(ascend_version):
        other = _ascend_for(vllm_version, python, machine)
        return Pairing(False, f"vllm {vllm_version} and vllm-ascend {ascend_version} are different release lines: "
                              f"vllm-ascend {ascend_version} is built for vllm {line(ascend_version)}.x",
                       f"{other} (released for vllm {vllm_version})" if other else
                       f"{pip_pair(newest_release(), python, machine)} (the newest released pair)")
    if ascend_beyond_matrix(ascend_version):
        return Pairing(None, f"vllm {vllm_version} / vllm-ascend {ascend_version}: same release line, but vllm-ascend "
                             f"{ascend_version} is not known to ascend-shim, so its exact vllm, torch, torch_npu and "
                             f"CANN are not checked: {_matrix_end()}",
                       f"check vllm-ascend {ascend_version}'s release notes for the versions it needs")
    other = _ascend_for(vllm_version, python, machine)
    return Pairing(None, f"vllm {vllm_version} / vllm-ascend {ascend_version}: same release line, but vllm-ascend "
                         f"{ascend_version} is not in vllm-ascend's release matrix (an unlisted release or a source "
                         "build); its exact vllm, torch, torch_npu and CANN are not checked",
                   f"nothing, or for a checked pair: {other} (released for vllm {vllm_version})" if other else
                   f"check vllm-ascend {ascend_version}'s release notes for the versions it needs")


def stack_pairings(entry: Release, torch: str | None, torch_npu: str | None, python: tuple[int, ...],
                   cann: str | None = None, machine: str | None = None) -> dict[str, Pairing]:
    """torch, torch_npu, Python and (when known) CANN against what a vllm-ascend release is released with:
    ``{"torch" | "torch-npu" | "python" | "cann": Pairing}`` (torch left out when not installed, CANN when unknown)."""
    out = {}
    if torch_npu is None:
        out["torch-npu"] = Pairing(False, f"torch_npu is not installed: vllm-ascend {entry.ascend} is released "
                                          f"with torch_npu {entry.torch_npu}",
                                   pip_torch_npu(entry.torch_npu, python, machine))
    if torch:
        out["torch"] = _part("torch", torch, entry.torch, entry,
                             f"pip install torch=={entry.torch} --index-url {TORCH_CPU_INDEX}")
    if torch_npu:
        out["torch-npu"] = _part("torch_npu", torch_npu, entry.torch_npu, entry,
                                 pip_torch_npu(entry.torch_npu, python, machine))
    py = ".".join(map(str, python[:3]))
    out["python"] = (Pairing(True, f"Python {py}") if satisfies(py, entry.python) else
                     Pairing(None, f"Python {py}: vllm-ascend {entry.ascend} is released for Python {entry.python}",
                             f"use Python {entry.python} (a virtual environment with that interpreter)"))
    if cann:
        out["cann"] = (Pairing(True, f"CANN {cann}") if cann.upper() == entry.cann.upper() else
                       Pairing(None, f"CANN {cann}: vllm-ascend {entry.ascend} is released with CANN {entry.cann}",
                               f"install CANN {entry.cann} and source its set_env.sh"))
    return out


def _part(name: str, have: str, want: str, entry: Release, fix: str) -> Pairing:
    """One package against the release: equal; the same base version (a different build: may work); or not."""
    same = _version(have) == _version(want) or ("+" not in want and _public(have) == _version(want))
    if same:
        return Pairing(True, f"{name} {have}")
    message = f"{name} {have}: vllm-ascend {entry.ascend} is released with {name} {want}"
    return Pairing(None if base(have) == base(want) else False, message, fix)


def pins_of(requires) -> dict[str, str]:
    """``{dist: specifier}`` of unconditional ``Requires-Dist`` lines (extras left out)."""
    from packaging.requirements import InvalidRequirement, Requirement

    pins = {}
    for raw in requires or ():
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if (req.marker is None or "extra" not in str(req.marker)) and str(req.specifier):
            pins[req.name.lower().replace("_", "-")] = str(req.specifier)
    return pins


def numpy_requirement(ascend_version: str, requires=()) -> tuple[str, str]:
    """``(specifier, source)``: vllm-ascend's own numpy requirement, else its release's (``""``: any numpy),
    else the documented rule."""
    pinned = pins_of(requires).get("numpy")
    if pinned:
        return pinned, "vllm-ascend's metadata"
    entry = ascend_release(ascend_version)
    if entry is not None and entry.numpy is not None:
        return entry.numpy, (f"vllm-ascend {entry.ascend}'s requirement" if entry.numpy else
                             f"vllm-ascend {entry.ascend} does not pin numpy")
    if (release(ascend_version) or ())[:2] >= NUMPY_UNPINNED_SINCE:
        return ">=1", "vllm-ascend >= 0.20 has no numpy pin"
    return "<2", "vllm-ascend's documented numpy<2 (up to 0.19)"


def cann_for(npu_version: str) -> str | None:
    """The CANN release a torch_npu build was published for, when recorded."""
    return CANN_FOR_TORCH_NPU.get(npu_version) or CANN_FOR_TORCH_NPU.get(npu_version.split("+")[0])


# -- project gates ------------------------------------------------------------------------------------------
_VERSION = re.compile(r"""__version__\s*=\s*["']([^"']+)["']""")


@dataclasses.dataclass(frozen=True)
class Project:
    """A project a patch set is gated on: its distribution's version, or for a source checkout without
    metadata the literal ``__version__`` in ``package/version_file``. No literal version: accepted (the newest
    code)."""

    package: str
    specifier: str
    dist: str | None = None
    version_file: str = "version.py"

    def describe(self) -> str:
        where = f"the {self.dist} distribution, or " if self.dist else ""
        return f"{self.package} {self.specifier} ({where}{self.package}/{self.version_file} of a checkout)"


def project_version(project: Project) -> tuple[str | None, str]:
    """``(version, where)``: ``(None, reason)`` when the package is not importable here; version ``""`` when
    it is importable but declares no literal version."""
    key = (project.dist, project.package, project.version_file)
    found = _found.get(key)
    if found is not None:
        return found
    version, where = _project_version(*key)
    if version is not None:  # an absent project may still appear on sys.path later: asked again then
        _found[key] = (version, where)
    return version, where


_found: dict[tuple, tuple[str, str]] = {}


def _project_version(dist, package, version_file) -> tuple[str | None, str]:
    version = installed_version(dist) if dist else None
    if version:
        return version, f"distribution {dist} {version}"
    try:
        spec = importlib.util.find_spec(package)  # a top-level name: finds, does not import
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None, f"{package} is not installed"
    where = list(spec.submodule_search_locations or [])
    text = ""
    if where:
        try:
            text = (Path(where[0]) / version_file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
    match = _VERSION.search(text)
    if match:
        return match.group(1), f"{package}/{version_file} of a source checkout"
    return "", f"{package} from a source checkout without a version"


def check_project(project: Project) -> tuple[str, str]:
    """``(state, reason)``: ``"absent"`` (nothing to patch), ``"outside"`` the range, or ``"ok"``."""
    version, where = project_version(project)
    if version is None:
        return "absent", where
    if version and not satisfies(version, project.specifier):
        return "outside", f"{project.package} {version} ({where}) is outside the checked range {project.specifier}"
    return "ok", where
