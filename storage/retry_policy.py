"""How the Delta writer backs off when its commit loses a race against another writer."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for conflicting Delta commits.

    delta-rs already retries commits whose conflict its rules resolve (a blind append racing a compaction);
    this policy covers conflicts that need the commit re-planned (a MERGE whose files were rewritten,
    a concurrent commit carrying one of our txn ids). Jitter spreads the retries of parallel subtasks that
    conflicted with each other, otherwise they collide again on every round.
    """

    #: Total attempts including the first; the commit raises ``CommitConflictError`` after that.
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
