"""What a handler knows of its request beyond the body, given by Litestar's dependency
injection so that every route reads it one way: the access record the logging
middleware opened, the client's credential to forward (``forward_auth``) and the key it
presented (whose stored responses it sees, whether /health/ready shows it details). The
model table and the response store are the app's (dragoman/proxy/app.py)."""

from __future__ import annotations

from typing import Any, cast

import msgspec
from litestar.di import Provide
from litestar.types import Scope

from dragoman.proxy.auth import client_authorization, presented_key
from dragoman.proxy.record import SCOPE_KEY, RequestRecord


class ClientCredential(msgspec.Struct, frozen=True):
    """The client's ``Authorization`` value (or its ``x-api-key`` as a bearer key) for an
    upstream that forwards it; None when it sent neither."""

    authorization: str | None


class ClientKey(msgspec.Struct, frozen=True):
    """The key the client presented (``Authorization: Bearer``, else ``x-api-key``);
    None when it sent neither."""

    key: str | None


def provide_record(scope: Scope) -> RequestRecord:
    record: RequestRecord = cast("dict[str, Any]", scope)[SCOPE_KEY]  # the logging middleware's
    return record


def provide_credential(scope: Scope) -> ClientCredential:
    return ClientCredential(client_authorization(scope))


def provide_client_key(scope: Scope) -> ClientKey:
    return ClientKey(presented_key(scope))


REQUEST_DEPENDENCIES = {
    "record": Provide(provide_record, sync_to_thread=False),
    "credential": Provide(provide_credential, sync_to_thread=False),
    "client_key": Provide(provide_client_key, sync_to_thread=False),
}
