"""Request bodies capped before any route parses them (the create route counts its own, larger upload).

Past the cap the request is answered 413 at once: a declared Content-Length is checked before a byte is
read, a chunked body is counted as it comes, and nothing of it reaches a parser or a log.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MESSAGE_LIMIT = 64 * 1024
APPROVAL_LIMIT = 8 * 1024**2  # an edited version of the files may be sent whole
DEFAULT_LIMIT = 256 * 1024
WEBHOOK_LIMIT = 2 * 1024**2  # GitHub's issue_comment / pull_request payloads, with their long bodies


def limit_for(method: str, path: str) -> int | None:
    """The cap of a request's body; None for the create route (bodies.py streams and caps it)."""
    if method == "POST" and path.rstrip("/") == "/v1/sessions":
        return None
    if path.rstrip("/") == "/v1/github/webhook":
        return WEBHOOK_LIMIT
    if path.endswith("/messages"):
        return MESSAGE_LIMIT
    if path.endswith("/approval"):
        return APPROVAL_LIMIT
    return DEFAULT_LIMIT


class BodyLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"])
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:  # bodies under the cap are small: read whole, then handed on unchanged
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            seen += len(body)
            if seen > limit:
                await _too_large(send, limit)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    body: dict[str, Any] = {"detail": f"the request body is larger than this route accepts ({limit} bytes)"}
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})
