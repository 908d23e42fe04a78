"""``hf:`` model names: a Hugging Face repository, and what in it to pull.

- ``hf:ORG/REPO``: a repository holding onnxruntime-genai folders (a folder with
  ``genai_config.json``; the published ``*-onnx`` repositories have one per target,
  ``cpu_and_mobile/cpu-int4-…``, ``cuda/…``, ``directml/…``): the one for the provider;
- ``hf:ORG/REPO/FOLDER[/…]``: that folder of it;
- ``hf:ORG/REPO/[FOLDER/]FILE.gguf``: a GGUF file, built as ``prepare`` builds one.

Checked here, before any request: Hugging Face's own rules for a repository id (letters,
digits, ``-``, ``_``, ``.``; no ``--`` or ``..``; at most 96 characters each side) and
plain relative path parts.
"""

from __future__ import annotations

import re

import msgspec

from dragoman.backends.onnx.prepare.support import PrepareError

PREFIX = "hf:"
MAX_PART = 96
MAX_PATH = 256
_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PATH_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class HfName(msgspec.Struct, frozen=True):
    repo: str  # ORG/REPO
    path: str = ""  # a folder or a .gguf file in it; "" = the folder for the provider

    @property
    def display(self) -> str:
        return f"{PREFIX}{self.repo}" + (f"/{self.path}" if self.path else "")

    @property
    def is_gguf(self) -> bool:
        return self.path.lower().endswith(".gguf")


def is_hf(name: str) -> bool:
    return name.startswith(PREFIX)


def parse(text: str) -> HfName:
    """``text`` (``hf:ORG/REPO[/PATH]``) as an :class:`HfName`; a :class:`PrepareError`
    saying what is wrong otherwise."""
    if not is_hf(text):
        raise PrepareError(f"'{text}' is not a Hugging Face name (hf:ORG/REPO or hf:ORG/REPO/FILE.gguf)")
    parts = text.removeprefix(PREFIX).split("/")
    if len(parts) < 2:
        raise PrepareError(f"'{text}': a Hugging Face name is hf:ORG/REPO (for example "
                           "hf:microsoft/Phi-3-mini-4k-instruct-onnx) or hf:ORG/REPO/FILE.gguf")  # fmt: skip
    for part in parts[:2]:
        if len(part) > MAX_PART or not _PART.match(part) or "--" in part or ".." in part:
            raise PrepareError(f"'{text}': '{part[:MAX_PART]}' is not a Hugging Face organisation or repository name "
                               f"(letters, digits, '-', '_' and '.', at most {MAX_PART}; no '--' or '..'; "
                               "a letter or digit at each end)")  # fmt: skip
    path = parts[2:]
    if len("/".join(path)) > MAX_PATH:
        raise PrepareError(f"'{text[:80]}…': the path in the repository is over {MAX_PATH} characters")
    for part in path:
        if not _PATH_PART.match(part):
            raise PrepareError(f"'{text}': '{part}' is not a plain file or folder name (letters, digits, '-', '_', "
                               "'.'; not starting with '.')")  # fmt: skip
    return HfName("/".join(parts[:2]), "/".join(path))


__all__ = ["HfName", "is_hf", "parse"]
