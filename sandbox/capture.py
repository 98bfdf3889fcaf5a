"""Capped capture of a child's output: keep the head and the tail, count what was dropped."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CappedBuffer:
    """Accumulates bytes read incrementally; memory stays bounded by ``cap`` whatever arrives."""

    cap: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        head_cap = self.cap // 2
        if len(self.head) < head_cap:
            take = head_cap - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail += chunk
            tail_cap = self.cap - head_cap
            if len(self.tail) > tail_cap:
                del self.tail[: len(self.tail) - tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """Head + marker + tail as text (undecodable bytes replaced)."""
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... ferry sandbox: {self.dropped} bytes of output dropped ...]\n{tail}"
        return head + tail

    def tail_text(self, limit: int) -> str:
        """The last ``limit`` characters of the captured text."""
        text = self.text()
        return text[-limit:] if len(text) > limit else text
