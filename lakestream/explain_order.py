"""Why an order's silver row holds what it holds: every event of the order, judged by silver's own rule.

Given the order's silver row and its events in bronze (every delivery, every quality), the late table's
copies of them and what quarantine holds, ``explain_order`` names per field the event that set the
value and, for every other event that offered one, why it did not win; and per event one outcome. It
decides nothing itself: which event offers which field is ``silver_source`` (``FIELD_OFFERS``), who wins
is ``SILVER_MERGE.source_wins``, which delivery of an id counts is ``lakestream.gold.DELIVERY_ORDER``,
and ``replay_winners`` folds the winners back with ``SILVER_MERGE`` to show they give the row (DESIGN.md
section 12, "Explaining a number").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from lakestream.gold import DELIVERY_ORDER, first_deliveries
from lakestream.merge_spec import GuardGroup
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA, silver_source
from lakestream.standard import EVENT_COLUMNS
from lakestream.time import iso_utc

#: One outcome per bronze event of the order.
Outcome = Literal[
    "won",  # it set at least one field silver holds
    "older",  # every field it offered holds a value of a newer event
    "tie",  # a field it offered holds a value of the same event time that arrived later
    "pending",  # newer than what silver holds: not applied at the silver version read
    "no_field",  # applied, but it offers no silver field (behaviour events count only in gold)
    "duplicate",  # a re-delivery of an event id whose first delivery is another row
    "review",  # tagged SUSPICIOUS: kept in review/, not applied
    "quarantined",  # tagged INVALID: kept in quarantine/, not applied
]
OUTCOMES: tuple[str, ...] = Outcome.__args__  # type: ignore[attr-defined]
#: Qualities whose events are not applied, with the outcome they get.
_NOT_APPLIED: Mapping[str, Outcome] = {"SUSPICIOUS": "review", "INVALID": "quarantined"}
#: Column of the bronze version holding each row, when the reader knows it.
BRONZE_VERSION = "bronze_version"


@dataclass(frozen=True, slots=True)
class EventRef:
    """One bronze row of the order: the event and where it is."""

    event_id: str
    source: str
    event_type: str
    event_time: datetime
    quality: str
    topic: str
    partition: int
    offset: int
    ingest_time: datetime
    bronze_version: int | None
    quality_reason: str | None = None

    @property
    def coordinates(self) -> str:
        """``topic/partition@offset``: where Kafka delivered it."""
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True, slots=True)
class LateMark:
    """The event arrived behind its partition's watermark (a row of ``late/``)."""

    watermark: datetime

    def lateness(self, event_time: datetime) -> float:
        """Seconds between the watermark it missed and its event time."""
        return (self.watermark - event_time).total_seconds()


@dataclass(frozen=True, slots=True)
class FieldOffer:
    """One event offering a value for a field, and what became of it."""

    event: EventRef
    value: Any
    outcome: Outcome
    detail: str


@dataclass(frozen=True, slots=True)
class FieldExplanation:
    """One silver field: its value, the event that set it, the other events that offered one."""

    field: str
    time_column: str
    id_column: str
    value: Any
    time: datetime | None
    winner_id: str | None
    #: The first delivery of ``winner_id`` among the order's bronze rows; None when bronze lacks it.
    winner: EventRef | None
    others: tuple[FieldOffer, ...]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One bronze row of the order with its one outcome (event-time order)."""

    event: EventRef
    outcome: Outcome
    detail: str
    #: Tables holding it: bronze always, late/review/quarantine when they do.
    tables: tuple[str, ...]
    #: Fields whose value it set (outcome ``won``).
    fields_won: tuple[str, ...] = ()
    late: LateMark | None = None
    #: The delivery this row duplicates (outcome ``duplicate``).
    first_delivery: EventRef | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """A quarantine row naming the order that could not be adapted (its order is not known for sure)."""

    source: str
    reason: str
    topic: str
    partition: int
    offset: int
    ingest_time: datetime


@dataclass(frozen=True, slots=True)
class Change:
    """An event that set fields of the order when applied (the rule replayed in delivery order)."""

    event: EventRef
    #: The fields it set, with the values it gave them.
    values: Mapping[str, Any]
    #: The silver version that applied it (filled in by the reader; None: not known or not yet) ...
    silver_version: int | None = None
    #: ... and its table: the changes table of a merge-on-read silver, or ``silver/orders`` (also for
    #: changes applied by copy-on-write runs before a switch to merge-on-read).
    silver_table: str | None = None


@dataclass(frozen=True)
class OrderExplanation:
    """Everything ``explain order`` says about one order."""

    order_id: str
    silver: Mapping[str, Any] | None
    fields: tuple[FieldExplanation, ...]
    timeline: tuple[TimelineEntry, ...]
    rejects: tuple[Reject, ...] = ()
    #: Differences between silver and the fold of the winners (empty: the winners give the row).
    problems: tuple[str, ...] = field(default=())
    #: How the row came to be: each applied event that set a field, in delivery order.
    history: tuple[Change, ...] = field(default=())


def _ref(row: Mapping[str, Any]) -> EventRef:
    return EventRef(
        event_id=row["event_id"],
        source=row["source"],
        event_type=row["event_type"],
        event_time=row["event_time"],
        quality=row["quality"],
        topic=row["topic"],
        partition=int(row["partition"]),
        offset=int(row["offset"]),
        ingest_time=row["ingest_time"],
        bronze_version=row.get(BRONZE_VERSION),
        quality_reason=row.get("quality_reason"),
    )


def _id_column(group: GuardGroup) -> str:
    """The column naming the event that set ``group`` (its first companion: ``F__eid``)."""
    companions = SILVER_MERGE.companions.get(group.value, ())
    if not companions:
        raise AssertionError(f"SILVER_MERGE: {group.value} has no event-id companion")
    return companions[0]


def _in_delivery_order(events: pa.Table) -> pa.Table:
    order = pc.sort_indices(events, sort_keys=[(c, "ascending") for c in DELIVERY_ORDER])
    return events.take(order)


def _partial_rows(events: pa.Table) -> dict[int, dict[str, Any]]:
    """Per row index of ``events``: the partial silver row its event offers (``silver_source``), any
    quality. Rows are told apart by an index standing in for the event id while ``silver_source`` runs."""
    if events.num_rows == 0:
        return {}
    standing = pa.array([str(i) for i in range(events.num_rows)], pa.string())
    tagged = events.set_column(events.schema.get_field_index("event_id"), "event_id", standing)
    partial = silver_source(tagged, accept=frozenset({"VALID", "SUSPICIOUS", "INVALID"}))
    ids = events["event_id"].to_pylist()
    out: dict[int, dict[str, Any]] = {}
    id_columns = {_id_column(g) for g in SILVER_MERGE.groups()}
    for row in partial.to_pylist():
        i = int(row["last_event_id"])
        for c in id_columns:
            if row[c] is not None:
                row[c] = ids[i]
        out[i] = row
    return out


def _describe_time(t: datetime | None) -> str:
    return "no time" if t is None else iso_utc(t)


def _judge(
    group: GuardGroup, offer: Mapping[str, Any], silver: Mapping[str, Any] | None
) -> tuple[Outcome, str]:
    """What became of ``offer`` (a partial row) for ``group`` against the silver row, by the rule."""
    if silver is None:
        return "pending", "silver has no row for the order at the version read"
    id_col = _id_column(group)
    mine, held = offer[group.time], silver.get(group.time)
    if offer[id_col] == silver.get(id_col):
        return "won", "its value is silver's"
    if not SILVER_MERGE.source_wins(group, offer, silver):
        return "older", f"event time {_describe_time(mine)} is older than {_describe_time(held)}"
    if mine == held:
        return (
            "tie",
            f"same event time as {silver.get(id_col)}; ties go to the later arrival, which that one was",
        )
    return (
        "pending",
        f"event time {_describe_time(mine)} is newer than silver's {_describe_time(held)}: not applied at "
        "the "
        "silver version read",
    )


def explain_order(
    order_id: str,
    silver: Mapping[str, Any] | None,
    events: pa.Table,
    *,
    late: pa.Table | None = None,
    rejects: Sequence[Reject] = (),
) -> OrderExplanation:
    """Explain ``silver`` (the order's row, None when it has none) from the order's bronze rows.

    ``events``: the order's bronze rows (``BRONZE_SCHEMA`` columns, optionally ``bronze_version``);
    ``late``: the order's rows of the late table (``LATE_SCHEMA``), matched by Kafka coordinates.
    """
    events = _in_delivery_order(events)
    rows = events.to_pylist()
    refs = [_ref(r) for r in rows]
    partial = _partial_rows(events.select([c for c in EVENT_COLUMNS if c in events.column_names]))
    marks: dict[tuple[str, int, int], LateMark] = {}
    if late is not None:
        for r in late.select(["topic", "partition", "offset", "watermark"]).to_pylist():
            marks[(r["topic"], int(r["partition"]), int(r["offset"]))] = LateMark(r["watermark"])

    counted = first_deliveries(events)
    # event id -> row index of its first VALID delivery, the one applied and counted
    first = {ref.event_id: i for i, ref in enumerate(refs) if counted[i]}

    groups = SILVER_MERGE.groups()
    times = {g.value: g.time for g in groups}
    per_event: dict[int, dict[str, tuple[Outcome, str]]] = {}
    for i, ref in enumerate(refs):
        if ref.quality != "VALID" or first[ref.event_id] != i or i not in partial:
            continue
        offer = partial[i]
        per_event[i] = {g.value: _judge(g, offer, silver) for g in groups if offer.get(g.value) is not None}

    timeline: list[TimelineEntry] = []
    for i, ref in enumerate(refs):
        mark = marks.get((ref.topic, ref.partition, ref.offset))
        tables = ["bronze"]
        if mark is not None:
            tables.append("late")
        outcome: Outcome
        won: tuple[str, ...] = ()
        dup_of: EventRef | None = None
        if ref.quality in _NOT_APPLIED:
            outcome = _NOT_APPLIED[ref.quality]
            tables.append("review" if outcome == "review" else "quarantine")
            detail = f"tagged {ref.quality}: {ref.quality_reason or 'no reason given'}; not applied to silver"
        elif first[ref.event_id] != i:
            outcome = "duplicate"
            dup_of = refs[first[ref.event_id]]
            detail = (
                f"a re-delivery of {ref.event_id}; its first delivery {dup_of.coordinates} is the one counted"
            )
        elif i not in per_event or not per_event[i]:
            outcome = "no_field"
            detail = f"a {ref.event_type} event offers no silver field"
        else:
            judged = per_event[i]
            won = tuple(f for f, (o, _) in judged.items() if o == "won")
            kinds = {o for o, _ in judged.values()}
            outcome = (
                "won" if won else "pending" if "pending" in kinds else "tie" if "tie" in kinds else "older"
            )
            if won:
                detail = "set " + ", ".join(won)
            elif outcome == "older" and silver is not None:
                held = ", ".join(f"{f} {_describe_time(silver.get(times[f]))}" for f in judged)
                detail = f"event time {_describe_time(ref.event_time)} is older than silver's {held}"
            else:
                detail = "; ".join(f"{f}: {d}" for f, (o, d) in judged.items() if o == outcome)
        if mark is not None:
            reached = "reached silver" if outcome == "won" else "did not set a silver value"
            detail += (
                f"; late: arrived {mark.lateness(ref.event_time):.0f} s behind its partition's watermark "
                f"{_describe_time(mark.watermark)}, {reached}"
            )
        timeline.append(TimelineEntry(ref, outcome, detail, tuple(tables), won, mark, dup_of))

    fields: list[FieldExplanation] = []
    for g in groups:
        id_col = _id_column(g)
        winner_id = None if silver is None else silver.get(id_col)
        winner = refs[first[winner_id]] if winner_id is not None and winner_id in first else None
        others: list[FieldOffer] = []
        for i, ref in enumerate(refs):
            offered = partial.get(i)
            if offered is None or offered.get(g.value) is None:
                continue
            if winner is not None and ref is winner:
                continue
            entry = timeline[i]
            if entry.outcome in ("duplicate", "review", "quarantined"):
                outcome, detail = entry.outcome, entry.detail
            else:
                outcome, detail = per_event[i][g.value]
            others.append(FieldOffer(ref, offered[g.value], outcome, detail))
        fields.append(
            FieldExplanation(
                field=g.value,
                time_column=g.time,
                id_column=id_col,
                value=None if silver is None else silver.get(g.value),
                time=None if silver is None else silver.get(g.time),
                winner_id=winner_id,
                winner=winner,
                others=tuple(others),
            )
        )
    timeline_sorted = sorted(
        timeline,
        key=lambda e: (
            e.event.event_time,
            e.event.ingest_time,
            e.event.topic,
            e.event.partition,
            e.event.offset,
        ),
    )
    explanation = OrderExplanation(order_id, silver, tuple(fields), tuple(timeline_sorted), tuple(rejects))
    problems = _check_replay(explanation, partial, first)
    return OrderExplanation(
        order_id,
        silver,
        tuple(fields),
        tuple(timeline_sorted),
        tuple(rejects),
        tuple(problems),
        _history(refs, partial, first),
    )


def _history(
    refs: Sequence[EventRef], partial: Mapping[int, Mapping[str, Any]], first: Mapping[str, int]
) -> tuple[Change, ...]:
    """Replay the applied events with ``SILVER_MERGE`` in delivery order; each that set a field."""
    fields = [g for g in SILVER_MERGE.groups() if g.value != g.time]  # not the greatest columns
    row: dict[str, Any] | None = None
    out: list[Change] = []
    for i in sorted(first.values()):
        if i not in partial:
            continue
        before = row
        row = SILVER_MERGE.merge_row(row, partial[i], SILVER_SCHEMA)
        changed = {
            g.value: row[g.value]
            for g in fields
            if row[_id_column(g)] == refs[i].event_id
            and (before is None or any(before[c] != row[c] for c in g.moved))
        }
        if changed:
            out.append(Change(refs[i], changed))
    return tuple(out)


def shows_change(history: Sequence[Change], index: int, row: Mapping[str, Any] | None) -> bool:
    """Whether silver's ``row`` shows ``history[index]`` applied: a field it set holds its event or the
    event of a later change of that field. The history replays the order's events in delivery order,
    so before the change lands its fields hold earlier changes' events."""
    if row is None:
        return False
    ids = {g.value: _id_column(g) for g in SILVER_MERGE.groups()}
    for name in history[index].values:
        holders = {c.event.event_id for c in history[index:] if name in c.values}
        if row.get(ids[name]) in holders:
            return True
    return False


def replay_winners(
    explanation: OrderExplanation, partial_rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Fold the partial rows of the winning events with ``SILVER_MERGE``: the row they give."""
    folded = SILVER_MERGE.fold_rows(partial_rows, SILVER_SCHEMA)
    return folded.get((explanation.order_id,), dict.fromkeys(SILVER_SCHEMA.names))


def _check_replay(
    explanation: OrderExplanation, partial: Mapping[int, Mapping[str, Any]], first: Mapping[str, int]
) -> list[str]:
    """Where folding the winners (in delivery order) does not give silver's row, one line per column."""
    silver = explanation.silver
    if silver is None:
        return []
    problems = [
        f"{f.field}: silver's value was set by {f.winner_id}, which the order's bronze rows do not hold"
        for f in explanation.fields
        if f.winner_id is not None and f.winner is None
    ]
    winners = sorted({first[f.winner_id] for f in explanation.fields if f.winner is not None and f.winner_id})
    row = replay_winners(explanation, [partial[i] for i in winners if i in partial])
    for g in SILVER_MERGE.groups():
        for c in g.moved:
            if row.get(c) != silver.get(c) and not any(p.startswith(f"{g.value}:") for p in problems):
                problems.append(f"{c}: silver holds {silver.get(c)!r}, the winners fold to {row.get(c)!r}")
    return problems
