"""The HTTP layer: Litestar app, routes of both dialects, streaming, CLI."""
