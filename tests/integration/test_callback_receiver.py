"""The signed HTTP callback receiver: URL builder, HMAC sign/verify, and the ASGI route
resolving real callbacks on PostgreSQL (driven as ASGI calls, no server needed)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import awa
from awa.callback_receiver import callback_app, callback_url, sign, verify
from tests.helpers import FAST_WORKER, wait_for

SECRET = "s3cret-shared-with-the-psp"
CB = "6f1c2b1e-8a3e-4d6b-9b1a-2f6e0c9d7a10"


# -- signing, no database ---------------------------------------------------------------


def test_url_builder() -> None:
    assert (
        callback_url("https://app.example/awa/cb/", CB)
        == f"https://app.example/awa/cb/{CB}/complete"
    )
    assert callback_url("http://h", CB.upper(), "fail").endswith(f"/{CB}/fail")
    for bad, field in ((("ftp://h", CB), "base_url"), (("https://h", "x"), "callback_id"),
                       (("https://h", CB, "delete"), "action")):  # fmt: skip
        with pytest.raises(awa.ValidationError) as caught:
            callback_url(*bad)
        assert caught.value.field == field


def test_sign_and_verify() -> None:
    body = b'{"receipt": 7}'
    now = 1_700_000_000
    header = sign(SECRET, CB, body, timestamp=now)
    assert header.startswith(f"t={now},v1=")
    verify(SECRET, CB, body, header, now=now + 10)
    verify(["an-older-secret-being-rotated", SECRET], CB, body, header, now=now)
    refusals = {
        "tampered body": (SECRET, CB, b'{"receipt": 8}', header, "complete", now),
        "other callback": (SECRET, "6f1c2b1e-8a3e-4d6b-9b1a-2f6e0c9d7a11", body, header,
                           "complete", now),
        "other action": (SECRET, CB, body, header, "fail", now),
        "wrong secret": ("another-secret-entirely", CB, body, header, "complete", now),
        "replayed later": (SECRET, CB, body, header, "complete", now + 301),
        "from the future": (SECRET, CB, body, header, "complete", now - 301),
        "missing": (SECRET, CB, body, None, "complete", now),
        "malformed": (SECRET, CB, body, "v1=abc", "complete", now),
        "huge timestamp": (SECRET, CB, body, "t=" + "9" * 400 + ",v1=aa", "complete", now),
        "not ascii digits": (SECRET, CB, body, "t=\u00b2,v1=aa", "complete", now),
        # compare_digest raised TypeError on it: a 500 from the receiver (a review)
        "non-ascii digest": (SECRET, CB, body, f"t={now},v1=\u00e9", "complete", now),
    }  # fmt: skip
    for case, (secret, cb, data, hdr, action, at) in refusals.items():
        with pytest.raises(awa.InvalidSignature):
            verify(secret, cb, data, hdr, action=action, now=at)
            pytest.fail(case)


def test_a_secret_is_required_and_not_trivially_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_CALLBACK_SECRET", raising=False)
    with pytest.raises(awa.ValidationError, match="AWA_CALLBACK_SECRET"):
        verify(None, CB, b"", "t=1,v1=00")
    with pytest.raises(awa.ValidationError, match="16"):
        sign("short", CB)
    monkeypatch.setenv("AWA_CALLBACK_SECRET", SECRET)
    verify(None, CB, b"", sign(SECRET, CB))  # configured through the environment


# -- the ASGI route on a real database ---------------------------------------------------


class Http:
    """Calls the ASGI app directly and returns (status, JSON body)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def post(
        self, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
        method: str = "POST",
    ) -> tuple[int, Any]:  # fmt: skip
        sent: list[dict[str, Any]] = []
        chunks = [body[:3], body[3:]]  # arrives in two parts, like a real server may send

        async def receive() -> dict[str, Any]:
            chunk = chunks.pop(0) if chunks else b""
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: Any) -> None:
            sent.append(dict(message))

        raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        scope = {"type": "http", "method": method, "path": f"/hooks{path}",
                 "root_path": "/hooks", "headers": raw, "query_string": b""}  # fmt: skip
        await self.app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], json.loads(payload)

    async def signed(self, callback_id: str, action: str, body: Any = None) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        header = sign(SECRET, callback_id, data, action=action)
        return await self.post(f"/{callback_id}/{action}", data, {"Awa-Signature": header})


async def _parked(client: awa.AsyncClient, n: int) -> list[tuple[int, str]]:
    """Insert ``n`` jobs whose handler parks them; returns (job id, callback id) pairs."""
    tokens: dict[int, str] = {}

    @client.task(None, kind="psp", queue="q")
    async def psp(job: awa.Job[Any]) -> awa.WaitForCallback | None:
        if "callback_payload" in job.metadata:
            return None
        token = await job.register_callback(timeout_seconds=600)
        tokens[job.id] = token
        return awa.WaitForCallback(token)

    jobs = [await client.insert({"n": i}, kind="psp", queue="q") for i in range(n)]
    await client.start([("q", n)], **FAST_WORKER)

    async def all_parked() -> bool:
        states = [(await client.get_job(j.id)).state for j in jobs]
        return all(s is awa.JobState.WAITING_EXTERNAL for s in states)

    await wait_for(all_parked)
    return [(j.id, tokens[j.id]) for j in jobs]


async def test_signed_requests_resolve_callbacks(client: awa.AsyncClient) -> None:
    http = Http(callback_app(client, SECRET))
    try:
        (a, ta), (b, tb), (_, tc) = await _parked(client, 3)
        assert await http.signed(ta, "heartbeat", {"timeout_seconds": 900}) == (
            200, {"job_id": a, "state": "waiting_external", "action": "heartbeat"})  # fmt: skip
        status, answer = await http.signed(ta, "complete", {"receipt": "r-1"})
        assert status == 200 and answer["state"] == "completed"
        assert (await client.get_job(a)).metadata["callback_payload"] == {"receipt": "r-1"}

        status, answer = await http.signed(tb, "fail", {"error": "card declined"})
        assert status == 200 and answer["state"] == "failed"
        assert (await client.get_job(b)).errors[-1]["error"] == "card declined"

        status, answer = await http.signed(tc, "retry")
        assert status == 200 and answer["state"] == "available"

        # The same request again: the callback is spent.
        status, answer = await http.signed(ta, "complete", {"receipt": "r-1"})
        assert status == 404 and "no job is waiting" in answer["error"]
    finally:
        await client.shutdown()


async def test_a_bad_value_signed_correctly_is_a_400_not_a_server_error(
    client: awa.AsyncClient,
) -> None:
    """The sender's own value at fault: 400 (sending it again cannot help), never a 500
    or a 503 (which tells the sender to retry)."""
    http = Http(callback_app(client, SECRET))
    try:
        [(job_id, token)] = await _parked(client, 1)
        bad = [
            ("complete", b"[" * 50_000 + b"]" * 50_000),  # nested past json.loads
            ("complete", b"[" * 900 + b"]" * 900),  # read, but past what awa stores
            ("complete", b'{"x": NaN}'),  # JSON Python reads, but not a JSON value to store
            ("heartbeat", b'{"timeout_seconds": 1e20}'),  # past a bigint of milliseconds
            ("heartbeat", b'{"timeout_seconds": 1e12}'),  # past PostgreSQL's timestamps
        ]
        for action, body in bad:
            headers = {"Awa-Signature": sign(SECRET, token, body, action=action)}
            status, answer = await http.post(f"/{token}/{action}", body, headers)
            assert status == 400, (action, body[:30], answer)
        assert (await client.get_job(job_id)).state is awa.JobState.WAITING_EXTERNAL
    finally:
        await client.shutdown()


async def test_unsigned_or_bad_requests_change_nothing(client: awa.AsyncClient) -> None:
    http = Http(callback_app(client, SECRET, max_body_bytes=64))
    try:
        [(job_id, token)] = await _parked(client, 1)
        body = b'{"receipt": 1}'
        good = sign(SECRET, token, body)
        old = sign(SECRET, token, body, timestamp=int(time.time()) - 3600)
        cases = [
            (f"/{token}/complete", body, {}, "POST", 401),
            (f"/{token}/complete", body, {"Awa-Signature": old}, "POST", 401),
            (f"/{token}/complete", b'{"receipt": 2}', {"Awa-Signature": good}, "POST", 401),
            (f"/{token}/fail", body, {"Awa-Signature": good}, "POST", 401),
            (f"/{token}/complete", body, {"Awa-Signature": good}, "GET", 405),
            (f"/{token}/explode", body, {"Awa-Signature": good}, "POST", 404),
            ("/not-a-uuid/complete", body, {"Awa-Signature": good}, "POST", 404),
            (f"/{token}/complete", b"x" * 65, {"Awa-Signature": good}, "POST", 413),
            (f"/{token}/complete", b"{not json",
             {"Awa-Signature": sign(SECRET, token, b"{not json")}, "POST", 400),
        ]  # fmt: skip
        for path, data, headers, method, expected in cases:
            status, answer = await http.post(path, data, headers, method)
            assert status == expected, (path, method, answer)
            assert "error" in answer
        still = await client.get_job(job_id)
        assert still.state is awa.JobState.WAITING_EXTERNAL and still.errors == []
        assert await http.post(f"/{token}/complete", body, {"awa-signature": good}) == (
            200, {"job_id": job_id, "state": "completed", "action": "complete"})  # fmt: skip
    finally:
        await client.shutdown()


async def test_resume_through_the_route(client: awa.AsyncClient) -> None:
    tokens: list[str] = []
    got: list[Any] = []

    @client.task(None, kind="two_hops", queue="q")
    async def two_hops(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        tokens.append(token)
        got.append(await job.wait_for_callback(token))

    http = Http(callback_app(client, SECRET))
    job = await client.insert({}, kind="two_hops", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:

        async def waiting() -> bool:  # the handler waits: running, its deadline paused
            return bool(tokens) and (await client.get_job(job.id)).deadline_at is None

        await wait_for(waiting)
        status, answer = await http.signed(tokens[0], "resume", {"approved": True})
        assert status == 200 and answer["state"] == "running"

        async def completed() -> bool:
            return (await client.get_job(job.id)).state is awa.JobState.COMPLETED

        await wait_for(completed)
    finally:
        await client.shutdown()
    assert got == [{"approved": True}]


async def test_a_blocking_client_resolves_callbacks_and_goes_on_working(
    client: awa.AsyncClient, sync_client: awa.Client
) -> None:
    """A web app's own blocking Client serves the receiver: its calls run on the
    Client's loop. ``callback_app(client.async_client)``, the advice before, answered
    every callback 503 once the app had used its Client (a review)."""
    with pytest.raises(awa.ValidationError, match="AsyncClient or an awa\\.Client"):
        callback_app(object(), SECRET)  # type: ignore[arg-type]
    sync_client.insert({}, kind="before", queue="other")  # the app used its Client first
    http = Http(callback_app(sync_client, SECRET))
    try:
        [(job_id, token)] = await _parked(client, 1)
        status, answer = await http.signed(token, "complete", {"receipt": "r-2"})
        assert (status, answer["state"]) == (200, "completed")
        assert sync_client.get_job(job_id).metadata["callback_payload"] == {"receipt": "r-2"}
        assert sync_client.insert({}, kind="after", queue="other").kind == "after"
    finally:
        await client.shutdown()


async def test_the_receiver_answers_lifespan(sync_client: awa.Client) -> None:
    app = callback_app(sync_client, SECRET)
    sent: list[dict[str, Any]] = []
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
