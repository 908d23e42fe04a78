"""An installed wheel carries the page: its template and every static file."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "dragoman" / "proxy" / "ui"


def test_the_wheel_holds_the_page(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the worktree
    shutil.copytree(ROOT / "dragoman", source / "dragoman", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("dragoman-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"dragoman/proxy/ui/{p.relative_to(UI).as_posix()}" for p in UI.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {n for n in wanted if n.startswith(("dragoman/proxy/ui/static/", "dragoman/proxy/ui/templates/"))}, "nothing to look for"
    assert wanted - names == set()
