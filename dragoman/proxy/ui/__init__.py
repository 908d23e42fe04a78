"""The built-in web page at ``/ui`` (``server.ui: false`` turns it off)."""

from dragoman.proxy.ui.routes import open_paths, ui_router

__all__ = ["open_paths", "ui_router"]
