"""The README's two commands are the ones CI and users run; the configs and links in the
README and docs/ are real."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PENDING: set[Path] = set()  # pages linked before they are written (none now)


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands() -> None:
    serve, test = readme_commands()
    assert serve.endswith("dragoman serve")
    assert "pytest" in test


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_readme_is_read_in_five_minutes() -> None:
    """The rest lives in docs/ (issue 25): a README past ~300 lines has grown a section."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 300, f"README.md is {lines} lines; move the detail to a docs/ page"


def test_config_reference_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented config is a real one: every key in it exists."""
    from dragoman.backends.registry import settings_type
    from dragoman.config import parse_config

    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## Configuration reference", 1)[1]
    example = re.search(r"```yaml\n(.+?)\n```", section, re.S).group(1)
    (tmp_path / "keys.txt").write_text("k1\n")
    monkeypatch.setenv("UPSTREAM_KEY", "secret")
    monkeypatch.delenv("DRAGOMAN_API_KEYS", raising=False)
    config = parse_config(example, str(tmp_path / "dragoman.yaml"), settings_type)
    assert [m.config.name for m in config.models] == ["smollm2:135m", "remote-model", "llama*"]
    assert config.api_keys == ["k1"]


def test_every_whole_config_in_the_docs_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dragoman.backends.registry import settings_type
    from dragoman.config import parse_config

    monkeypatch.setenv("UPSTREAM_KEY", "secret")
    (tmp_path / "keys.txt").write_text("k1\n")
    blocks = [b for page in PAGES for b in re.findall(r"```yaml\n(.+?)\n```", page.read_text(), re.S)
              if b.startswith(("models:", "server:"))]
    assert len(blocks) >= 4
    for block in blocks:
        assert parse_config(block, str(tmp_path / "c.yaml"), settings_type).models


def heading_anchors(markdown: str) -> set[str]:
    """The ids GitHub gives a page's headings (code blocks hold no headings)."""
    prose = re.sub(r"(?ms)^```.*?^```", "", markdown)
    anchors: set[str] = set()
    for title in re.findall(r"(?m)^#{1,6} (.+?)\s*$", prose):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in anchors:
            n += 1
            unique = f"{slug}-{n}"
        anchors.add(unique)
    return anchors


def local_links(page: Path) -> list[tuple[Path, str]]:
    prose = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    links = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        links.append(((page.parent / path).resolve() if path else page, anchor))
    return links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_reach_a_file_and_a_heading(page: Path) -> None:
    """Sections moved between the README and docs/ leave no link pointing at nothing."""
    broken = []
    for target, anchor in local_links(page):
        if target in PENDING:
            continue
        if not target.exists():
            broken.append(f"{target.relative_to(ROOT)} (no such file)")
        elif anchor and anchor not in heading_anchors(target.read_text()):
            broken.append(f"{target.relative_to(ROOT)}#{anchor} (no such heading)")
    assert broken == []
