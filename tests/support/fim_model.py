"""A small test model that has fill-in-the-middle tokens, built offline in a moment.

The default model's tokenizer (SmolLM2) has none, so this copies its folder (the ONNX
files as symlinks) with three of its unused special tokens renamed to StarCoder's FIM
spelling: ``<repo_name>`` (3) → ``<fim_prefix>``, ``<reponame>`` (4) → ``<fim_suffix>``,
``<file_sep>`` (5) → ``<fim_middle>``. The weights never learnt FIM, so what it writes
means nothing; the prompt it is given — which token ids, in which order — is what the
tests check, with the real tokenizer, the real worker and the real server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RENAMED = {"<repo_name>": "<fim_prefix>", "<reponame>": "<fim_suffix>", "<file_sep>": "<fim_middle>"}
FIM_IDS = {"<fim_prefix>": 3, "<fim_suffix>": 4, "<fim_middle>": 5}
LINKED = ("model.onnx", "model.onnx.data", "genai_config.json", "chat_template.jinja", "tokenizer_config.json")


def build_fim_model(source: Path, target: Path) -> Path:
    """``target``, a copy of the model at ``source`` whose tokenizer has FIM tokens."""
    if (target / "tokenizer.json").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = target / name
        if (source / name).exists() and not link.exists():
            os.symlink((source / name).resolve(), link)
    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    for added in tokenizer["added_tokens"]:
        added["content"] = RENAMED.get(added["content"], added["content"])
    vocab = tokenizer["model"]["vocab"]
    for old, new in RENAMED.items():
        vocab[new] = vocab.pop(old)
    partial = target / "tokenizer.json.partial"
    partial.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    partial.replace(target / "tokenizer.json")
    return target
