"""A session's events as Server-Sent Events, resumable with Last-Event-ID."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from agent.service.deps import SessionDep, StoreDep
from agent.service.events import sse
from agent.service.store import ENDED, SessionStore

router = APIRouter(prefix="/v1/sessions", tags=["events"])
POLL_S = 0.2
PING_S = 15.0
STATE_CHECK_S = 2.0


async def _stream(request: Request, store: SessionStore, sid: str, after: int) -> AsyncIterator[str]:
    last, pinged, checked = after, time.monotonic(), 0.0
    yield "retry: 2000\n\n"
    while True:
        if store.last_event(sid) > last:
            for ev in await run_in_threadpool(store.events_after, sid, last):
                yield sse(ev.id, ev.kind, ev.data)
                last = ev.id
            pinged = time.monotonic()
            continue
        now = time.monotonic()
        if now - checked >= STATE_CHECK_S:
            checked = now
            row = await run_in_threadpool(store.get, sid)
            if row is None or (row.state in ENDED and store.last_event(sid) <= last):
                return  # ended (or deleted) and everything was sent
        if now - pinged >= PING_S:
            pinged = now
            yield ": ping\n\n"
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)


@router.get("/{sid}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "id: N / event: kind / data: JSON, until the session ends"}})
async def stream_events(request: Request, row: SessionDep, store: StoreDep,
                        last_event_id: Annotated[str | None, Header()] = None,
                        after: Annotated[int | None, Query(ge=0, le=10**18, description="resume after this event id")]
                        = None
                        ) -> StreamingResponse:
    """Every step, edit, run, approval request, message and reply of the session, in order. Reconnect with
    the `Last-Event-ID` header (or `?after=N`) to get exactly the events after N."""
    start = after or 0
    if last_event_id is not None and re.fullmatch(r"[0-9]{1,18}", last_event_id.strip()):
        start = max(start, int(last_event_id.strip()))  # anything else is not an id this server sent: ignored
    return StreamingResponse(_stream(request, store, row.id, start), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
