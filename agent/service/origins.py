"""Requests from another site: the Host a request names and the Origin a write comes from.

A server on loopback without tokens trusts whoever can reach it, and a web page the user visits can
reach it: by DNS rebinding (``evil.example`` resolving to 127.0.0.1, so the browser sends
``Host: evil.example`` and lets the page read the answers) or by a cross-site "simple" POST (a form or
a no-cors fetch, which needs no permission from the server). So, before any route:

* Host: a loopback name or address (``localhost``, 127.0.0.0/8, ``[::1]``) on the server's port, the
  address the server was bound to, or a name of ``--allowed-host``; otherwise 421. Not checked only on a
  server with tokens bound to every address (0.0.0.0, ::) and no ``--allowed-host``: there a browser's
  request carries no token, so a rebound page reads nothing but the anonymous ok/fail routes.
* Writes (POST, PUT, PATCH, DELETE): an ``Origin`` (else a ``Referer``) must name this same host, else
  403 (``Origin: null`` included). Browsers send Origin on every cross-site POST.
* On a server without tokens, a POST with a "simple" body (not application/json: multipart, form,
  text, none) must also carry ``X-Ferry-Request`` or a same-site Origin: a cross-site form cannot add
  a header. The GitHub webhook is exempt from both write rules (GitHub sends no Origin; its body's
  HMAC signature is what admits it).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CUSTOM_HEADER = "x-ferry-request"
WEBHOOK_PATH = "/v1/github/webhook"
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str, default_port: int | None = None) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` as (lower-case name, port); None when it is not a host."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/@?#\\ \t"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[:end + 1], value[end + 1:]
    else:
        name, colon, port_text = value.partition(":")
        rest = f"{colon}{port_text}"
    if rest and (not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6):
        return None
    port = int(rest[1:]) if rest else default_port
    return (name.rstrip("."), port) if name else None


def is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_entry(value: str) -> tuple[str, int | None]:
    """An ``--allowed-host`` entry (``name`` for any port, ``name:port`` for one); ValueError otherwise."""
    got = split_host(value)
    if got is None:
        raise ValueError(f"{value[:80]!r} is not a host name (give a name like ferry.example.org or "
                         "ferry.example.org:8443, no scheme or path)")
    return got


class SameSite:
    """ASGI middleware: the Host and Origin checks above (thin: headers only, the body is never read)."""

    def __init__(self, app: ASGIApp, *, allowed: tuple[tuple[str, int | None], ...], bound: str,
                 tokens: bool) -> None:
        self.app = app
        self.allowed, self.tokens = allowed, tokens
        bound_name = bound.strip().lower()
        self.bound = None if bound_name in WILDCARDS else (f"[{bound_name}]" if ":" in bound_name else bound_name)
        self.check_host = not (tokens and self.bound is None and not allowed)

    def _host_ok(self, host: tuple[str, int | None], port: int | None) -> bool:
        name, given = host
        same_port = given == port
        if is_loopback(name) or name == self.bound:
            return same_port
        return any(name == n and (p is None or p == given) for n, p in self.allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        server = scope.get("server") or (None, None)
        port = server[1] if isinstance(server, tuple | list) else None
        host_text = headers.get("host", "")
        host = split_host(host_text, _DEFAULT_PORTS.get(scope.get("scheme", "http")))
        if self.check_host and (host is None or not self._host_ok(host, port)):
            await _refuse(send, 421, f"this server does not answer for the host {host_text[:100]!r}: use "
                          "http://127.0.0.1:<port> (or localhost), or have its operator add the name with "
                          "--allowed-host (FERRY_ALLOWED_HOSTS)")
            return
        if scope["method"] in WRITES and scope["path"].rstrip("/") != WEBHOOK_PATH:
            why = self._write_refused(scope["method"], headers, host_text)
            if why is not None:
                logger.warning("%s %s refused: %s", scope["method"], scope["path"][:200], why)
                await _refuse(send, 403, why)
                return
        await self.app(scope, receive, send)

    def _write_refused(self, method: str, headers: dict[str, str], host_text: str) -> str | None:
        """Why a write may not go on (None: it may)."""
        origin = headers.get("origin")
        source, which = (origin, "Origin") if origin is not None else (headers.get("referer"), "Referer")
        same_site = False
        if source is not None:
            if not _same_site(source, host_text):
                return (f"a write from another site is refused ({which} {source[:100]!r} is not this server, "
                        f"{host_text[:100]!r}): use the page this server serves, or a client that sends no Origin")
            same_site = which == "Origin"
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        simple = method == "POST" and kind != "application/json"  # what a cross-site form or no-cors fetch sends
        if not self.tokens and simple and not same_site and CUSTOM_HEADER not in headers:
            return (f"a write with a {kind or 'missing'!r} body needs the header 'X-Ferry-Request: 1' on a server "
                    "without tokens (a form on another site cannot send it): add it to the request "
                    "(curl -H 'X-Ferry-Request: 1' ...)")
        return None


def _same_site(source: str, host_text: str) -> bool:
    """Whether the Origin / Referer ``source`` names the host of ``host_text`` (its scheme's default port
    when a side gives none)."""
    try:
        parts = urlsplit(source.strip())
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc:
        return False  # 'null', file:, data:, ...
    default = _DEFAULT_PORTS[parts.scheme]
    site, host = split_host(parts.netloc, default), split_host(host_text, default)
    return site is not None and site == host


async def _refuse(send: Send, code: int, detail: str) -> None:
    data = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"vary", b"Origin")]})
    await send({"type": "http.response.body", "body": data})
