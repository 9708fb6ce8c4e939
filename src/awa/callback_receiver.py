"""Receiving external callbacks over HTTP, authenticated by an HMAC signature.

A handler registers a callback and hands the outside system a URL from
:func:`callback_url`. The outside system (or your code relaying its webhook) POSTs the
body it wants to deliver to that URL with the header ``Awa-Signature: t=<unix seconds>,
v1=<hex>``, computed by :func:`sign` with a secret both sides share. The ASGI app
:func:`callback_app` checks the signature — HMAC-SHA256, compared in constant time, the
timestamp within ``tolerance_s`` of now so a captured request cannot be replayed later —
and then resolves the callback::

    POST {base}/{callback_id}/complete    body: any JSON (the payload), or empty
    POST {base}/{callback_id}/resume      body: any JSON (returned by job.wait_for_callback)
    POST {base}/{callback_id}/fail        body: {"error": "why"}
    POST {base}/{callback_id}/retry       body: empty
    POST {base}/{callback_id}/heartbeat   body: {"timeout_seconds": 600} (or empty: 3600)

Answers: 200 ``{"job_id", "state", "action"}``; 400 a body that is not JSON or a bad
value; 401 a missing, malformed, wrong or expired signature; 404 an unknown path, action or
callback (unknown, already resolved or timed out); 405 not a POST; 413 a body over
``max_body_bytes``. The signed message is ``f"{t}.{callback_id}.{action}.".encode() +
body``: the signature binds the body to one callback and one action.

Mount it in any ASGI framework (Starlette, FastAPI: ``app.mount("/awa/callbacks",
callback_app(client, secret))``); it needs nothing beyond awa itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from awa import validate
from awa.asgi import Receive, Scope, Send, lifespan, respond
from awa.client.async_client import AsyncClient
from awa.client.callbacks import callback_uuid
from awa.client.sync_client import Client
from awa.errors import (
    AwaError,
    CallbackNotFound,
    InvalidSignature,
    SerializationError,
    ValidationError,
)
from awa.types import Job

SIGNATURE_HEADER = "Awa-Signature"
SECRET_ENV = "AWA_CALLBACK_SECRET"
ACTIONS = ("complete", "resume", "fail", "retry", "heartbeat")
DEFAULT_TOLERANCE_S = 300.0
MAX_BODY_BYTES = 1_048_576


def _action(value: Any) -> str:
    if value not in ACTIONS:
        raise ValidationError("action", f"must be one of {', '.join(ACTIONS)}, got {value!r}")
    return str(value)


def _secrets(secret: str | bytes | Sequence[str | bytes] | None) -> list[bytes]:
    """The configured secret(s) as bytes; several are accepted while rotating one."""
    if secret is None:
        secret = os.environ.get(SECRET_ENV) or None
    if secret is None:
        raise ValidationError("secret", f"no callback secret: pass one or set {SECRET_ENV}")
    values = [secret] if isinstance(secret, str | bytes) else list(secret)
    keys = [v.encode() if isinstance(v, str) else v for v in values]
    if not keys or any(not isinstance(k, bytes) or len(k) < 16 for k in keys):
        raise ValidationError("secret", "each secret must be at least 16 characters")
    return keys


def _digest(key: bytes, timestamp: int, callback_id: str, action: str, body: bytes) -> str:
    message = f"{timestamp}.{callback_id}.{action}.".encode() + body
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def callback_url(base_url: str, callback_id: Any, action: str = "complete") -> str:
    """``{base_url}/{callback_id}/{action}``: where the outside system POSTs its answer."""
    base = validate.text("base_url", base_url, max_length=2_000)
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise ValidationError("base_url", f"must be an http(s) URL, got {base_url!r}")
    return f"{base.rstrip('/')}/{callback_uuid(callback_id)}/{_action(action)}"


def sign(
    secret: str | bytes,
    callback_id: Any,
    body: bytes = b"",
    *,
    action: str = "complete",
    timestamp: int | None = None,
) -> str:
    """The ``Awa-Signature`` header value for POSTing ``body`` to ``callback_id``'s
    ``action`` (``timestamp``: unix seconds, now by default)."""
    (key,) = _secrets(secret)[:1]
    when = int(time.time()) if timestamp is None else validate.integer("timestamp", timestamp)
    digest = _digest(key, when, callback_uuid(callback_id), _action(action), bytes(body))
    return f"t={when},v1={digest}"


def _parse_header(header: str) -> tuple[int, list[str]]:
    timestamp: int | None = None
    digests: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        # Unix seconds in ASCII digits, of a sane length: a huge number would overflow
        # the window check, and str.isdigit() also takes digits int() refuses ("²").
        if name == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif name == "v1" and value.isascii() and value:
            # compare_digest refuses a str holding non-ASCII (TypeError, a 500): such a
            # value is no hex digest, so it is skipped as malformed
            digests.append(value)
    if timestamp is None or not digests:
        raise InvalidSignature("malformed signature header (expected t=<unix seconds>,v1=<hex>)")
    return timestamp, digests


def verify(
    secret: str | bytes | Sequence[str | bytes] | None,
    callback_id: Any,
    body: bytes,
    header: str | None,
    *,
    action: str = "complete",
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Raise :class:`~awa.errors.InvalidSignature` unless ``header`` signs ``body`` for
    this callback and action with one of the secrets, within ``tolerance_s`` of now."""
    keys = _secrets(secret)
    if not header:
        raise InvalidSignature(f"missing {SIGNATURE_HEADER} header")
    timestamp, digests = _parse_header(header)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise InvalidSignature("signature timestamp outside the allowed window (replayed?)")
    key_id, act = callback_uuid(callback_id), _action(action)
    for key in keys:
        expected = _digest(key, timestamp, key_id, act, body)
        # Every candidate is compared, each in constant time: no early exit leaks which.
        if any(hmac.compare_digest(expected, digest) for digest in digests):
            return
    raise InvalidSignature("signature does not match")


class CallbackReceiver:
    """The ASGI app behind :func:`callback_app`."""

    def __init__(
        self,
        client: AsyncClient | Client,
        secret: str | bytes | Sequence[str | bytes] | None = None,
        *,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(client, AsyncClient | Client):
            raise ValidationError("client", "must be an awa.AsyncClient or an awa.Client")
        self.client = client
        self._secrets = _secrets(secret)
        self.tolerance_s = validate.number("tolerance_s", tolerance_s, above=0)
        self.max_body_bytes = validate.integer("max_body_bytes", max_body_bytes, low=1)
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        status, answer = await self._handle(scope, receive)
        await _respond(send, status, answer)

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        parts = [p for p in str(scope.get("path", "")).split("/") if p]
        if len(parts) < 2 or parts[-1] not in ACTIONS:
            return 404, {"error": "expected POST …/{callback_id}/{action}"}
        if scope.get("method") != "POST":
            return 405, {"error": "only POST is allowed"}
        raw_id, action = parts[-2], parts[-1]
        try:
            callback_id = callback_uuid(raw_id)
        except ValidationError:
            return 404, {"error": "no such callback"}
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            return 413, {"error": f"body over {self.max_body_bytes} bytes"}
        header = _header(scope, SIGNATURE_HEADER)
        try:
            verify(self._secrets, callback_id, body, header, action=action,
                   tolerance_s=self.tolerance_s, now=self._clock())  # fmt: skip
        except InvalidSignature as exc:
            return 401, {"error": str(exc)}
        try:
            job = await self._apply(callback_id, action, _json_body(body))
        except CallbackNotFound as exc:
            return 404, {"error": str(exc)}
        except (ValidationError, SerializationError, ValueError) as exc:
            return 400, {"error": str(exc)}  # the sender's value: sending it again fails
        except AwaError as exc:
            return 503, {"error": str(exc)}
        return 200, {"job_id": job.id, "state": job.state.value, "action": action}

    async def _apply(self, callback_id: str, action: str, body: Any) -> Job[Any]:
        if action == "complete":
            return await self._call("complete_external", callback_id, body)
        if action == "resume":
            return await self._call("resume_external", callback_id, body)
        if action == "retry":
            return await self._call("retry_external", callback_id)
        fields = body if isinstance(body, dict) else {}
        if body is not None and not isinstance(body, dict):
            raise ValidationError("body", "must be a JSON object")
        if action == "fail":
            return await self._call("fail_external", callback_id, fields.get("error", ""))
        timeout_s = fields.get("timeout_seconds", 3600)
        return await self._call("heartbeat_callback", callback_id, timeout_s)

    async def _call(self, method: str, *args: Any) -> Job[Any]:
        """The client's ``method``. A blocking Client runs its calls on its own loop:
        called from a thread, they leave the server's loop free (its AsyncClient belongs
        to that other loop, and used here answered every callback 503)."""
        call = getattr(self.client, method)
        result: Job[Any] = (
            await asyncio.to_thread(call, *args)
            if isinstance(self.client, Client)
            else await call(*args)
        )
        return result


def callback_app(
    client: AsyncClient | Client,
    secret: str | bytes | Sequence[str | bytes] | None = None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> CallbackReceiver:
    """An ASGI app resolving callbacks from signed POSTs (``secret`` defaults to
    ``AWA_CALLBACK_SECRET``; a list of secrets is accepted while rotating one)."""
    return CallbackReceiver(client, secret, tolerance_s=tolerance_s, max_body_bytes=max_body_bytes)


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode()
    for key, value in scope.get("headers") or ():
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


def _json_body(body: bytes) -> Any:
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested past what json.loads can
        raise ValidationError("body", "must be JSON (at most 1 000 levels deep)") from None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(send: Send, status: int, answer: dict[str, Any]) -> None:
    await respond(send, status, json.dumps(answer).encode(), "application/json")


__all__ = [
    "ACTIONS",
    "SIGNATURE_HEADER",
    "CallbackReceiver",
    "callback_app",
    "callback_url",
    "sign",
    "verify",
]
