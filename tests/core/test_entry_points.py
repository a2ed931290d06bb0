"""Third-party patch sets through the ``ascend_shim.patch_sets`` entry-point group, and the metadata reads
activation makes (the same answers as ``importlib.metadata``, without parsing every distribution)."""
from __future__ import annotations

import importlib.metadata
import textwrap

import pytest

from ascend_shim import registry, versions

PLUGIN = '''
from ascend_shim.registry import Patch, PatchSet

PATCH_SETS = [PatchSet(id="{name}", title="a third-party set")]
PATCH_SETS[0].add(Patch(id="{name}.one", target="{name}_target:thing", kind="replace", why="a test", what="nothing",
                        remove_when="never: a test", factory=lambda ctx: None))
'''


def _distribution(root, dist: str, version: str, entry_points: str, module: str | None = None):
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nA long "
                                   "description.\nVersion: 0.0.0 (not a header)\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    if module:
        (root / f"{dist}.py").write_text(module.replace("{name}", dist))


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    _distribution(first, "shimplugin_a", "1.2", "[ascend_shim.patch_sets]\nmine = shimplugin_a:PATCH_SETS\n\n"
                  "[console_scripts]\nshimplugin-a = shimplugin_a:main\n", PLUGIN)
    _distribution(first, "shimplugin_broken", "0.1", "[ascend_shim.patch_sets]\nbroken = no_such_module_xyz\n")
    # the same distribution again, later on sys.path: shadowed, as importlib.metadata has it
    _distribution(second, "shimplugin_a", "9.9", "[ascend_shim.patch_sets]\nmine = shimplugin_a:PATCH_SETS\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    importlib.invalidate_caches()
    versions.forget_installed()
    yield
    versions.forget_installed()


def test_entry_point_sets_are_found_once_and_a_broken_one_is_reported(plugins):
    sets, errors = registry.entry_point_patch_sets()
    assert [(s.id, s.source) for s in sets] == [("shimplugin_a", "entry point mine (shimplugin_a:PATCH_SETS)")]
    assert [name for name, _ in errors] == ["broken"] and "no_such_module_xyz" in errors[0][1]
    assert "shimplugin_a" in {s.id for s in registry.all_patch_sets()[0]}


@pytest.mark.parametrize("group", ["ascend_shim.patch_sets", "console_scripts", "pytest11"])
def test_entry_points_match_importlib_metadata(plugins, group):
    ours = sorted((ep.name, ep.value, ep.dist.name) for ep in registry._entry_points(group))
    theirs = sorted((ep.name, ep.value, ep.dist.name) for ep in importlib.metadata.entry_points(group=group))
    assert ours == theirs and ours


def test_versions_match_importlib_metadata_for_every_installed_distribution(plugins):
    assert versions.installed_version("shimplugin_a") == "1.2"  # the first on sys.path; the description ignored
    differ = {d.metadata["Name"]: (versions.version_of(d), d.version) for d in importlib.metadata.distributions()
              if versions.version_of(d) != d.version}
    assert not differ
