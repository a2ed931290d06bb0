"""The documentation is generated where it can be, the README stays a short user's page, and its test command
is what CI runs."""
import os
import re
from pathlib import Path

from ascend_shim import gendocs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_generated_pages_match_the_declarations():
    assert gendocs.stale() == [], "docs are stale: run `python -m ascend_shim.gendocs`"


def test_readme_is_a_short_page_that_links_the_generated_ones():
    readme = Path(ROOT, "README.md").read_text()
    assert len(readme.splitlines()) <= 180
    for page in ("coverage", "configuration", "emulator", "libraries", "performance", "extending"):
        assert f"](docs/{page}.md)" in readme, page
    assert "| patch | target |" not in readme  # no generated table in the README itself
    first_table = readme.find("\n|")
    assert readme.find("run --simulate examples/train_cuda.py") < first_table  # the main job comes first


def test_ci_runs_the_readme_set_up_commands_in_a_fresh_venv():
    """CI runs both README commands as written, in a venv it has just made (a newcomer's machine), lint first."""
    readme = Path(ROOT, "README.md").read_text()
    setup = readme[readme.index("## Set-up"):readme.index("\n## ", readme.index("## Set-up") + 1)]
    commands = re.findall(r"```bash\n(.*?)\n```", setup, re.S)
    assert len(commands) == 2 and "pytest" in commands[1]
    ci = Path(ROOT, ".ci", "run").read_text().splitlines()
    venv_line = next(i for i, line in enumerate(ci) if line.startswith("python3 -m venv "))
    activate_line = next(i for i, line in enumerate(ci) if line.startswith("source ") and "/bin/activate" in line)
    positions = [ci.index(command) for command in commands]  # ValueError: a command is not run as written
    assert venv_line < activate_line < positions[0] < positions[1]
    assert activate_line < ci.index("ruff check .") < positions[1] and activate_line < ci.index("mypy") < positions[1]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_of_the_readme_and_the_docs_resolve():
    """Every relative link of README.md and docs/*.md names a file or folder of the repository, and a heading
    where it names one (``page.md#anchor``); code blocks are not read."""
    pages = [Path(ROOT, "README.md"), *sorted(Path(ROOT, "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.name}: {link}")
            elif anchor and target.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", target.read_text(), flags=re.S), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.name}: {link} (no such heading)")
    assert broken == []
