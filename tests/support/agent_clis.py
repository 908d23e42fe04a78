"""Claude Code and Codex from the npm registry, into the git-ignored ``.agent-clis/``.

Installed once (a later session finds them there) with the versions pinned exactly.
Where npm or the registry is missing the tests are skipped, saying which; nothing else
is ever fetched at test time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".agent-clis"
PACKAGES = {"@anthropic-ai/claude-code": "2.1.197", "@openai/codex": "0.171.0"}
INSTALL_TIMEOUT = 600  # seconds; the two packages are ~300 MB with their platform binaries


@dataclass(frozen=True)
class AgentCLIs:
    claude: Path
    codex: Path


def _installed() -> bool:
    for name, version in PACKAGES.items():
        manifest = FOLDER / "node_modules" / name / "package.json"
        try:
            if json.loads(manifest.read_text())["version"] != version:
                return False
        except (OSError, ValueError, KeyError):
            return False
    return all((FOLDER / "node_modules" / ".bin" / cli).exists() for cli in ("claude", "codex"))


def install_agent_clis() -> AgentCLIs:
    if not _installed():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: it is needed to install Claude Code and Codex from the npm registry")
        FOLDER.mkdir(exist_ok=True)
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        command = [npm, "install", "--prefix", str(FOLDER), "--save-exact", "--no-audit", "--no-fund", *specs]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm did not install {', '.join(specs)} within {INSTALL_TIMEOUT}s (is the registry reachable?)")
        if done.returncode != 0 or not _installed():
            pytest.skip(f"npm could not install {', '.join(specs)}: {(done.stderr or done.stdout)[-800:]}")
    bins = FOLDER / "node_modules" / ".bin"
    return AgentCLIs(claude=bins / "claude", codex=bins / "codex")
