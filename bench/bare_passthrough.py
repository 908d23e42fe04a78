"""The floor a Python gateway can reach: Litestar + uvicorn (uvloop, httptools) +
``httpx.AsyncClient`` over aiohttp's pool, decoding the body with msgspec and passing
it to the upstream unchanged; no translation, no access log. ``proxy_workers.py``
measures dragoman against it.

    python bench/bare_passthrough.py --port 8200 --upstream http://127.0.0.1:8201 [--workers 2]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import msgspec
import uvicorn
from httpx_aiohttp import AiohttpTransport
from litestar import Litestar, Request, Response, post


class Body(msgspec.Struct):
    model: str
    messages: list[dict[str, object]]
    stream: bool = False


@asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    async with httpx.AsyncClient(base_url=os.environ["BARE_UPSTREAM"], transport=AiohttpTransport(), timeout=30) as client:
        app.state.client = client
        yield


@post("/v1/chat/completions")
async def chat(request: Request) -> Response[bytes]:
    raw = await request.body()
    msgspec.json.decode(raw, type=Body)  # validated as a gateway must, then passed on as it came
    reply = await request.app.state.client.post("/v1/chat/completions", content=raw,
                                                headers={"content-type": "application/json"})  # fmt: skip
    return Response(reply.content, status_code=reply.status_code, media_type="application/json")


def create() -> Litestar:
    return Litestar([chat], lifespan=[lifespan], logging_config=None, openapi_config=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    os.environ["BARE_UPSTREAM"] = args.upstream
    os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    uvicorn.run("bare_passthrough:create", factory=True, host="127.0.0.1", port=args.port, workers=args.workers,
                log_level="warning", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
