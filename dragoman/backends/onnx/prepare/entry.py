"""The config entry for a built model: printed for pasting, or added to a config file
(``--add-to``) by inserting text into its ``models:`` list, so the rest of the file —
comments, order, ``${VAR}`` references — stays as written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from dragoman.backends.onnx.prepare.catalogue import Build
from dragoman.backends.onnx.prepare.support import PrepareError, write_atomically

DEFAULT_CONTEXT = 4096  # Ollama's default num_ctx; the KV cache grows with it
# On the first line of an entry --add-to wrote: `models rm --remove-entry` removes only those.
ADDED = "# added by dragoman --add-to"


def yaml_entry(build: Build, name: str, indent: str = "  ", *, marked: bool = False) -> str:
    """``  - name: …`` lines (JSON scalars are YAML scalars, so quoting is exact);
    ``marked``: the first line says --add-to wrote it."""
    record = build.record
    lines = [
        f"- name: {json.dumps(name)}" + (f"   {ADDED}" if marked else ""),
        "  backend: onnx",
        f"  model: {build.id}   # {build.path}",
        f"  provider: {record.provider}",
    ]
    if record.context_length:
        context = min(record.context_length, DEFAULT_CONTEXT)
        note = f"   # the model allows {record.context_length}" if context < record.context_length else ""
        lines.append(f"  context_length: {context}{note}")
    if record.defaults:
        lines.append(f"  defaults: {json.dumps(record.defaults, ensure_ascii=False)}")
    if record.system:
        lines.append(f"  system: {json.dumps(record.system, ensure_ascii=False)}")
    return "".join(f"{indent}{line}\n" for line in lines)


def add_to_config(path: Path, build: Build, name: str) -> None:
    """Insert the entry into ``path``'s ``models:`` list (creating the file or the key
    when missing); refuses a name the file already has or a file that does not load."""
    from dragoman.backends.registry import settings_type
    from dragoman.config import ConfigError, parse_config

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        data: Any = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise PrepareError(f"{path} is not valid YAML ({exc}); not changing it") from exc
    models = (data or {}).get("models") if isinstance(data, dict) else None
    if isinstance(models, list) and any(isinstance(m, dict) and m.get("name") == name for m in models):
        raise PrepareError(f"{path} already has a model named '{name}'; remove that entry or pass another --name")
    updated = insert_entry(text, lambda indent: yaml_entry(build, name, indent, marked=True))
    try:
        parse_config(updated, str(path), settings_type)
    except ConfigError as exc:
        raise PrepareError(f"adding the entry would leave {path} invalid ({exc}); not changing it") from exc
    write_atomically(path, updated)


def without_entry(path: Path, name: str) -> str:
    """``path``'s text without the entry named ``name`` that --add-to wrote (its marked
    first line and the lines indented under it); refused when the file has no such entry
    or would not load without it."""
    from dragoman.backends.registry import settings_type
    from dragoman.config import ConfigError, parse_config

    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except OSError as exc:
        raise PrepareError(f"cannot read {path}: {exc.strerror or exc}") from None
    head = re.compile(rf"^(\s*)- name: {re.escape(json.dumps(name))}\s+{re.escape(ADDED)}\s*$")
    for number, line in enumerate(lines):
        match = head.match(line)
        if match is None:
            continue
        inner = match.group(1) + "  "
        end = number + 1
        while end < len(lines) and lines[end].startswith(inner) and not lines[end][len(inner):].startswith("-"):
            end += 1
        updated = "".join(lines[:number] + lines[end:])
        try:
            parse_config(updated, str(path), settings_type)
        except ConfigError as exc:
            raise PrepareError(f"removing the entry '{name}' would leave {path} invalid ({exc}); edit it by hand") from exc
        return updated
    raise PrepareError(f"{path} has no entry '{name}' that --add-to wrote (its first line ends '{ADDED}'); "
                       "an entry written by hand is removed by hand")  # fmt: skip


_MODELS = re.compile(r"^models:[ \t]*(\[\])?[ \t]*(#.*)?$", re.M)


def insert_entry(text: str, entry_for: Any) -> str:
    """``text`` with the entry after the last line of its top-level ``models:`` block."""
    match = _MODELS.search(text)
    if match is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{sep}models:\n{entry_for('  ')}"
    if match.group(1):  # models: []
        return text[: match.start()] + "models:\n" + entry_for("  ") + text[match.end() :].lstrip("\n")
    lines = text[match.end() :].split("\n")
    if lines and lines[0] == "":
        lines = lines[1:]
    end = 0  # lines belonging to the block: indented, list items, comments, blanks
    indent = "  "
    for number, line in enumerate(lines):
        if line.strip() == "" or line.startswith("#"):
            continue  # blanks and column-0 comments neither end the block nor belong to its last item
        if line.startswith((" ", "\t", "-")):
            end = number + 1
            if line.lstrip().startswith("- ") and not line.lstrip().startswith("#"):
                indent = line[: len(line) - len(line.lstrip())]
            continue
        break
    head = text[: match.end()] + "\n"
    block = "\n".join(lines[:end])
    rest = "\n".join(lines[end:])
    block = f"{block}\n" if block else ""
    rest = rest if rest.strip() else ""
    return head + block + entry_for(indent) + (rest if rest.endswith("\n") or not rest else rest + "\n")
