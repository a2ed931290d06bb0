"""``ascend-shim scan PATH``: find the CUDA-specific code of a repository, and say what the shim covers.

A static scan (``ast``, nothing is imported or run) of every ``.py`` file under PATH (``.git``, ``venv``,
``.venv``, ``site-packages``, ``build``, ``__pycache__``, ``node_modules`` and ``.tox`` are skipped; files that
do not parse are reported and skipped; so are names that are not regular files, such as a FIFO or a device
called ``x.py``, which are never opened for reading). Each finding is ``path:line:col`` (1-based column), a category, a
**symbol**, and a coverage verdict computed from the declared patch metadata of the registered patch sets
(``Patch.covers``, ``Patch.target``, ``Patch.fidelity``) -- never from a list kept here:

``covered`` / ``fallback`` / ``neutral`` / ``unsupported``
                 the verdict of the covering patch's fidelity (:mod:`ascend_shim.fidelity`); ``unsupported``
                 also when no patch covers a CUDA feature with no NPU equivalent
``not covered``  no patch declares anything about it

The symbol naming scheme -- what ``Patch.covers`` entries should say -- and the matching rules are defined in
one place, :mod:`ascend_shim.scan.symbols` (use :func:`symbol_for` there). Categories: see
:data:`ascend_shim.scan.symbols.CATEGORIES`.

Usage::

    python -m ascend_shim scan PATH [PATH ...] [--json | --csv] [--only-unsupported] [--patch-modules m1,m2]

The patch sets considered are those ``activate()`` would select (``ASCEND_SHIM_DISABLE`` / ``_ONLY`` /
``_ENABLE`` / ``_PATCH_MODULES`` and ``--backend`` apply); installed versions are not checked, since the
repository's dependencies need not be installed where it is scanned (``doctor`` checks versions).
Exit code: 1 when anything ``unsupported`` was found, 0 otherwise, 2 on usage errors.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterable

from ..regular_file import NotRegularFile, read_regular_file
from .symbols import CATEGORIES, KNOWN_UNSUPPORTED, VERDICTS, symbol_for, target_symbol

SKIP_DIRS = frozenset({".git", "venv", ".venv", "site-packages", "build", "__pycache__", "node_modules", ".tox",
                       ".eggs", ".mypy_cache", ".pytest_cache"})


@dataclasses.dataclass
class Finding:
    path: str
    line: int
    col: int
    category: str
    symbol: str
    verdict: str
    patches: tuple[str, ...] = ()
    text: str = ""
    reason: str = ""
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col, "category": self.category,
                "symbol": self.symbol, "verdict": self.verdict, "patches": list(self.patches), "text": self.text,
                "reason": self.reason, "keys": list(self.keys)}


@dataclasses.dataclass
class ScanResult:
    root: str
    findings: list[Finding]
    errors: list[tuple[str, str]]        # (path, message) of files that could not be read or parsed
    files_scanned: int
    patch_sets: list[str]                # ids of the patch sets whose patches were considered
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (path, why): not regular files
    #: the libraries the code imports, as a run treats them: {"cuda_code": [...], "native": [...]} (see .rule)
    rule: dict = dataclasses.field(default_factory=lambda: {"cuda_code": [], "native": []})

    @property
    def unsupported(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "unsupported"]


def iter_python_files(path: str):
    """``path`` itself unless it is a directory, else the ``.py`` names under it (regular or not: see
    :func:`read_regular_file`)."""
    if not os.path.isdir(path):
        yield path
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def scan_paths(paths: Iterable[str], patch_sets=None, config=None, backend: str | None = None) -> ScanResult:
    """Scan files/directories. ``patch_sets`` (a list of :class:`~ascend_shim.registry.PatchSet`) replaces the
    registered sets -- tests and tools pass their own; ``config`` selects among them as ``activate`` would."""
    from .coverage import index_for
    from .visitor import scan_source

    paths = list(paths)
    if patch_sets is None:
        from ..config import Config
        from ..registry import all_patch_sets

        config = config or Config.from_env()
        patch_sets, _ = all_patch_sets(config.patch_modules)
        from ..selection import validate_ids

        validate_ids(config, patch_sets)
    elif config is None:
        from ..config import Config

        config = Config()
    index = index_for(patch_sets, config, backend)
    selected_sets = sorted({p.set_id for p in index.patches if p.set_id})
    root = os.path.abspath(paths[0]) if len(paths) == 1 else os.path.commonpath([os.path.abspath(p) for p in paths])
    base = root if os.path.isdir(root) else os.path.dirname(root)
    findings, errors, skipped, count = [], [], [], 0
    imported: set[str] = set()  # top-level modules the scanned files import
    own_names: set[str] = set()  # the scanned tree's own module and package names
    for top in paths:
        for file in iter_python_files(top):
            rel = os.path.relpath(os.path.abspath(file), base)
            own_names.update(part.removesuffix(".py") for part in rel.split(os.sep))
            try:
                source = read_regular_file(file)
            except NotRegularFile as exc:
                skipped.append((rel, str(exc)))
                continue
            except OSError as exc:
                count += 1
                errors.append((rel, f"{type(exc).__name__}: {exc.strerror or exc}"))
                continue
            count += 1
            try:
                raw = scan_source(source, rel, imported)
            except (SyntaxError, ValueError, UnicodeDecodeError, OSError, RecursionError, MemoryError) as exc:
                line = getattr(exc, "lineno", None)
                msg = f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}" + (f" (line {line})" if line else "")
                errors.append((rel, msg))
                continue
            for r in raw:
                v = index.verdict_of(r)
                findings.append(Finding(rel, r.line, r.col, r.category, r.symbol, v.verdict, v.patches, r.text,
                                        v.reason, r.keys))
    findings.sort(key=lambda f: (f.path, f.line, f.col, f.symbol))
    from .rule import classify_imports

    rule = classify_imports(imported, own_names, patch_sets, {p.id for p in index.patches}, config)
    return ScanResult(root, findings, errors, count, selected_sets, skipped, rule)


def build_parser() -> argparse.ArgumentParser:
    from ..config import add_options

    p = argparse.ArgumentParser(
        prog="ascend-shim scan", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Static scan of a repository's .py files for CUDA-specific code, with the shim's coverage "
                    "of each finding (from the patch-set metadata).",
        epilog="categories:\n" + "\n".join(f"  {c:<14} {d}" for c, d in CATEGORIES.items())
        + "\n\nexit code: 1 when something unsupported was found, 0 otherwise, 2 on usage errors")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a repository checkout, a folder or a .py file")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="JSON output")
    fmt.add_argument("--csv", action="store_true", help="CSV output (one row per finding)")
    p.add_argument("--only-unsupported", action="store_true", help="show only findings judged unsupported")
    add_options(p, "patch_modules", "backend")
    return p


def main(argv=None) -> int:
    from ..config import Config
    from ..errors import ConfigError

    parser = build_parser()
    try:
        ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    missing = [p for p in ns.paths if not os.path.exists(p)]
    if missing:
        print(f"ascend-shim scan: error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        config = Config.from_env(patch_modules=ns.patch_modules)
        result = scan_paths(ns.paths, config=config, backend=ns.backend)
    except ConfigError as exc:
        print(f"ascend-shim scan: error: {exc}", file=sys.stderr)
        return 2
    from . import output

    shown = result.unsupported if ns.only_unsupported else result.findings
    if ns.json:
        sys.stdout.write(output.to_json(result, shown) + "\n")
    elif ns.csv:
        sys.stdout.write(output.to_csv(shown))
        for line in output.problem_lines(result):
            print(f"ascend-shim scan: {line}", file=sys.stderr)
    else:
        sys.stdout.write(output.to_text(result, shown))
    return 1 if result.unsupported else 0


__all__ = ["Finding", "ScanResult", "scan_paths", "main", "symbol_for", "target_symbol", "CATEGORIES",
           "KNOWN_UNSUPPORTED", "VERDICTS", "SKIP_DIRS"]
