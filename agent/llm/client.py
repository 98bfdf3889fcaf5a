"""The openai client with Ferry's budgets, retries with backoff, and usage accounting."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from agent.errors import BudgetExhausted, LLMFailure
from agent.llm.config import LLMConfig

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

logger = logging.getLogger(__name__)


class Usage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_counters(self) -> dict[str, float]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "retries": self.retries}


class ChatClient:
    """Chat completions with tool calling, within call / token / wall-time budgets.

    ``spent`` is what earlier fix attempts of the same migration already used, so budgets hold
    across the whole migration (and across ``ferry resume``).
    """

    def __init__(self, cfg: LLMConfig, spent: dict[str, float] | None = None, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import openai

        self.cfg = cfg
        self._openai = openai
        self._client = openai.OpenAI(base_url=cfg.base_url, api_key=cfg.api_key, max_retries=0,
                                     timeout=cfg.request_timeout_s)
        spent = spent or {}
        self.prior_calls = int(spent.get("calls", 0))
        self.prior_tokens = int(spent.get("prompt_tokens", 0) + spent.get("completion_tokens", 0))
        self.usage = Usage()
        self.started = time.monotonic()
        self._sleep = sleep

    def _check_budget(self) -> None:
        if self.prior_calls + self.usage.calls >= self.cfg.max_calls:
            raise BudgetExhausted(f"LLM call budget exhausted ({self.cfg.max_calls} calls)")
        if self.prior_tokens + self.usage.tokens >= self.cfg.max_tokens:
            raise BudgetExhausted(f"LLM token budget exhausted ({self.prior_tokens + self.usage.tokens} of "
                                  f"{self.cfg.max_tokens} tokens)")
        if time.monotonic() - self.started >= self.cfg.max_wall_s:
            raise BudgetExhausted(f"LLM wall-time budget exhausted ({self.cfg.max_wall_s:.0f}s)")

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
        """One completion (retried on timeouts, 429 and 5xx with exponential backoff). ``tools`` None:
        a plain answer, no tools offered (the request carries neither ``tools`` nor ``tool_choice``)."""
        oa = self._openai
        attempt = 0
        while True:
            self._check_budget()
            try:
                self.usage.calls += 1
                offered: dict[str, Any] = ({"tools": cast("list[ChatCompletionToolParam]", tools),
                                            "tool_choice": "auto"} if tools else {})
                resp = self._client.chat.completions.create(  # messages and tools are built as plain JSON
                    model=self.cfg.model, messages=cast("list[ChatCompletionMessageParam]", messages),
                    temperature=0, **offered,
                )
            except (oa.APITimeoutError, oa.RateLimitError, oa.InternalServerError, oa.APIConnectionError) as exc:
                attempt += 1
                if attempt > self.cfg.max_retries:
                    raise LLMFailure(f"the model server kept failing after {self.cfg.max_retries} retries: "
                                     f"{type(exc).__name__}: {exc}") from exc
                delay = self.cfg.backoff_s * (2 ** (attempt - 1))
                retry_after = getattr(getattr(exc, "response", None), "headers", {}) or {}
                if retry_after.get("retry-after"):
                    try:
                        delay = max(delay, min(float(retry_after["retry-after"]), 60.0))
                    except ValueError:
                        pass
                self.usage.retries += 1
                logger.warning("LLM call failed (%s); retry %d in %.1fs", type(exc).__name__, attempt, delay)
                self._sleep(delay)
                continue
            except oa.APIStatusError as exc:
                raise LLMFailure(f"the model server refused the request: HTTP {exc.status_code}: "
                                 f"{exc.message}") from exc
            usage = getattr(resp, "usage", None)
            if usage is not None:
                self.usage.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
                self.usage.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            if not resp.choices:
                raise LLMFailure("the model server returned no choices")
            return resp.choices[0].message
