"""The openai client with Ferry's budgets, retries with backoff, and usage accounting.

Every request's timeout and every backoff sleep are capped by what the LLM wall budget has left,
so a server that never answers ends within about that budget. Each way a request can fail is
named (:data:`FAILURE_KINDS`), counted in :class:`Usage` and, once retries or the budget run out,
raised as :class:`LLMFailure` (``failed_llm``) or :class:`BudgetExhausted` (``failed_budget``)
with that name in the reason. The reply is read from the raw body (JSON checked here, sizes
capped), never trusted to the openai library's lenient parsing.

Under a cost cap (``--llm-max-cost``) each request's worst-case cost is checked before it is sent
(:mod:`agent.llm.cost`); every request, reply and failure goes to the migration's trajectory
(:mod:`agent.llm.trajectory`) when the client has a recorder (:func:`model_client` gives it one).
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, Field, ValidationError

from agent.errors import BudgetExhausted, LLMFailure
from agent.llm.config import LLMConfig, from_env
from agent.llm.cost import COMPLETION_TOKENS_UNDER_CAP, CostCapReached, worst_prompt_tokens
from agent.llm.trajectory import CostStopEvent, FailureEvent, RecordedCall, Recorder, ReplyEvent
from agent.migration.budget import time_left
from agent.migration.state import MigrationState, llm_counters_of, options_of

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

logger = logging.getLogger(__name__)

FAILURE_KINDS = {
    "timeout": "no answer within the request timeout",
    "rate_limited": "HTTP 429",
    "server_error": "HTTP 5xx",
    "connection": "the connection was refused or dropped",
    "http_error": "another HTTP error status (4xx): not retried",
    "non_json": "a reply whose body is not JSON",
    "truncated_json": "a reply whose JSON is cut short or broken",
    "malformed_reply": "JSON, but not a chat completion (no message, wrong types)",
    "no_choices": "a completion with no choices",
    "oversized": "a reply (content or tool-call arguments) over the size cap",
    "tool_call": "a tool call to an unknown tool or with bad arguments (sent back to the model)",
    "unexpected": "any other error of the client library",
}
FAILURE_PREFIX = "failures."


class Usage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    wall_s: float = 0.0
    failures: dict[str, int] = Field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_counters(self) -> dict[str, float]:
        """Flat counters, as the state's ``llm_usage`` sums them (failures as ``failures.<kind>``)."""
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "retries": self.retries, "wall_s": round(self.wall_s, 3),
                **{FAILURE_PREFIX + k: n for k, n in self.failures.items()}}

    @classmethod
    def of_counters(cls, counters: Mapping[str, float]) -> Usage:
        return cls(calls=int(counters.get("calls", 0)), prompt_tokens=int(counters.get("prompt_tokens", 0)),
                   completion_tokens=int(counters.get("completion_tokens", 0)),
                   retries=int(counters.get("retries", 0)), wall_s=float(counters.get("wall_s", 0.0)),
                   failures={k[len(FAILURE_PREFIX):]: int(v) for k, v in counters.items()
                             if k.startswith(FAILURE_PREFIX) and v})


class ReplyFunction(BaseModel):
    name: str
    arguments: str | None = ""


class ReplyToolCall(BaseModel):
    id: str = ""
    type: str = "function"
    function: ReplyFunction


class Reply(BaseModel):
    """The assistant message of a completion, checked (what the fixer reads)."""

    content: str | None = None
    tool_calls: list[ReplyToolCall] | None = None


def retry_after_s(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """The server's ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``, in seconds."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            value = float(ms) / 1000
            return value if math.isfinite(value) and value >= 0 else None
        except ValueError:
            pass
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _TooSlow(Exception):
    """The reply's body did not arrive within the request timeout (counted and retried as a timeout)."""


def _snippet(text: str, n: int = 120) -> str:
    return repr(text[:n]) + ("..." if len(text) > n else "")


class ChatClient:
    """Chat completions with tool calling, within call / token / wall-time budgets.

    ``spent`` is what earlier fix attempts of the same migration already used (calls, tokens, wall
    seconds), so budgets hold across the whole migration (and across ``ferry resume``);
    ``wall_left`` caps the wall budget further (the migration's own ``--max-wall`` left).
    """

    def __init__(self, cfg: LLMConfig, spent: Mapping[str, float] | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, wall_left: float | None = None,
                 recorder: Recorder | None = None) -> None:
        import openai

        self.cfg = cfg
        self.recorder = recorder
        self._openai = openai
        self.usage = Usage()
        try:
            self._client = openai.OpenAI(base_url=cfg.base_url, api_key=cfg.api_key, max_retries=0,
                                         timeout=cfg.request_timeout_s)
        except Exception as exc:  # e.g. a base URL the library cannot use
            raise self._fail("unexpected", f"cannot create the client for {cfg.base_url}: "
                                           f"{type(exc).__name__}: {exc}") from exc
        spent = spent or {}
        self.prior_prompt = int(spent.get("prompt_tokens", 0))
        self.prior_completion = int(spent.get("completion_tokens", 0))
        self.price = None
        if cfg.max_cost_usd is not None:
            from agent.llm.prices import Prices

            try:
                self.price = Prices.load().models.get(cfg.model)
            except ValueError as exc:
                raise LLMFailure(f"the cost cap needs the price table: {exc}") from None
            if self.price is None:
                from agent.llm.cost import unpriced_problem

                raise LLMFailure(unpriced_problem(cfg.model, cfg.max_cost_usd, False) or "no price")
        self.prior_calls = int(spent.get("calls", 0))
        self.prior_tokens = int(spent.get("prompt_tokens", 0) + spent.get("completion_tokens", 0))
        prior_wall = float(spent.get("wall_s", 0.0))
        self.budget_s = cfg.max_wall_s - prior_wall
        if wall_left is not None:
            self.budget_s = min(self.budget_s, wall_left)
        self.started = time.monotonic()
        self._sleep = sleep

    # --- accounting -------------------------------------------------------------------------
    def wall_left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def count_failure(self, kind: str) -> None:
        self.usage.failures[kind] = self.usage.failures.get(kind, 0) + 1

    def counters(self) -> dict[str, float]:
        """This client's usage so far, as the state's ``llm_usage`` counters (wall time included)."""
        self.usage.wall_s = time.monotonic() - self.started
        return self.usage.as_counters()

    def _failures_text(self) -> str:
        return ", ".join(f"{k} x{n}" for k, n in self.usage.failures.items())

    def _check_budget(self) -> float:
        """The wall seconds left; BudgetExhausted when a budget is spent."""
        if self.prior_calls + self.usage.calls >= self.cfg.max_calls:
            raise BudgetExhausted(f"LLM call budget exhausted ({self.cfg.max_calls} calls)")
        if self.prior_tokens + self.usage.tokens >= self.cfg.max_tokens:
            raise BudgetExhausted(f"LLM token budget exhausted ({self.prior_tokens + self.usage.tokens} of "
                                  f"{self.cfg.max_tokens} tokens)")
        left = self.wall_left()
        if left <= 0.05:
            after = f" after {self._failures_text()}" if self.usage.failures else ""
            raise BudgetExhausted(f"LLM wall-time budget exhausted ({self.cfg.max_wall_s:g} s){after}")
        return left

    def spent_usd(self) -> float | None:
        """What the migration's tokens cost so far (None without a price)."""
        if self.price is None:
            return None
        return ((self.prior_prompt + self.usage.prompt_tokens) * self.price.input_per_mtok
                + (self.prior_completion + self.usage.completion_tokens) * self.price.output_per_mtok) / 1e6

    def _check_cost(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
        """CostCapReached when what was spent plus this request's worst case is over the cap."""
        cap, price, spent = self.cfg.max_cost_usd, self.price, self.spent_usd()
        if cap is None or price is None or spent is None:
            return
        worst = (worst_prompt_tokens(messages, tools) * price.input_per_mtok
                 + COMPLETION_TOKENS_UNDER_CAP * price.output_per_mtok) / 1e6
        if spent + worst > cap:
            if self.recorder is not None:
                self.recorder.write(CostStopEvent(spent_usd=round(spent, 6), cap_usd=cap,
                                                  next_worst_usd=round(worst, 6)))
            raise CostCapReached(spent, cap, worst)

    def _fail(self, kind: str, message: str) -> LLMFailure:
        self.count_failure(kind)
        logger.warning("LLM request failed [%s]: %s", kind, message)
        return LLMFailure(f"LLM {kind}: {message}")

    # --- one completion ---------------------------------------------------------------------
    def _kind(self, exc: Exception) -> str:
        oa = self._openai
        if isinstance(exc, oa.APITimeoutError):
            return "timeout"
        if isinstance(exc, oa.APIConnectionError):
            return "connection"
        if isinstance(exc, oa.RateLimitError):
            return "rate_limited"
        return "server_error"

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
        """One completion (timeouts, 429, 5xx and refused connections retried with backoff). ``tools``
        None: a plain answer, no tools offered (the request carries neither ``tools`` nor ``tool_choice``)."""
        oa = self._openai
        attempt = 0
        while True:
            left = self._check_budget()
            self._check_cost(messages, tools)
            self.usage.calls += 1
            timeout = max(0.05, min(self.cfg.request_timeout_s, left))
            n = self._record_request(messages, tools)
            t0 = time.monotonic()
            try:
                try:
                    body, content_type = self._request(messages, tools, timeout)
                except Exception as exc:
                    self._record_failure(n, exc, time.monotonic() - t0)
                    raise
                before = (self.usage.prompt_tokens, self.usage.completion_tokens)
                try:
                    reply = self._reply(body, content_type)
                except LLMFailure as exc:
                    self._record_failure(n, exc, time.monotonic() - t0)
                    raise
                self._record_reply(n, reply, before, time.monotonic() - t0)
                return reply
            except (oa.APITimeoutError, oa.RateLimitError, oa.InternalServerError, oa.APIConnectionError,
                    _TooSlow) as exc:
                kind = "timeout" if isinstance(exc, _TooSlow) else self._kind(exc)
                self.count_failure(kind)
                attempt += 1
                if attempt > self.cfg.max_retries:
                    raise LLMFailure(f"LLM {kind}: the model server kept failing after {self.cfg.max_retries} "
                                     f"retries ({self._failures_text()}); last: {type(exc).__name__}: {exc}") from exc
                self._back_off(kind, attempt, exc)
                continue
            except oa.APIStatusError as exc:
                raise self._fail("http_error", f"the model server refused the request: HTTP {exc.status_code}: "
                                               f"{exc.message}") from exc
            except LLMFailure:  # already named and counted (an oversized body)
                raise
            except Exception as exc:  # anything else the library raises: a named failure, never a crash
                raise self._fail("unexpected", f"{type(exc).__name__}: {exc}") from exc

    # --- the trajectory ---------------------------------------------------------------------
    def _record_request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        if self.recorder is None:
            return 0
        capped = COMPLETION_TOKENS_UNDER_CAP if self.cfg.max_cost_usd is not None else None
        return self.recorder.request(messages, tools, capped)

    def _record_reply(self, n: int, reply: Reply, before: tuple[int, int], seconds: float) -> None:
        if self.recorder is None:
            return
        prompt, completion = self.usage.prompt_tokens - before[0], self.usage.completion_tokens - before[1]
        from agent.llm.prices import estimated_cost

        calls = [RecordedCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "")
                 for tc in reply.tool_calls or []]
        self.recorder.write(ReplyEvent(n=n, content=reply.content, tool_calls=calls, prompt_tokens=prompt,
                                       completion_tokens=completion,
                                       cost_usd=estimated_cost(self.cfg.model, prompt, completion),
                                       wall_s=round(seconds, 3)))

    def _record_failure(self, n: int, exc: Exception, seconds: float) -> None:
        if self.recorder is None:
            return
        status = getattr(exc, "status_code", None)
        if isinstance(exc, LLMFailure):
            kind = str(exc).removeprefix("LLM ").split(":", 1)[0]
        elif isinstance(exc, _TooSlow):
            kind = "timeout"
        elif isinstance(exc, self._openai.APIStatusError) and not isinstance(
                exc, self._openai.RateLimitError | self._openai.InternalServerError):
            kind = "http_error"
        elif isinstance(exc, self._openai.APIError):
            kind = self._kind(exc)
        else:
            kind = "unexpected"
        self.recorder.write(FailureEvent(n=n, failure=kind, status=status if isinstance(status, int) else None,
                                         message=str(exc)[:2000], wall_s=round(seconds, 3)))

    def record_tool(self, n: int, call_id: str, name: str, arguments: str, observation: str, seconds: float) -> None:
        """A tool call the model made in reply ``n`` and what Ferry answered it."""
        if self.recorder is None:
            return
        from agent.llm.trajectory import ToolEvent

        self.recorder.write(ToolEvent(n=max(1, n), id=call_id, name=name, arguments=arguments,
                                      observation=observation, wall_s=round(seconds, 3)))

    @property
    def last_request(self) -> int:
        """The number of the latest request in the trajectory (0: none recorded)."""
        return self.recorder.n if self.recorder is not None else 0

    def _request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 timeout: float) -> tuple[bytes, str]:
        """The reply's body, read in chunks: all of it within ``timeout`` (httpx's own timeout is per read,
        so a server trickling bytes would hold it longer) and no more than the size cap."""
        deadline = time.monotonic() + timeout
        limit = 4 * self.cfg.max_reply_chars + 65536
        offered: dict[str, Any] = ({"tools": cast("list[ChatCompletionToolParam]", tools), "tool_choice": "auto"}
                                   if tools else {})
        if self.cfg.max_cost_usd is not None:  # the worst case the cost cap counts on
            offered["max_completion_tokens"] = COMPLETION_TOKENS_UNDER_CAP
        with self._client.chat.completions.with_streaming_response.create(  # messages/tools are plain JSON
                model=self.cfg.model, messages=cast("list[ChatCompletionMessageParam]", messages),
                temperature=0, timeout=timeout, **offered) as resp:
            content_type = resp.headers.get("content-type", "")
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise self._fail("oversized", f"the reply body is over {limit} bytes, over the cap "
                                                  f"(FERRY_LLM_MAX_REPLY_CHARS={self.cfg.max_reply_chars} characters)")
                if time.monotonic() > deadline:
                    raise _TooSlow(f"the reply took longer than the {timeout:.1f} s request timeout to arrive")
        return b"".join(chunks), content_type

    def _back_off(self, kind: str, attempt: int, exc: Exception) -> None:
        delay = self.cfg.backoff_s * (2 ** (attempt - 1))
        asked = retry_after_s(getattr(getattr(exc, "response", None), "headers", None))
        if asked is not None:
            delay = max(delay, asked)
        left = self.wall_left()
        if delay >= left:
            raise BudgetExhausted(f"LLM wall-time budget exhausted ({self.cfg.max_wall_s:g} s): after "
                                  f"{self._failures_text()} the next retry would wait {delay:.1f} s "
                                  f"({'Retry-After' if asked is not None else 'backoff'}), {max(left, 0):.1f} s left")
        self.usage.retries += 1
        logger.warning("LLM call failed [%s]; retry %d in %.1fs", kind, attempt, delay)
        self._sleep(delay)

    def _reply(self, body: bytes, content_type: str) -> Reply:
        cap = self.cfg.max_reply_chars
        text = body.decode("utf-8", errors="replace")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if text.lstrip().startswith(("{", "[")):
                raise self._fail("truncated_json", f"the reply's JSON is cut short or broken ({exc}): "
                                                   f"{_snippet(text[-120:])}") from None
            raise self._fail("non_json", f"the reply is not JSON (HTTP 200, content-type "
                                         f"{content_type or 'none'}): {_snippet(text)}") from None
        if not isinstance(data, dict):
            raise self._fail("malformed_reply", f"the reply is JSON but not an object: {_snippet(text)}")
        usage = data.get("usage")
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                try:
                    setattr(self.usage, key, getattr(self.usage, key) + max(0, int(usage.get(key) or 0)))
                except (TypeError, ValueError):
                    pass
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            err = data.get("error")
            why = f": {_snippet(str(err.get('message') if isinstance(err, dict) else err))}" if err else ""
            raise self._fail("no_choices", f"the model server returned no choices{why}")
        first = choices[0]
        try:
            reply = Reply.model_validate(first.get("message") if isinstance(first, dict) else None)
        except ValidationError as exc:
            raise self._fail("malformed_reply", "the reply's message is not a chat message: "
                                                f"{exc.errors(include_url=False)[:2]}") from None
        sizes = [len(reply.content or "")] + [len(tc.function.arguments or "") for tc in reply.tool_calls or []]
        if max(sizes) > cap:
            raise self._fail("oversized", f"the reply holds {max(sizes)} characters in one part, over the cap of "
                                          f"{cap} (FERRY_LLM_MAX_REPLY_CHARS)")
        for i, tc in enumerate(reply.tool_calls or []):
            if not tc.id:
                tc.id = f"call_{self.usage.calls}_{i}"
        return reply


def model_client(state: MigrationState, node: str | None = None) -> ChatClient:
    """The model server the migration was started with (its limits, the usage spent so far, its cost cap
    with what the user approved beyond it), within what ``--max-wall`` has left, recording the migration's
    trajectory; a missing model or key raises ``LLMFailure``."""
    from agent.llm.trajectory import Recorder, Scrubber, new_header, trajectory_path
    from agent.migration.state import cost_allowance_of, migration_id_of

    opts = options_of(state)
    cfg = from_env(model=opts.llm_model, base_url=opts.llm_base_url, limits=opts.llm_limits)
    cap = opts.llm_max_cost
    if cap is None:  # a model with no price needs a decision on its cost (the CLI asks before it starts)
        from agent.llm.cost import unpriced_problem
        from agent.llm.prices import Prices

        try:
            priced = cfg.model in Prices.load().models
        except ValueError as exc:
            raise LLMFailure(str(exc)) from None
        problem = unpriced_problem(cfg.model, None, priced)
        if problem is not None:
            raise LLMFailure(problem)
    if isinstance(cap, float | int):
        cfg = cfg.model_copy(update={"max_cost_usd": float(cap) + cost_allowance_of(state)})
    left = time_left(state)
    mid = migration_id_of(state)
    scrubber = Scrubber([cfg.api_key, *(v for k, v in opts.env.items() if _secret_named(k))])
    header = new_header(model=cfg.model, base_url=cfg.base_url, migration_id=mid,
                        options=opts.model_dump(mode="json"))
    recorder = Recorder(trajectory_path(opts.state_dir, mid), header, scrubber, node=node)
    return ChatClient(cfg, llm_counters_of(state), wall_left=None if left is None else max(1.0, left),
                      recorder=recorder)


def _secret_named(name: str) -> bool:
    return any(word in name.upper() for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
