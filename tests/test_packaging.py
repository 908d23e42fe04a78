"""What ``pip install`` puts into site-packages: the package ``dragoman`` and nothing else
beside it (issue 25: the layers were once installed as top-level ``proxy``, ``config``,
``adapters`` and ``backends``, names PyPI packages also use), with the files it reads at
run time and the ``dragoman`` command."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_one_package_with_its_data_and_command(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("dragoman-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(name.rpartition("/")[0] for name in names if name.endswith(".dist-info/RECORD"))
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert top_level == ["dragoman"]
    assert {name.split("/")[0] for name in names} == {"dragoman", info}
    for data in ("dragoman/config/default.yaml", "dragoman/proxy/ui/templates/index.html", "dragoman/__main__.py"):
        assert data in names
    assert "dragoman = dragoman.proxy.cli:main" in entry_points


def test_python_dash_m_dragoman_is_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "dragoman", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "serve" in result.stdout
