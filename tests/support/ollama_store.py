"""An Ollama model store written exactly as Ollama writes one (ollama/ollama at
fb30760, ``manifest/layer.go`` NewLayer, ``manifest/manifest.go`` WriteManifest,
``server/create.go`` createConfigLayer and setTemplate/setSystem/setParameters):

- every layer is a blob ``blobs/sha256-<hex>`` named by its content's sha256, mode 0644;
- the config layer is ``model.ConfigV2`` JSON (Go's json.Encoder: compact, a trailing
  newline, fields in struct order, empty ``omitempty`` ones left out), media type
  ``application/vnd.docker.container.image.v1+json``;
- the params layer is the options map as JSON (Go sorts map keys);
- the manifest ``{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
  "config":{…},"layers":[…]}`` (layers as ``mediaType``, ``digest``, ``size``) is written to
  ``manifests/registry.ollama.ai/library/<model>/<tag>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from dragoman.backends.gguf_file import read_gguf


def _go_json(value: Any) -> bytes:
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs").mkdir(parents=True, exist_ok=True)

    def layer(self, data: bytes | Path, media_type: str) -> dict[str, Any]:
        """NewLayer: copy into a temp file while hashing, rename to its digest."""
        digest = hashlib.sha256()
        temp = self.root / "blobs" / f"sha256-tmp-{os.getpid()}"
        with temp.open("wb") as out:
            if isinstance(data, Path):
                with data.open("rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            else:
                digest.update(data)
                out.write(data)
        size = temp.stat().st_size
        blob = self.root / "blobs" / f"sha256-{digest.hexdigest()}"
        if blob.exists():
            temp.unlink()
        else:
            os.replace(temp, blob)
            blob.chmod(0o644)
        return {"mediaType": media_type, "digest": f"sha256:{digest.hexdigest()}", "size": size}

    def add_model(
        self,
        name: str,
        tag: str,
        gguf: Path,
        *,
        template: str | None = None,
        system: str | None = None,
        params: dict[str, Any] | None = None,
        license: str | None = None,
        extra_layers: list[tuple[bytes, str]] = (),  # type: ignore[assignment]
        config_extra: dict[str, Any] | None = None,
    ) -> Path:
        header = read_gguf(gguf)
        arch = str(header.get("general.architecture"))
        layers = [self.layer(gguf, "application/vnd.ollama.image.model")]
        if template is not None:
            layers.append(self.layer(template.encode(), "application/vnd.ollama.image.template"))
        if system:
            layers.append(self.layer(system.encode(), "application/vnd.ollama.image.system"))
        if license is not None:
            layers.append(self.layer(license.encode(), "application/vnd.ollama.image.license"))
        if params:
            layers.append(self.layer(_go_json(dict(sorted(params.items()))), "application/vnd.ollama.image.params"))
        for data, media_type in extra_layers:
            layers.append(self.layer(data, media_type))
        # model.ConfigV2 in field order; omitempty fields only when set
        config: dict[str, Any] = {
            "model_format": "gguf",
            "model_family": arch,
            "model_families": [arch],
            "model_type": "135M",
            "file_type": "Q4_1",
            **(config_extra or {}),
            "architecture": "amd64",
            "os": "linux",
        }
        config_layer = self.layer(_go_json(config), "application/vnd.docker.container.image.v1+json")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": config_layer,
            "layers": layers,
        }
        path = self.root / "manifests" / "registry.ollama.ai" / "library" / name / tag
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_go_json(manifest))
        return path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# The Go template Ollama's library ships for smollm2 (ollama.com/library/smollm2, blob dfebd0343bdd).
SMOLLM2_TEMPLATE = """{{- if .Messages }}
{{- if .Tools }}<|im_start|>system
You are an expert in composing functions. You are given a question and a set of possible functions.
Based on the question, you will need to make one or more function/tool calls to achieve the purpose.
If none of the functions can be used, point it out and refuse to answer.
If the given question lacks the parameters required by the function, also point it out.
You have access to the following tools:
<tools>{{ .Tools }}</tools>
The output MUST strictly adhere to the following format, and NO other text MUST be included.
The example format is as follows. Please make sure the parameter type is correct. If no function call is needed, please make the tool calls an empty list '[]'.
<tool_call>[
{"name": "func_name1", "arguments": {"argument1": "value1", "argument2": "value2"}},
(more tool calls as required)
]</tool_call><|im_end|>
{{ else if .System }}<|im_start|>system
{{ .System }}
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>[
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}{{ end }}
]</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}"""
