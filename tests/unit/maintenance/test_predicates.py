"""``--where``: partition-column comparisons into delta-rs partition filters, anything else refused."""

from __future__ import annotations

import pytest

from maintenance.maintenance_errors import PredicateError
from maintenance.predicates import partition_filters


def test_a_conjunction_of_comparisons() -> None:
    got = partition_filters(
        "source = 'payments' AND day >= \"2026-12-01\" and n != 3", ["source", "day", "n"]
    )
    assert got == [("source", "=", "payments"), ("day", ">=", "2026-12-01"), ("n", "!=", "3")]


def test_in_and_not_in_lists() -> None:
    assert partition_filters("source IN ('a', 'b') AND day not in ('x')", ["source", "day"]) == [
        ("source", "in", ["a", "b"]),
        ("day", "not in", ["x"]),
    ]


@pytest.mark.parametrize(
    ("predicate", "columns", "needle"),
    [
        ("order_id = '1'", ["source"], "'order_id' is not a partition column (partition columns: source)"),
        ("source = 'a'", [], "no partition columns"),
        ("source LIKE 'a%'", ["source"], "cannot read"),
        ("source = 'a' OR source = 'b'", ["source"], "cannot read"),
        ("   ", ["source"], "empty"),
        ("source IN ()", ["source"], "lists no values"),
    ],
)
def test_what_optimize_cannot_select_is_refused_with_the_reason(
    predicate: str, columns: list[str], needle: str
) -> None:
    with pytest.raises(PredicateError, match="--where") as info:
        partition_filters(predicate, columns)
    assert needle in str(info.value)
