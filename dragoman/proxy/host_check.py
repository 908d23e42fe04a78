"""Which ``Host`` names the server answers: the defence against DNS rebinding.

A page on a name its owner controls (``evil.example``) can re-point that name at
127.0.0.1 once it has loaded; the browser then takes the server on loopback for the
page's own origin and lets it read every reply (Ollama's CVE-2024-28224 was this). What
such a request cannot hide is its ``Host``, which still says ``evil.example``. So a
server bound to loopback answers only names that nobody else can re-point, and
addresses:

- ``localhost`` and ``*.localhost``: loopback by RFC 6761, resolved by browsers themselves;
- this machine's own name (``socket.gethostname()``), which its own resolver answers;
- an IP address as browsers write it (``127.0.0.1``, ``[::1]``): an address in a URL means
  no name was resolved, so nothing was rebound. Passed are loopback, unspecified
  (``0.0.0.0``, which browsers on Linux and macOS send to loopback) and the address the
  connection arrived on. ``0x7f000001`` and ``127.1`` are not what a browser sends (it
  writes them as ``127.0.0.1``), so they are names here, and refused;
- whatever ``server.allowed_hosts`` lists (names, ``*.domain``, addresses, or ``*``).

Ollama also passes every ``*.local`` and ``*.internal`` name and every private address.
Those are left to ``server.allowed_hosts`` here: a ``.local`` name is whatever the first
machine on the LAN to answer mDNS says, and ``.internal`` whatever the network's DNS says,
so they rebind like any other name. The port is not compared: a rebinding page must use
the server's own port to reach it at all.

Bound to any other address (``0.0.0.0``, a LAN address), the server is meant to be
reached by names it cannot know, so ``Host`` is checked only when ``server.allowed_hosts``
is set; API keys are what guard such a server, and start-up says so when it has none.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any

import msgspec

from dragoman.adapters.errors import DragomanError
from dragoman.config import Config
from dragoman.config.schema import ServerConfig, listed
from dragoman.proxy.errors import send_error

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
ASGIApp = Callable[..., Any]

_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
_AUTHORITY = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[^:\[\]]*)(?::(?P<port>[0-9]{0,5}))?")


class HostRules(msgspec.Struct, frozen=True):
    """The names and addresses a server answers; see the module's docstring."""

    bind: str  # the address the server is bound to, for the refusal's words
    loopback: bool  # whether that is loopback (else the rules are allowed_hosts')
    names: frozenset[str]  # lowercase, no trailing dot; addresses as :func:`canonical` writes them
    suffixes: tuple[str, ...]  # ".localhost", and ".lan" for a listed "*.lan"
    any_host: bool  # "*" listed: no check at all

    def allows(self, host: str, arrived_on: str | None) -> bool:
        """Whether ``host`` (as :func:`split_authority` gives it) is answered, on a
        connection that arrived on the address ``arrived_on``."""
        if self.any_host or host in self.names or host.endswith(self.suffixes):
            return True
        address = address_literal(host)
        if address is None:
            return False
        if canonical(address) in self.names or address.is_loopback or address.is_unspecified:
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            if address.ipv4_mapped.is_loopback:
                return True
        return arrived_on is not None and address == _parse_address(arrived_on)


def split_authority(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` as (lowercase host without one trailing dot, port); an IPv6
    address keeps its brackets. None when ``value`` is not a host and port."""
    match = _AUTHORITY.fullmatch(value.strip().lower())
    if match is None:
        return None
    host, port = match.group("host"), match.group("port")
    if host.startswith("["):
        if _parse_address(host[1:-1]) is None:
            return None
    elif not _NAME.fullmatch(host):
        return None
    return host.removesuffix("."), int(port) if port else None


def address_literal(host: str) -> Address | None:
    """``host`` as the address it writes in the form browsers send (dotted quad, IPv6 in
    brackets); None for a name, ``0x7f000001`` or ``127.1`` among them."""
    if host.startswith("["):
        address = _parse_address(host[1:-1])
        return address if isinstance(address, ipaddress.IPv6Address) else None
    address = _parse_address(host)
    return address if isinstance(address, ipaddress.IPv4Address) and str(address) == host else None


def canonical(address: Address) -> str:
    return f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)


def _parse_address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def binds_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable on loopback only."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    address = _parse_address(host)
    if address is not None:
        return address.is_loopback
    try:  # a name to bind to: loopback when every address it stands for is
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    addresses = [_parse_address(str(f).split("%")[0]) for f in found]  # "fe80::1%eth0": scoped
    return bool(addresses) and all(a is not None and a.is_loopback for a in addresses)


def host_rules(server: ServerConfig) -> HostRules | None:
    """The rules for a server as ``server`` binds it; None when ``Host`` is not checked
    (bound beyond loopback with no ``allowed_hosts``)."""
    entries = [e.lower() for e in listed(server.allowed_hosts)]
    loopback = binds_loopback(server.host)
    if not entries and not loopback:
        return None
    names = {"localhost", socket.gethostname().lower()}
    suffixes = [".localhost"]
    for entry in entries:
        if entry.startswith("*."):
            suffixes.append(entry[1:].removesuffix("."))
        elif (address := _parse_address(entry.strip("[]"))) is not None:
            names.add(canonical(address))
        else:
            names.add(entry.removesuffix("."))
    return HostRules(
        bind=server.host, loopback=loopback, names=frozenset(names), suffixes=tuple(suffixes), any_host="*" in entries
    )


def host_check(rules: HostRules) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory: a request whose ``Host`` ``rules`` do not allow is a
    403 in the dialect of its path (one that is not a host at all, a 400), before routing.
    No ``Host`` at all (HTTP/1.0) is let through: a browser always sends one."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def check(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
            if not values or values == [""]:
                await app(scope, receive, send)
                return
            authority = split_authority(values[0]) if len(values) == 1 else None
            server = scope.get("server")
            if authority is not None and rules.allows(authority[0], server[0] if server else None):
                await app(scope, receive, send)
                return
            await send_error(scope, send, _refusal(rules, ", ".join(values), authority))

        return check

    return middleware


def _refusal(rules: HostRules, value: str, authority: tuple[str, int | None] | None) -> DragomanError:
    if authority is None:
        message = f"Host '{value}' is not a host name and port; send the one name or address the server is reached by"
        return DragomanError(message, status=400, code="invalid_host")
    why = (
        f"this server is bound to {rules.bind} and answers localhost, its loopback addresses and its own name, "
        "so that a web page cannot reach it by DNS rebinding"
        if rules.loopback
        else "it is not in server.allowed_hosts"
    )
    message = (
        f"Host '{value}' is not allowed: {why}; if the server is reached by this name on purpose, "
        f"add '{authority[0]}' to server.allowed_hosts"
    )
    return DragomanError(message, status=403, code="host_not_allowed")


def bound_to(config: Config, host: str) -> Config:
    """``config`` as the server is bound: ``--host`` and a worker's socket override the file."""
    if host == config.server.host:
        return config
    return msgspec.structs.replace(config, server=msgspec.structs.replace(config.server, host=host))


def startup_warnings(config: Config) -> list[str]:
    """What an operator must hear before anyone connects."""
    server = config.server
    warnings = []
    entries = listed(server.allowed_hosts)
    if not binds_loopback(server.host) and not config.api_keys:
        rebinding = "" if entries else "; a web page can reach it by DNS rebinding (server.allowed_hosts is not set)"
        warnings.append(
            f"bound to {server.host}, beyond loopback, with no server.api_keys: anyone who can reach this address "
            f"may use every route (chats on upstreams with their keys, pulls, unloads, stored responses){rebinding}; "
            "set server.api_keys (and server.allowed_hosts to the names clients use), or bind 127.0.0.1"
        )
    if "*" in entries:
        warnings.append(
            "server.allowed_hosts lists '*': the Host check is off, and a web page can reach this server by DNS rebinding"
        )
    return warnings


__all__ = ["HostRules", "bound_to", "host_check", "host_rules", "split_authority", "startup_warnings"]
