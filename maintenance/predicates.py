"""``--where`` of ``maintain optimize``: a conjunction of partition-column comparisons.

delta-rs' OPTIMIZE selects files by partition values only (``partition_filters``), so the predicate
is parsed into those filters here, and any column that is not a partition column is refused with the
table's partition columns named, instead of being silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from maintenance.maintenance_errors import PredicateError

Filter = tuple[str, str, str | list[str]]

_TERM = re.compile(
    r"""^\s*(?P<col>[A-Za-z_][A-Za-z0-9_]*)\s*
        (?:(?P<op><=|>=|!=|<>|=|<|>)\s*(?P<value>'[^']*'|"[^"]*"|[^\s'"]+)
          |(?P<in>not\s+in|in)\s*\((?P<values>[^)]*)\))\s*$""",
    re.IGNORECASE | re.VERBOSE,
)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def partition_filters(predicate: str, partition_columns: Sequence[str]) -> list[Filter]:
    """Parse ``source = 'payments' AND day IN ('2026-12-01', '2026-12-02')`` into delta-rs filters."""
    if not predicate.strip():
        raise PredicateError("--where is empty: give e.g. \"source = 'payments'\"")
    if not partition_columns:
        raise PredicateError(
            "--where: the table has no partition columns, and OPTIMIZE selects files by partition only; "
            "drop --where to optimize the whole table"
        )
    out: list[Filter] = []
    for term in _AND.split(predicate.strip()):
        m = _TERM.match(term)
        if m is None:
            raise PredicateError(
                f"--where: cannot read {term.strip()!r}; write comparisons of partition columns joined by "
                "AND: col = 'v', col != 'v', col < 'v', col IN ('a', 'b'), col NOT IN ('a')"
            )
        col = m.group("col")
        if col not in partition_columns:
            raise PredicateError(
                f"--where: {col!r} is not a partition column (partition columns: "
                f"{', '.join(partition_columns)}); OPTIMIZE selects files by partition values only"
            )
        if m.group("in"):
            values = [_unquote(v) for v in m.group("values").split(",") if v.strip()]
            if not values:
                raise PredicateError(f"--where: {term.strip()!r} lists no values")
            op = "not in" if m.group("in").lower().startswith("not") else "in"
            out.append((col, op, values))
        else:
            op = "!=" if m.group("op") == "<>" else m.group("op")
            out.append((col, op, _unquote(m.group("value"))))
    return out
