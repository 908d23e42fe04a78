"""Reading a config file: YAML with line numbers, ``${ENV}`` expansion, strict decoding.

Errors name the file, the line and the key (``models[1].provider``), because a
gateway that refuses to start must say exactly what to fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import yaml

from dragoman.adapters.durations import parse_duration
from dragoman.config.schema import (
    COMMON_MODEL_KEYS,
    DEFAULT_KEEP_ALIVE,
    Config,
    KeyPolicy,
    ModelConfig,
    ModelRoute,
    RawConfig,
    ServerConfig,
)

DEFAULT_CONFIG = Path(__file__).with_name("default.yaml")

# ${NAME} or ${NAME:-fallback}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """A config that cannot be used; the message names file, line and key."""


SettingsLookup = Callable[[str], type[msgspec.Struct]]


def load_config(path: str | Path | None, settings_for: SettingsLookup) -> Config:
    """Read ``path`` (or the built-in default config) into a :class:`Config`.

    ``settings_for(backend_name)`` gives the backend's ``Settings`` struct (it raises
    ``KeyError`` for an unknown backend).
    """
    source = Path(path).expanduser() if path is not None else DEFAULT_CONFIG
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file: {exc.strerror or exc}") from exc
    return parse_config(text, str(source), settings_for)


def parse_config(text: str, source: str, settings_for: SettingsLookup) -> Config:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if root is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least a 'models:' list")

    locate = _Locator(root, source)
    data = _to_python(root, locate)
    raw = _convert(data, RawConfig, locate, "")
    routes = [_model_route(entry, i, settings_for, locate) for i, entry in enumerate(raw.models)]
    _check_names(routes, raw.aliases, locate)
    keys = _api_keys(raw.server, Path(source).parent, locate)
    policies = _key_policies(raw.server, locate)
    return Config(server=raw.server, models=routes, aliases=raw.aliases, source=source, api_keys=keys, key_policies=policies)


def _api_keys(server: ServerConfig, base: Path, locate: _Locator) -> list[str]:
    """Keys from the list, the comma/space-separated string, and the keys file."""
    listed = server.api_keys.replace(",", " ").split() if isinstance(server.api_keys, str) else server.api_keys
    keys = [k.strip() for k in (entry.key if isinstance(entry, KeyPolicy) else entry for entry in listed) if k.strip()]
    if server.api_keys_file:
        path = (base / Path(server.api_keys_file).expanduser()).resolve()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise locate.error("server.api_keys_file", f"cannot read {path}: {exc.strerror or exc}") from None
        keys += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
    return keys


def _key_policies(server: ServerConfig, locate: _Locator) -> list[KeyPolicy]:
    """The keys given as objects; their names are what usage is counted under, so unique."""
    policies = [entry for entry in server.api_keys if isinstance(entry, KeyPolicy)] if isinstance(server.api_keys, list) else []
    seen: set[str] = set()
    for policy in policies:
        if not policy.key.strip() or not policy.name.strip():
            raise locate.error("server.api_keys", "a key given as an object needs a non-empty 'key' and 'name'")
        if policy.name in seen:
            raise locate.error("server.api_keys", f"two keys are named '{policy.name}'; usage is counted by name: name each once")
        seen.add(policy.name)
    return policies


def _model_route(entry: Any, index: int, settings_for: SettingsLookup, locate: _Locator) -> ModelRoute:
    prefix = f"models[{index}]"
    if not isinstance(entry, dict):
        raise locate.error(prefix, "a model entry must be a mapping with 'name' and 'backend'")
    common = {k: v for k, v in entry.items() if k in COMMON_MODEL_KEYS}
    rest = {k: v for k, v in entry.items() if k not in COMMON_MODEL_KEYS}
    model = _convert(common, ModelConfig, locate, prefix)
    try:
        settings_type = settings_for(model.backend)
    except KeyError as exc:
        raise locate.error(f"{prefix}.backend", str(exc.args[0]) if exc.args else "unknown backend") from None
    settings = _convert(rest, settings_type, locate, prefix)
    try:
        keep_alive = DEFAULT_KEEP_ALIVE if model.keep_alive is None else parse_duration(model.keep_alive)
    except ValueError as exc:
        raise locate.error(f"{prefix}.keep_alive", str(exc)) from None
    return ModelRoute(config=model, settings=settings, keep_alive=keep_alive)


def _check_names(routes: list[ModelRoute], aliases: dict[str, str], locate: _Locator) -> None:
    seen: set[str] = set()
    for i, route in enumerate(routes):
        if route.config.name in seen:
            raise locate.error(f"models[{i}].name", f"model '{route.config.name}' is defined twice")
        seen.add(route.config.name)
    for alias, target in aliases.items():
        if target not in seen:
            raise locate.error(
                f"aliases.{alias}", f"alias '{alias}' points to '{target}', which is not a model name in 'models'"
            )


def _convert(data: Any, type_: type, locate: _Locator, prefix: str) -> Any:
    try:
        return msgspec.convert(data, type_, strict=True)
    except msgspec.ValidationError as exc:
        message, path = _split_validation_error(str(exc))
        full = ".".join(p for p in (prefix, path) if p).replace(".[", "[")
        raise locate.error(full, _explain(message)) from None


def _split_validation_error(text: str) -> tuple[str, str]:
    """msgspec says "Expected `int`, got `str` - at `$.server.port`"."""
    match = re.match(r"(.*?)(?: - at `\$\.?(.*)`)?$", text, re.S)
    assert match is not None
    message, path = match.group(1), match.group(2) or ""
    unknown = re.match(r"Object contains unknown field `(.+)`", message)
    if unknown:  # point at the unknown key itself
        path = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
    return message, path


def _explain(message: str) -> str:
    unknown = re.match(r"Object contains unknown field `(.+)`", message)
    if unknown:
        return f"unknown key '{unknown.group(1)}' (check its spelling and the config reference in docs/configuration.md)"
    # msgspec speaks JSON; config authors write YAML.
    return message.replace("`object`", "a mapping (key: value)").replace("`array`", "a list")


def _expand_env(value: str, locate: _Locator, node: yaml.Node) -> str:
    def replace(match: re.Match[str]) -> str:
        name, fallback = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is not None and found != "":
            return found
        if fallback is not None:
            return fallback
        raise ConfigError(
            f"{locate.source}:{node.start_mark.line + 1}: environment variable {name} is not set "
            f"(set it, or write ${{{name}:-default}})"
        )

    return _ENV_REF.sub(replace, value)


def _to_python(node: yaml.Node, locate: _Locator) -> Any:
    """Plain Python values from the composed node tree, expanding ``${ENV}`` in strings."""
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _to_python(key_node, locate)
            if key in out:
                raise ConfigError(f"{locate.source}:{key_node.start_mark.line + 1}: duplicate key '{key}'")
            out[key] = _to_python(value_node, locate)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, locate) for item in node.value]
    value = locate.constructor.construct_object(node, deep=True)  # the scalar's YAML type
    if isinstance(value, str) and "${" in value:
        return _expand_env(value, locate, node)
    return value


class _Locator:
    """Finds the line of a key path like ``models[1].provider`` in the node tree."""

    def __init__(self, root: yaml.Node, source: str) -> None:
        self.root = root
        self.source = source
        self.constructor = yaml.SafeLoader("")

    def line_of(self, path: str) -> int | None:
        node: yaml.Node | None = self.root
        line: int = self.root.start_mark.line + 1
        for step in re.findall(r"[^.\[\]]+|\[\d+\]", path):
            if node is None:
                break
            if step.startswith("["):
                index = int(step[1:-1])
                if isinstance(node, yaml.SequenceNode) and index < len(node.value):
                    node = node.value[index]
                    line = node.start_mark.line + 1
                else:
                    node = None
            elif isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == step:
                        line = key_node.start_mark.line + 1
                        node = value_node
                        break
                else:
                    node = None
            else:
                node = None
        return line

    def error(self, path: str, message: str) -> ConfigError:
        line = self.line_of(path)
        where = f"{self.source}:{line}" if line else self.source
        key = f" {path}:" if path else ""
        return ConfigError(f"{where}:{key} {message}")
