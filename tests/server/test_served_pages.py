"""No HTML page the server sends loads a script or style from another origin: what runs
on the API's origin can read every reply, so it must be the server's own (issue 24:
/schema/swagger loaded Swagger UI from a CDN, without integrity checks or a CSP)."""

from __future__ import annotations

import re

import httpx

from dragoman.proxy.app import create_app
from tests.conftest import SCRIPTED_CONFIG
from tests.support.server import RunningServer, config_from_yaml

# What the catch-all /schema/{path} served as pages with Litestar's render plugins.
RENDERERS = ["swagger", "redoc", "rapidoc", "elements", "scalar"]
# A script, stylesheet, module import or frame from anywhere but the page's own origin.
FOREIGN = re.compile(
    r"""<(?:script|link|iframe|img)\b[^>]*\b(?:src|href)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//"""
    r"""|\bimport\s*(?:\(|[^;]*?\bfrom)\s*["'](?:https?:)?//""",
    re.IGNORECASE,
)


def get_paths() -> list[str]:
    """Every GET route of the app as the scripted config builds it (the web page on)."""
    paths = []
    for route in create_app(config_from_yaml(SCRIPTED_CONFIG)).routes:
        if "GET" not in getattr(route, "methods", ()):
            continue
        if route.path == "/schema/{path:str}":
            paths += [f"/schema/{name}" for name in RENDERERS]
        elif "{" not in route.path:
            paths.append(route.path)
    return paths


def test_the_pattern_sees_a_cdn_script() -> None:
    """It catches what Swagger UI's page held, and passes the web page's own files."""
    assert FOREIGN.search('<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js" crossorigin>')
    assert FOREIGN.search("<link rel='stylesheet' href=//unpkg.com/x.css>")
    assert FOREIGN.search('import("https://esm.sh/x")')
    assert not FOREIGN.search('<script src="/ui/static/app.js" type="module"></script>')


def test_no_page_loads_anything_from_another_origin(scripted_server: RunningServer) -> None:
    pages = {}
    for path in get_paths():
        reply = httpx.get(scripted_server.url + path)
        if "html" in reply.headers.get("content-type", ""):
            pages[path] = reply.text
    assert "/ui" in pages  # the check sees the pages there are
    foreign = {path: found.group(0) for path, text in pages.items() if (found := FOREIGN.search(text))}
    assert foreign == {}


def test_the_openapi_document_is_served_as_json_and_yaml(scripted_server: RunningServer) -> None:
    root = httpx.get(scripted_server.url + "/schema")
    assert root.status_code == 200 and root.json()["info"]["title"] == "dragoman"
    assert httpx.get(scripted_server.url + "/schema/openapi.json").json()["paths"]
    assert "openapi:" in httpx.get(scripted_server.url + "/schema/openapi.yaml").text
    assert httpx.get(scripted_server.url + "/schema/swagger").status_code == 404
