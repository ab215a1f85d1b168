"""The gold metrics per tumbling event-time window: defined once, interpreted in the JVM, Arrow and Python.

``METRICS`` is the definition (which events a metric takes, how it aggregates them); the speed layer's
``GoldMetrics`` (Java, in the JVM, given ``METRICS`` by ``udfs.ingest_gold.java_metrics``),
``aggregate`` (the batch layer, pyarrow) and ``reference_aggregate`` (plain Python, for tests)
interpret it, and ``gold_inputs`` is the one rule that turns standard events
or bronze rows into the five input columns. Windows are UTC, floor semantics (also before 1970), and
times are epoch microseconds like every table's. The contract: DESIGN.md section 11.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema

from lakestream.adapters import orders_db, payments
from lakestream.config import Config, check_gold_window
from lakestream.delta_create import open_or_create
from lakestream.errors import FAILED, LakestreamError
from lakestream.standard import AMOUNT, TIMESTAMP, StandardEvent
from lakestream.time import EPOCH, iso_utc

UTC = timezone.utc
_US = timedelta(microseconds=1)

#: Kind codes of a gold input: what an event counts as.
KIND_OTHER = 0
KIND_ORDER_CREATED = 1
KIND_PAYMENT = 2

#: (kind, source, op or None for any op): the first rule an event matches gives its kind, else
#: ``KIND_OTHER``. Order-database events are the ``orders_db`` adapter's, payments the ``payments``'.
KIND_RULES: tuple[tuple[int, str, str | None], ...] = (
    (KIND_ORDER_CREATED, orders_db.SOURCE, "c"),
    (KIND_PAYMENT, payments.SOURCE, None),
)

#: Only events of this quality are inputs.
VALID = "VALID"

Aggregate = Literal["count", "count_distinct", "sum"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One gold metric: ``aggregate`` of ``column`` over the window's inputs of ``kind`` (None: all).

    ``count`` counts inputs (``column`` unused), ``count_distinct`` the distinct non-null values of
    ``column``, ``sum`` adds its non-null values (zero when there are none).
    """

    name: str
    kind: int | None
    aggregate: Aggregate
    column: str | None = None


#: The metrics, in the table's column order.
METRICS: tuple[Metric, ...] = (
    Metric("events", None, "count"),
    Metric("orders_created", KIND_ORDER_CREATED, "count_distinct", "order_id"),
    Metric("payments", KIND_PAYMENT, "count"),
    Metric("gmv", KIND_PAYMENT, "sum", "amount"),
    Metric("active_users", None, "count_distinct", "user_id"),
)
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)

#: Largest value of ``decimal(18, 2)``.
MAX_AMOUNT = Decimal("9999999999999999.99")
_WIDE_AMOUNT = pa.decimal128(38, 2)

#: The five input columns (one row per VALID event, each event id once).
GOLD_INPUT_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("event_time", TIMESTAMP, nullable=False),
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("amount", AMOUNT),
        pa.field("order_id", pa.string()),
        pa.field("user_id", pa.string()),
    ]
)


def _metric_type(metric: Metric) -> pa.DataType:
    return AMOUNT if metric.aggregate == "sum" else pa.int64()


#: The metrics per window, as ``aggregate`` returns them.
METRICS_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("window_start", TIMESTAMP, nullable=False),
        pa.field("window_end", TIMESTAMP, nullable=False),
        *(pa.field(m.name, _metric_type(m), nullable=False) for m in METRICS),
    ]
)

LAYER_REALTIME: Final = "realtime"
LAYER_BATCH: Final = "batch"
Layer = Literal["realtime", "batch"]

#: The gold table: one row per window.
GOLD_SCHEMA: pa.Schema = pa.schema(
    [
        *METRICS_SCHEMA,
        pa.field("layer", pa.string(), nullable=False),
        pa.field("data_time", TIMESTAMP, nullable=False),
        pa.field("source_version", pa.int64()),
        pa.field("updated_at", TIMESTAMP, nullable=False),
    ]
)


class GoldTableError(LakestreamError, ValueError):
    """The gold table exists with other columns; the message names them and the fix."""


class WindowAlignmentError(LakestreamError, ValueError):
    """A range bound is not on a window boundary; ``nearest`` holds the aligned times around it."""

    def __init__(self, message: str, nearest: tuple[datetime, datetime]) -> None:
        """Keep the aligned times before and after the bound for callers that offer them."""
        super().__init__(message)
        self.nearest = nearest


@dataclass(frozen=True, slots=True)
class GoldSettings:
    """The window length and the speed layer's allowed lateness (validated as ``[gold]``)."""

    window: timedelta = timedelta(minutes=5)
    allowed_lateness: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        """Same rule as the config section: whole minutes dividing a day, lateness not negative."""
        check_gold_window(self.window, self.allowed_lateness)

    @classmethod
    def from_config(cls, cfg: Config) -> GoldSettings:
        """The settings of ``cfg.gold``."""
        return cls(window=cfg.gold.window, allowed_lateness=cfg.gold.allowed_lateness)

    @property
    def window_us(self) -> int:
        """The window length in microseconds."""
        return self.window // _US


# -- window maths (epoch microseconds, UTC, floor) ---------------------------------------------------


def to_us(t: datetime) -> int:
    """Epoch microseconds of an aware datetime (exact, also before 1970)."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"time {t.isoformat()} has no offset; pass an aware (UTC) datetime")
    return (t - EPOCH) // _US


def from_us(us: int) -> datetime:
    """The UTC datetime of epoch microseconds."""
    return EPOCH + timedelta(microseconds=us)


def window_start_us(event_time_us: int, settings: GoldSettings) -> int:
    """Start of the window holding ``event_time_us`` (floor: -1 us is in the window ending at 0)."""
    return event_time_us - event_time_us % settings.window_us


def window_end_us(event_time_us: int, settings: GoldSettings) -> int:
    """End (exclusive) of the window holding ``event_time_us``."""
    return window_start_us(event_time_us, settings) + settings.window_us


def beyond_lateness(event_time_us: int, watermark_us: int, settings: GoldSettings) -> bool:
    """Whether an event the speed layer sees at ``watermark_us`` (its partition's watermark when it
    arrived) is beyond the allowed lateness: its window's end plus ``allowed_lateness`` is not after it.

    The speed layer drops such events (``GoldLatenessGate``) and leaves them to the batch layer.
    """
    return window_end_us(event_time_us, settings) + settings.allowed_lateness // _US <= watermark_us


def window_of(t: datetime, settings: GoldSettings) -> tuple[datetime, datetime]:
    """``[start, end)`` of the window holding ``t``."""
    start = window_start_us(to_us(t), settings)
    return from_us(start), from_us(start + settings.window_us)


def is_aligned(t: datetime, settings: GoldSettings) -> bool:
    """Whether ``t`` is a window boundary."""
    return to_us(t) % settings.window_us == 0


def windows_of_range(
    start: datetime, end: datetime, settings: GoldSettings, *, names: tuple[str, str] = ("start", "end")
) -> list[datetime]:
    """The window starts of ``[start, end)``; both bounds must be window boundaries and start < end.

    A misaligned bound is refused (``WindowAlignmentError`` naming it, as ``names`` calls the bounds,
    and the aligned times on either side) rather than widened: a backfill replaces exactly the range
    it is given.
    """
    for name, t in zip(names, (start, end), strict=True):
        if not is_aligned(t, settings):
            below, above = window_of(t, settings)
            raise WindowAlignmentError(
                f"{name} {iso_utc(t)} is not on a {_describe(settings.window)} window boundary; "
                f"the nearest are {iso_utc(below)} and {iso_utc(above)}",
                (below, above),
            )
    if start >= end:
        raise ValueError(f"{names[0]} {iso_utc(start)} must be before {names[1]} {iso_utc(end)}")
    first, last, step = to_us(start), to_us(end), settings.window_us
    return [from_us(us) for us in range(first, last, step)]


def _describe(window: timedelta) -> str:
    minutes = window // timedelta(minutes=1)
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


# -- the inputs: one rule for standard events and bronze rows ---------------------------------------


def kind_of(source: str, op: str | None) -> int:
    """The kind code of an event from ``source`` with ``op`` (``KIND_RULES``; plain Python)."""
    for kind, rule_source, rule_op in KIND_RULES:
        if source == rule_source and (rule_op is None or op == rule_op):
            return kind
    return KIND_OTHER


def kind_array(source: pa.Array | pa.ChunkedArray, op: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``KIND_RULES`` column-wise (int8), equal to ``kind_of`` row by row."""
    kinds = pa.array(np.full(len(source), KIND_OTHER, dtype=np.int8))
    for kind, rule_source, rule_op in reversed(KIND_RULES):  # the first matching rule wins
        match = pc.equal(source, rule_source)
        if rule_op is not None:
            match = pc.and_(match, pc.equal(op, rule_op))
        kinds = pc.if_else(pc.fill_null(match, False), pa.scalar(kind, pa.int8()), kinds)
    result: pa.Array = kinds.combine_chunks() if isinstance(kinds, pa.ChunkedArray) else kinds
    return result


#: Bronze columns that order deliveries: the first delivery of an event id is the lowest.
DELIVERY_ORDER: tuple[str, ...] = ("ingest_time", "topic", "partition", "offset")
_NEEDED = ("event_id", "event_time", "source", "op", "amount", "order_id", "user_id", "quality")


def _events_table(events: Sequence[StandardEvent]) -> pa.Table:
    columns: dict[str, Any] = {name: [getattr(e, name) for e in events] for name in _NEEDED}
    table = pa.table(
        {
            "event_id": pa.array(columns["event_id"], pa.string()),
            "event_time": pa.array(columns["event_time"], TIMESTAMP),
            "source": pa.array(columns["source"], pa.string()),
            "op": pa.array(columns["op"], pa.string()),
            "amount": pa.array(columns["amount"], AMOUNT),
            "order_id": pa.array(columns["order_id"], pa.string()),
            "user_id": pa.array(columns["user_id"], pa.string()),
            "quality": pa.array(columns["quality"], pa.string()),
        }
    )
    return table.append_column("_delivery", pa.array(np.arange(len(events), dtype=np.int64)))


def first_deliveries(data: pa.Table) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per bronze row: whether it is the first delivery of a VALID event id (the lowest ``DELIVERY_ORDER``).

    The rows gold counts; every other VALID row is a re-delivery of one of them.
    """
    n = data.num_rows
    order = np.asarray(pc.sort_indices(data, sort_keys=[(c, "ascending") for c in DELIVERY_ORDER]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    valid: np.ndarray[Any, np.dtype[np.bool_]] = np.asarray(
        pc.fill_null(pc.equal(data["quality"], VALID), False), dtype=bool
    )
    ranked = pa.table({"event_id": data["event_id"], "_rank": rank}).filter(pa.array(valid))
    lowest = ranked.group_by("event_id", use_threads=False).aggregate([("_rank", "min")])["_rank_min"]
    counted: np.ndarray[Any, np.dtype[np.bool_]] = np.asarray(
        pc.is_in(pa.array(rank), value_set=lowest), dtype=bool
    )
    return counted & valid


def gold_inputs(data: pa.Table | pa.RecordBatch | Sequence[StandardEvent]) -> pa.Table:
    """The gold inputs (``GOLD_INPUT_SCHEMA``) of standard events (in delivery order) or bronze rows.

    Only VALID events; each event id once, its first delivery winning: for a sequence of events the
    earliest in it, for bronze rows the lowest ``DELIVERY_ORDER`` (``first_deliveries``: ingest time,
    then Kafka coordinates). Rows come out in delivery order of their first delivery.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        missing = [c for c in (*_NEEDED, *DELIVERY_ORDER) if c not in data.column_names]
        if missing:
            raise ValueError(
                f"gold_inputs: the bronze rows lack column(s) {missing}; pass BRONZE_SCHEMA rows"
            )
        keep = first_deliveries(data)
        order = np.asarray(pc.sort_indices(data, sort_keys=[(c, "ascending") for c in DELIVERY_ORDER]))
        table = data.select(list(_NEEDED)).take(pa.array(order[keep[order]]))
    else:
        table = _events_table(data)
        table = table.filter(pc.equal(table["quality"], VALID))
        first = table.group_by("event_id", use_threads=False).aggregate([("_delivery", "min")])
        keep_sorted = pc.sort_indices(first["_delivery_min"])
        positions = pc.index_in(table["_delivery"], value_set=pc.take(first["_delivery_min"], keep_sorted))
        table = table.filter(pc.is_valid(positions))
    return pa.table(
        [
            table["event_time"],
            kind_array(table["source"], table["op"]),
            table["amount"],
            table["order_id"],
            table["user_id"],
        ],
        schema=GOLD_INPUT_SCHEMA,
    )


# -- interpretation (a): Arrow -----------------------------------------------------------------------


class GmvOverflowError(LakestreamError, ValueError):
    """A window's gmv does not fit ``decimal(18, 2)``."""

    exit_code = FAILED


def _overflow(value: object) -> GmvOverflowError:
    return GmvOverflowError(f"gmv: a window's sum {value} exceeds decimal(18, 2) (at most {MAX_AMOUNT})")


def aggregate(
    inputs: pa.Table, settings: GoldSettings, *, over: tuple[datetime, datetime] | None = None
) -> pa.Table:
    """The metrics per window (``METRICS_SCHEMA``, sorted by window start) of gold inputs.

    Without ``over``: the windows that have inputs. With ``over=(start, end)`` (window-aligned): every
    window of ``[start, end)``, empty ones with zeros, inputs outside it left out.
    """
    w = settings.window_us
    times = pc.cast(inputs["event_time"], pa.int64()).to_numpy(zero_copy_only=False)
    starts = times - np.mod(times, w)  # numpy's mod floors: also before 1970
    table = pa.table(
        {
            "ws": pa.array(starts, pa.int64()),
            "kind": inputs["kind"],
            "amount": pc.cast(inputs["amount"], _WIDE_AMOUNT),
            "order_id": inputs["order_id"],
            "user_id": inputs["user_id"],
        }
    )
    if over is not None:
        first, last = (to_us(t) for t in over)
        windows = np.arange(to_us(windows_of_range(*over, settings)[0]), last, w, dtype=np.int64)
        table = table.filter(pc.and_(pc.greater_equal(table["ws"], first), pc.less(table["ws"], last)))
    else:
        windows = np.unique(starts).astype(np.int64)
    keys = pa.array(windows, pa.int64())
    columns: dict[str, pa.Array] = {}
    for metric in METRICS:
        part = table if metric.kind is None else table.filter(pc.equal(table["kind"], metric.kind))
        column, function = {
            "count": ("kind", "count"),
            "count_distinct": (metric.column, "count_distinct"),
            "sum": (metric.column, "sum"),
        }[metric.aggregate]
        assert column is not None
        grouped = part.group_by("ws", use_threads=False).aggregate([(column, function)])
        values = grouped[f"{column}_{function}"]
        at = pc.index_in(keys, value_set=grouped["ws"])
        placed = pc.take(values, at)
        if metric.aggregate == "sum":
            zero = pa.scalar(Decimal(0), _WIDE_AMOUNT)
            wide = pc.fill_null(placed, zero)
            try:
                columns[metric.name] = pc.cast(wide, AMOUNT)
            except pa.ArrowInvalid:
                raise _overflow(pc.max(wide).as_py()) from None
        else:
            columns[metric.name] = pc.cast(pc.fill_null(placed, 0), pa.int64())
    ends = pa.array(windows + w, pa.int64())
    return pa.table(
        [pc.cast(keys, TIMESTAMP), pc.cast(ends, TIMESTAMP), *(columns[m.name] for m in METRICS)],
        schema=METRICS_SCHEMA,
    )


# -- interpretation (b): plain Python, the reference ------------------------------------------------


def reference_aggregate(
    rows: Iterable[Mapping[str, Any]],
    settings: GoldSettings,
    *,
    over: tuple[datetime, datetime] | None = None,
) -> list[dict[str, Any]]:
    """``aggregate`` row by row in plain Python: rows with the input columns in, metric rows out."""
    w = settings.window_us
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(window_start_us(to_us(row["event_time"]), settings), []).append(row)
    if over is not None:
        starts = [to_us(t) for t in windows_of_range(*over, settings)]
    else:
        starts = sorted(groups)
    out: list[dict[str, Any]] = []
    for start in starts:
        members = groups.get(start, [])
        row_out: dict[str, Any] = {"window_start": from_us(start), "window_end": from_us(start + w)}
        for metric in METRICS:
            taken = [r for r in members if metric.kind is None or r["kind"] == metric.kind]
            column = metric.column or ""
            if metric.aggregate == "count":
                row_out[metric.name] = len(taken)
            elif metric.aggregate == "count_distinct":
                row_out[metric.name] = len({r[column] for r in taken if r[column] is not None})
            else:
                total = sum((r[column] for r in taken if r[column] is not None), Decimal(0))
                if abs(total) > MAX_AMOUNT:
                    raise _overflow(total)
                row_out[metric.name] = total.quantize(Decimal("0.01"))
        out.append(row_out)
    return out


# -- the table --------------------------------------------------------------------------------------


def gold_rows(
    metrics: pa.Table,
    *,
    layer: Layer,
    data_time: datetime,
    source_version: int | None,
    updated_at: datetime,
) -> pa.Table:
    """Rows of the gold table (``GOLD_SCHEMA``): ``aggregate``'s metrics with where they come from."""
    n = metrics.num_rows
    return pa.table(
        [
            *(metrics[f.name] for f in METRICS_SCHEMA),
            pa.array([layer] * n, pa.string()),
            pa.array([data_time] * n, TIMESTAMP),
            pa.array([source_version] * n, pa.int64()),
            pa.array([updated_at] * n, TIMESTAMP),
        ],
        schema=GOLD_SCHEMA,
    )


def _field_types(schema: DeltaSchema) -> dict[str, str]:
    return {f.name: str(f.type) for f in schema.fields}


def ensure_gold_table(uri: str, *, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    """The gold table at ``uri``, created (unpartitioned, ``GOLD_SCHEMA``) if missing; refused if it differs.

    Creation races between layers are harmless: one creation lands, the loser opens it.
    """
    dt = open_or_create(uri, GOLD_SCHEMA, storage_options=storage_options, log_name="gold")
    want = _field_types(DeltaSchema.from_arrow(GOLD_SCHEMA))
    have = _field_types(dt.schema())
    if want != have:
        raise GoldTableError(
            f"gold table {uri} has columns {have}, expected {want}; move it aside (or migrate it) and "
            "run again"
        )
    return dt
