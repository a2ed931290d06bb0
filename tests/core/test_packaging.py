"""What a non-editable install ships: every package directory and every C++ source the emulator builds."""
from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[2]


def _package_dirs():
    for top in (REPO / "ascend_shim", REPO / "patches"):
        for directory in [top, *(d for d in top.rglob("*") if d.is_dir())]:
            if "__pycache__" in directory.parts or directory.name == "csrc" or "csrc" in directory.parts:
                continue
            if any(directory.glob("*.py")):
                yield directory


def _package_data() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


def _shipped_as_data(path: str, package: str) -> bool:
    return any(fnmatch.fnmatch(path, g) and path.count("/") == g.count("/") for g in _package_data().get(package, ()))


def test_every_python_directory_is_a_package_or_package_data():
    """setup.py collects packages with find_packages, which skips directories without ``__init__.py``: such a
    directory (the bootstrap ``sitecustomize``) ships only as package data of its parent package."""
    missing = []
    for directory in _package_dirs():
        if (directory / "__init__.py").exists():
            continue
        parent = ".".join(directory.relative_to(REPO).parts[:-1])
        if not all(_shipped_as_data(f"{directory.name}/{f.name}", parent) for f in directory.glob("*.py")):
            missing.append(str(directory.relative_to(REPO)))
    assert missing == []


def test_every_extension_source_is_package_data():
    from ascend_shim.sim import _extension

    extensions = [v for v in vars(_extension).values() if isinstance(v, _extension.Extension)]
    assert {e.name for e in extensions} >= {"_ascend_shim_sim", "_ascend_shim_sim_hccl"}
    for ext in extensions:
        for name in ext.sources + ext.headers:
            path = f"csrc/{name}"
            assert (REPO / "ascend_shim" / "sim" / path).is_file(), path
            assert _shipped_as_data(path, "ascend_shim.sim"), path


def _imported_top_level_names() -> set[str]:
    import ast

    names = set()
    for top in (REPO / "ascend_shim", REPO / "patches"):
        for path in top.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


#: declared for torch, which imports them itself: the reason each one is there
FOR_TORCH = {"numpy": "torch's wheels do not require it, and without it every import of torch warns"}


def test_every_declared_dependency_is_imported():
    """Declared and never imported is a defect: each runtime dependency and each extra but ``test`` is used
    (by the shim, or by torch where :data:`FOR_TORCH` says why)."""
    import re

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        if extra != "test":
            declared += requirements
    imported = _imported_top_level_names() | set(FOR_TORCH)
    unused = [r for r in declared if re.sub(r"[-.]", "_", Requirement(r).name.lower()) not in imported]
    assert unused == []
