"""A scripted OpenAI-compatible chat server on loopback (a real HTTP server in a thread).

Each POST /v1/chat/completions pops the next scripted step: a reply (content and/or tool calls),
an HTTP error status, a raw body (any status, content type and bytes: non-JSON, truncated JSON),
a hang (no answer for a while) or a huge reply. Requests are recorded so callers can check what the
model saw. ``ferry replay`` serves a recorded trajectory's replies from it (:mod:`agent.llm.replay`);
the tests script their models with it.

The plan step's requests (they offer the ``submit_plan`` tool, agent/llm/planner.py) are served
from their own script, ``plans``, and recorded in ``plan_requests``, so the fixers' script and
``requests`` read as before; with no plan scripted they are answered HTTP 400 (no retry, no tokens:
the migration records the failure and runs the offline plan). ``one_script=True`` serves every
request from ``script`` in order (a replay). ``check(index, body)`` may refuse a request: it
returns why (the server answers HTTP 400 with it and keeps it in ``divergence``), or None.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def reply(*calls: dict[str, Any], content: str | None = None, prompt_tokens: int = 100,
          completion_tokens: int = 20) -> dict[str, Any]:
    return {"kind": "reply", "calls": list(calls), "content": content,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


def error(status: int, message: str = "scripted error", retry_after: float | str | None = None) -> dict[str, Any]:
    return {"kind": "error", "status": status, "message": message, "retry_after": retry_after}


def raw(body: bytes, status: int = 200, content_type: str = "application/json") -> dict[str, Any]:
    """Exactly these bytes as the reply's body (e.g. an HTML page, or JSON cut short)."""
    return {"kind": "raw", "status": status, "content_type": content_type, "body": body}


def hang(seconds: float) -> dict[str, Any]:
    """Answer nothing for ``seconds`` (longer than the client's timeout), then close the connection."""
    return {"kind": "hang", "seconds": seconds}


def trickle(seconds_per_byte: float, body: bytes = b'{"choices": []}' * 8) -> dict[str, Any]:
    """A 200 whose body arrives one byte at a time, each after ``seconds_per_byte``."""
    return {"kind": "trickle", "delay": seconds_per_byte, "body": body}


def huge(chars: int) -> dict[str, Any]:
    """A well-formed reply whose content is ``chars`` characters long."""
    return reply(content="x" * chars)


def no_choices() -> dict[str, Any]:
    return {"kind": "no_choices"}


PLAN_TOOL = "submit_plan"


def _offers(body: dict[str, Any], name: str) -> bool:
    return any((t.get("function") or {}).get("name") == name for t in body.get("tools") or [])


RequestCheck = Callable[[int, dict[str, Any]], str | None]


class ScriptedLLM:
    def __init__(self, script: list[dict[str, Any]], plans: list[dict[str, Any]] | None = None, *,
                 one_script: bool = False, check: RequestCheck | None = None) -> None:
        self.script = list(script)
        self.plans = list(plans or [])
        self.one_script = one_script
        self.check = check
        self.divergence: str | None = None
        self.served = 0
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()  # ends hangs early when the server shuts down
        self.plan_requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                plan = _offers(body, PLAN_TOOL) and not outer.one_script
                log, script = (outer.plan_requests, outer.plans) if plan else (outer.requests, outer.script)
                log.append({"path": self.path, "body": body, "auth": self.headers.get("authorization")})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if outer.divergence is not None:
                    return self._send(400, {"error": {"message": outer.divergence, "type": "replay"}})
                if outer.check is not None:
                    problem = outer.check(outer.served, body)
                    if problem is not None:
                        outer.divergence = problem
                        return self._send(400, {"error": {"message": problem, "type": "replay"}})
                outer.served += 1
                if plan and not script:
                    return self._send(400, {"error": {"message": "no plan scripted", "type": "scripted"}})
                if not script:
                    return self._send(500, {"error": {"message": "script exhausted"}})
                step = script.pop(0)
                kind = step["kind"]
                if kind == "error":
                    headers = {"retry-after": str(step["retry_after"])} if step.get("retry_after") is not None else {}
                    return self._send(step["status"], {"error": {"message": step["message"], "type": "scripted"}},
                                      headers)
                if kind == "raw":
                    return self._send_bytes(step["status"], step["body"], step["content_type"])
                if kind == "hang":
                    outer.stop.wait(step["seconds"])
                    self.close_connection = True
                    return None
                if kind == "trickle":
                    return self._trickle(step["body"], step["delay"])
                if kind == "no_choices":
                    return self._send(200, {"id": "chatcmpl-x", "object": "chat.completion", "created": 0,
                                            "model": body.get("model", "scripted"), "choices": [],
                                            "usage": {"prompt_tokens": 10, "completion_tokens": 0,
                                                      "total_tokens": 10}})
                message: dict[str, Any] = {"role": "assistant", "content": step["content"]}
                if step["calls"]:
                    message["tool_calls"] = step["calls"]
                usage = dict(step["usage"])
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(200, {
                    "id": f"chatcmpl-{len(outer.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if step["calls"] else "stop"}],
                    "usage": usage,
                })

            def _trickle(self, data: bytes, delay: float) -> None:
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    for i in range(len(data)):
                        if outer.stop.wait(delay):
                            break
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    pass
                self.close_connection = True

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

            def _send_bytes(self, status: int, data: bytes, content_type: str,
                            headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
