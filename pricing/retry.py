"""Retrying throttled cloud calls with exponential backoff.

The fetchers turn their SDK's own retries off and use this one policy instead, so
every cloud backs off the same way and tests can count attempts without sleeping.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pricing.refresh import ThrottledError

T = TypeVar("T")

RetryAfter = Callable[[BaseException], "float | None"]
"""Says whether an exception is worth retrying: ``None`` for no, else the seconds the
server asked us to wait (``0.0`` when it did not say)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a throttled call.

    The n-th retry waits ``min(max_delay, base_delay * 2**n)`` plus up to 25 %
    jitter, or longer when the server sent a Retry-After.  ``sleep`` is injectable
    so tests can record the waits instead of spending them.
    """

    attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        backoff = min(self.max_delay, self.base_delay * (2**retry))
        backoff += backoff * 0.25 * random.random()
        return max(backoff, min(retry_after or 0.0, self.max_delay))

    def call(self, fn: Callable[[], T], *, retry_after: RetryAfter, cloud: str, what: str) -> T:
        """``fn()``, retried while ``retry_after`` says its failure is transient.

        Raises :class:`~pricing.refresh.ThrottledError` when the attempts run out, and
        re-raises any other exception at once.
        """
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                wait = retry_after(exc)
                if wait is None:
                    raise
                attempt += 1
                if attempt >= self.attempts:
                    raise ThrottledError(
                        cloud,
                        f"{what} was still throttled or unavailable after {self.attempts} attempts; "
                        f"wait a few minutes and run 'planner prices refresh --cloud {cloud}' again, "
                        "or refresh fewer regions with --region",
                    ) from exc
                self.sleep(self.delay(attempt - 1, wait))
