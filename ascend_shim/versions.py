"""Versions: what is installed, release lines, the pairing rules of the Ascend stack, and project gates.

The one home of every version rule, so that ``doctor``, the patch sets and activation give one answer:

* torch_npu is built against one torch release: its base version ``X.Y.Z`` must equal torch's (a ``.postN``
  is a rebuild of the same release). torch 2.13.1 with torch_npu 2.13.0 is a mismatch: torch_npu's own
  requirement (``torch==2.13.0.*``) refuses it.
* vllm-ascend follows vllm's release line ``X.Y``; numpy follows vllm-ascend's own requirement, else the
  documented ``numpy<2`` up to vllm-ascend 0.19.
* the CANN release each torch_npu build was published for, and the Pythons each torch_npu line has wheels for.
* a project used from a source checkout (no distribution metadata) is gated on the literal ``__version__`` of
  its version file, read without importing it (:class:`Project`).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import io
import re
import sys
from pathlib import Path


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
    """The verdict on two installed versions: ``ok`` True / False, or None when they cannot be compared."""

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


def vllm_pairing(vllm_version: str | None, ascend_version: str | None) -> Pairing:
    if ascend_version is None:
        return Pairing(False, f"vllm-ascend is not installed: vllm {vllm_version} has no NPU platform",
                       f"pip install vllm-ascend=={base(vllm_version or '')}.* (the release line of vllm "
                       f"{line(vllm_version)})")
    if vllm_version is None:
        return Pairing(False, f"vllm-ascend {ascend_version} is installed without vllm",
                       f"pip install 'vllm=={line(ascend_version)}.*'")
    if line(vllm_version) != line(ascend_version):
        return Pairing(False, f"vllm {vllm_version} and vllm-ascend {ascend_version} are different release lines: "
                              f"vllm-ascend {ascend_version} is built for vllm {line(ascend_version)}.x",
                       f"pip install 'vllm=={line(ascend_version)}.*' (install vllm first, then vllm-ascend)")
    return Pairing(True, f"vllm {vllm_version} / vllm-ascend {ascend_version}: same release line "
                         f"{line(ascend_version)}")


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
    """``(specifier, source)``: vllm-ascend's own numpy requirement, else the documented rule."""
    pinned = pins_of(requires).get("numpy")
    if pinned:
        return pinned, "vllm-ascend's metadata"
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
