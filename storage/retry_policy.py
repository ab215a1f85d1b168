"""How a Delta commit that loses a race against another writer is retried: the one retry loop.

The sink's committer, the maintenance operations and the merge-on-read fold all retry through
``RetryPolicy.run``; they differ only in what they retry, what they log and what they raise at the end.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for conflicting Delta commits.

    delta-rs already retries commits whose conflict its rules resolve (a blind append racing a compaction);
    this policy covers conflicts that need the commit re-planned (a MERGE whose files were rewritten,
    a concurrent commit carrying one of our txn ids). Jitter spreads the retries of parallel subtasks that
    conflicted with each other, otherwise they collide again on every round.
    """

    #: Total attempts including the first; after that ``run`` hands the last error to ``exhausted``.
    max_attempts: int = 10
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    #: Fraction of the backoff that is randomised (0 = deterministic).
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("RetryPolicy backoffs must be >= 0 seconds")
        if self.multiplier < 1:
            raise ValueError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"RetryPolicy.jitter must be within [0, 1], got {self.jitter}")

    def backoff_s(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to sleep before retry number ``retry`` (1-based)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** max(0, retry - 1))
        if self.jitter == 0:
            return base
        r = (rng or random).random()
        return base * (1 - self.jitter) + base * self.jitter * r

    def run(
        self,
        attempt: Callable[[int], T],
        *,
        retry_on: type[E],
        exhausted: Callable[[int, E], T],
        on_retry: Callable[[int, E, float], object] | None = None,
        sleep: Callable[[float], object] | None = None,
        rng: random.Random | None = None,
    ) -> T:
        """``attempt(n)`` for n = 1, 2, ... until it returns, retrying only errors of type ``retry_on``.

        Before retry n: ``on_retry(n, error, delay)``, then a sleep of ``backoff_s(n)``. After
        ``max_attempts`` failed attempts: ``exhausted(attempts, last error)``, called inside the
        ``except`` block, so it may raise its own error ``from`` the last one or return a fallback.
        Any other error propagates at once.
        """
        for n in range(1, self.max_attempts + 1):
            try:
                return attempt(n)
            except retry_on as exc:
                if n == self.max_attempts:
                    return exhausted(n, exc)
                delay = self.backoff_s(n, rng)
                if on_retry is not None:
                    on_retry(n, exc, delay)
                (sleep or time.sleep)(delay)
        raise AssertionError("unreachable")  # pragma: no cover
