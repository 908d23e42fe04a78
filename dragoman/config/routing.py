"""Which model entry serves a requested name: exact name, then alias, then glob pattern."""

from __future__ import annotations

from fnmatch import fnmatchcase

from dragoman.config.schema import Config, ModelRoute


def resolve(config: Config, name: str) -> ModelRoute | None:
    """The route for ``name``, or None. Ollama clients treat ``NAME`` and ``NAME:latest``
    as one model, so either spelling finds an entry written the other way."""
    route = _resolve(config, name)
    if route is None and name.endswith(":latest"):
        route = _resolve(config, name.removesuffix(":latest"))
    elif route is None and ":" not in name:
        route = _resolve(config, name + ":latest")
    return route


def _resolve(config: Config, name: str) -> ModelRoute | None:
    """Patterns are tried in file order, after every exact name and alias, so a
    specific entry always beats a catch-all."""
    exact = {route.config.name: route for route in config.models if not route.config.is_pattern}
    if name in exact:
        return exact[name]
    target = config.aliases.get(name)
    if target is not None:
        return next((r for r in config.models if r.config.name == target), None)
    for route in config.models:
        if route.config.is_pattern and fnmatchcase(name, route.config.name):
            return route
    return None


def routing_table(config: Config) -> list[tuple[str, str, str]]:
    """(name or pattern, backend, how it matches) rows for ``dragoman config check``."""
    rows = [(r.config.name, r.config.backend, "pattern" if r.config.is_pattern else "exact") for r in config.models]
    rows += [(alias, _backend_of(config, target), f"alias of {target}") for alias, target in config.aliases.items()]
    return rows


def check_report(config: Config) -> list[str]:
    """The lines ``dragoman config check`` prints (the web page shows the same)."""
    rows = routing_table(config)
    width = max((len(name) for name, _, _ in rows), default=4)
    lines = [f"{config.source}: OK, {len(config.models)} model entries, {len(config.aliases)} aliases"]
    lines.append(f"{'NAME':<{width}}  {'BACKEND':<14} MATCH")
    lines += [f"{name:<{width}}  {backend:<14} {how}" for name, backend, how in rows]
    return lines


def _backend_of(config: Config, name: str) -> str:
    return next((r.config.backend for r in config.models if r.config.name == name), "?")
