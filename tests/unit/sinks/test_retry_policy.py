"""``RetryPolicy.run``: the one retry loop of the committer, the maintenance operations and the fold."""

from __future__ import annotations

from typing import NoReturn

import pytest

from storage.retry_policy import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, initial_backoff_s=0.1, max_backoff_s=0.15, jitter=0)


class Conflict(Exception):
    pass


def never(n: int, exc: Conflict) -> NoReturn:
    raise AssertionError(f"exhausted after {n}: {exc}")


def test_conflicts_are_retried_after_the_backoff_until_an_attempt_returns() -> None:
    slept: list[float] = []
    retried: list[tuple[int, str, float]] = []

    def attempt(n: int) -> str:
        if n < 3:
            raise Conflict(f"lost {n}")
        return f"landed at {n}"

    result = POLICY.run(
        attempt,
        retry_on=Conflict,
        exhausted=never,
        on_retry=lambda n, exc, delay: retried.append((n, str(exc), delay)),
        sleep=slept.append,
    )
    assert result == "landed at 3"
    assert slept == [0.1, 0.15]  # doubling, capped at max_backoff_s
    assert retried == [(1, "lost 1", 0.1), (2, "lost 2", 0.15)]


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def attempt(n: int) -> None:
        calls.append(n)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError, match="not a conflict"):
        POLICY.run(attempt, retry_on=Conflict, exhausted=never, sleep=lambda _s: None)
    assert calls == [1]


def test_exhausted_gets_the_attempts_and_the_last_error_and_may_raise_or_return() -> None:
    def attempt(n: int) -> int:
        raise Conflict(f"lost {n}")

    def give_up(n: int, exc: Conflict) -> NoReturn:
        raise RuntimeError(f"{n} attempts, last: {exc}") from exc

    with pytest.raises(RuntimeError, match="3 attempts, last: lost 3") as info:
        POLICY.run(attempt, retry_on=Conflict, exhausted=give_up, sleep=lambda _s: None)
    assert isinstance(info.value.__cause__, Conflict)
    slept: list[float] = []
    assert POLICY.run(attempt, retry_on=Conflict, exhausted=lambda n, _e: -n, sleep=slept.append) == -3
    assert len(slept) == 2  # no sleep after the last attempt
