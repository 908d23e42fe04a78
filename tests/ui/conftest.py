"""A real headless Chromium (Debian's package, no browser download) driven by
Playwright, for the page tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("DRAGOMAN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# What works in containers without a GPU or a network: no sandbox (we run as root),
# nothing phoning home. Playwright gives every launch a fresh profile of its own.
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Module-scoped: Playwright's sync API runs an event loop of its own while it is
    open, and the async tests of later modules need theirs."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install -y chromium), as .ci/run does")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
