"""The documentation is generated where it can be, the README stays a short user's page, and its test command
is what CI runs."""
import os
import re

from ascend_shim import gendocs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_generated_pages_match_the_declarations():
    assert gendocs.stale() == [], "docs are stale: run `python -m ascend_shim.gendocs`"


def test_readme_is_a_short_page_that_links_the_generated_ones():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) < 250
    assert "docs/coverage.md" in readme and "docs/configuration.md" in readme
    assert "| patch | target |" not in readme  # no generated table in the README itself
    first_table = readme.find("\n|")
    assert readme.find("run --simulate examples/train_cuda.py") < first_table  # the main job comes first


def test_ci_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(c for c in commands if "pytest" in c)
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    for part in test_cmd.split("&&"):
        assert part.strip() in ci, part
