"""Read deadlines of a connection: uvicorn's h11 protocol with a header and a body timeout.

uvicorn closes a connection idle between requests (``timeout_keep_alive``) but waits for ever on a
client that has begun a request and then sends nothing more (a slow-loris client holds its socket and
its memory). Here a request's line and headers must all arrive within ``header_s`` of the connection
(or of the previous response), and a body must not pause for more than ``body_idle_s`` while the server
is reading it, nor take more than ``body_total_s`` in all (a client that sends a byte just before each
idle deadline would hold the connection for ever otherwise); past any of them the connection is closed
(408 when no response has started). After a response sent before its request's body is all in (a 401
to an upload, say) the rest of that body is read and dropped for at most ``DRAIN_S`` (or the idle
deadline, when shorter) in all, then the connection is closed: closing at once would reset a client
still sending, which then never reads the answer; waiting on every byte would let a trickle hold the
socket for ever.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agent.settings import DEFAULT_BODY_IDLE_S, DEFAULT_BODY_TOTAL_S, DEFAULT_HEADER_S

logger = logging.getLogger(__name__)

# the defaults are the settings' (agent.settings: $FERRY_HEADER_TIMEOUT, $FERRY_BODY_TIMEOUT, $FERRY_BODY_TOTAL_TIMEOUT)
DRAIN_S = 5.0
KEEP_ALIVE_S = 5
_TIMEOUT_BODY = b"the request was not received in time; send the request line and headers at once\n"


class DeadlineH11Protocol(H11Protocol):
    """H11Protocol whose subclasses (from :func:`protocol_with`) carry the two deadlines."""

    header_s: float = DEFAULT_HEADER_S
    body_idle_s: float = DEFAULT_BODY_IDLE_S
    body_total_s: float = DEFAULT_BODY_TOTAL_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""
        self._body_since: float | None = None  # when the current request's body began

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = ""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.header_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # answered before its body was in: the rest is read and dropped, within a fixed time
            self._arm("drain", min(DRAIN_S, self.body_idle_s))
            return
        self._body_since = None
        if not self.transport.is_closing():
            self._arm("headers", self.header_s)  # the next request's headers have the same deadline
            self._follow()  # a pipelined request may already be in

    def _follow(self) -> None:
        """The deadline that fits where the client's request is now."""
        state = self.conn.their_state
        if self._phase == "drain":
            if state is h11.SEND_BODY:
                return  # the drain's deadline is fixed: no chunk extends it
            self._arm("headers", self.header_s)  # the dropped body is all in: the next request may come
            self._body_since = None
        if state is h11.IDLE:  # no request line and headers yet: the headers deadline runs on
            return
        if state is h11.SEND_BODY:
            now = self.loop.time()
            if self._body_since is None:
                self._body_since = now
            left = self.body_total_s - (now - self._body_since)
            # idle time: each chunk restarts it, within the body's total time
            self._arm("body", max(min(self.body_idle_s, left), 0.0))
            return
        self._disarm()  # the whole request is in (or the connection is done)

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        total_over = self._body_since is not None and self.loop.time() - self._body_since >= self.body_total_s
        if self._phase == "body" and self.flow.read_paused and not total_over:  # the app is behind, not the client
            self._arm("body", self.body_idle_s)
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        if self._phase == "drain":
            logger.info("closing the connection of %s: the rest of a body its answer did not need kept coming "
                        "for %.0f s", client, min(DRAIN_S, self.body_idle_s))
        elif self._phase == "headers":
            logger.info("closing the connection of %s: its request line and headers did not arrive within "
                        "%.0f s", client, self.header_s)
        elif total_over:
            logger.info("closing the connection of %s: its request body took more than %.0f s in all", client,
                        self.body_total_s)
        else:
            logger.info("closing the connection of %s: its request body paused for %.0f s", client,
                        self.body_idle_s)
        if self._phase == "headers" and self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE:
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))
        self._phase = ""
        self.transport.close()


def protocol_with(header_s: float, body_idle_s: float,
                  body_total_s: float = DEFAULT_BODY_TOTAL_S) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's ``http=`` with these deadlines (seconds, above 0)."""
    return type("FerryH11Protocol", (DeadlineH11Protocol,),
                {"header_s": header_s, "body_idle_s": body_idle_s, "body_total_s": max(body_total_s, body_idle_s)})
