"""Read what ``explain`` needs from the tables, at one point in time, and explain it.

``explain order``: the order's silver row (either layout) at ``--as-of``, its bronze and late rows as of
the same moment (through DataFusion, which skips row groups by bloom filters; each row with the bronze
version that committed it) and the quarantine rows that could not be adapted but name it; the silver
version that applied each change of the order; ``explain window``: the
gold row, bronze's and the late table's rows of the window, the realtime figures a backfill replaced
(the last gold version where the row was realtime), the reconcile runs that compared it and the
backfills that wrote it. The explaining itself is ``lakestream.explain_order`` / ``explain_window``.

``--as-of VERSION`` is a version of the table the answer starts from (silver: ``silver/orders``, or
``silver/orders_changes`` in the merge-on-read layout; a window: the gold table); the other tables
are read as of that version's commit time. ``--as-of TIME`` reads every table as of that time.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from lakestream.config import Config
from lakestream.errors import LakestreamError
from lakestream.explain_order import BRONZE_VERSION, OrderExplanation, Reject, explain_order, shows_change
from lakestream.explain_window import WindowExplanation, explain_window
from lakestream.gold import GoldSettings, window_of
from lakestream.merge_on_read_rule import current_rows
from lakestream.progress import PROGRESS_SEGMENT, kafka_key
from lakestream.silver import SILVER_SCHEMA
from lakestream.standard import BRONZE_SCHEMA, LATE_SCHEMA
from lakestream.table_names import (
    BRONZE_TABLE,
    LATE_TABLE,
    QUARANTINE_TABLE,
    SILVER_CHANGES_TABLE,
    SILVER_TABLE,
)
from lakestream.time import iso_utc, utc_from_ms
from merge_on_read.table import folded_through, scan, silver_mor_table
from serving.gold_read import open_gold, read_rows
from serving.metrics_view import GoldRow
from storage.delta_log import DeltaLog, DeltaLogError, normalize_schema, open_filesystem
from storage.object_store import options_for
from storage.parquet_read import read_parquet
from storage.sql_query import literal, query
from storage.time_travel import OutOfReachError, open_table_at

#: The times an explained window may hold: the readers compare nanosecond timestamps (1677-09-21 to
#: 2262-04-11) and look for the nearest windows a day around it; outside, refused, not a failed read.
EXPLAIN_TIMES = (datetime(1678, 1, 1, tzinfo=timezone.utc), datetime(2262, 1, 1, tzinfo=timezone.utc))
#: How far commit times and the ``ingest_time`` a TaskManager stamped may disagree (their clocks).
CLOCK_SLACK_MS = 60_000
#: How many existing ids an unknown order's error names.
NEARBY = 5


class ExplainError(LakestreamError):
    """Nothing to explain there (an unknown order, a window gold does not have): exit 2, naming what
    exists nearby."""


@dataclass(frozen=True)
class ReadPoint:
    """Where an explanation was read: the starting table's version and the moment the others follow."""

    table: str
    version: int
    #: The time asked for, or the commit time of the version read.
    at: datetime
    #: No ``--as-of``: every table is read at its latest version.
    latest: bool = False

    @property
    def moment(self) -> datetime | None:
        """The time the other tables are read as of (None: their latest versions)."""
        return None if self.latest else self.at


@dataclass(frozen=True)
class TableVersions:
    """The version of each table read (None: the table did not exist then)."""

    point: ReadPoint
    versions: dict[str, int | None]


def _storage(cfg: Config) -> dict[str, str] | None:
    """The object store's options of the lakehouse (from the environment ``load`` exported), if any."""
    return options_for(cfg.lakehouse.root, None)


def _commit_time(uri: str, version: int, cfg: Config) -> datetime:
    commit = DeltaLog(uri, storage_options=_storage(cfg), cache_size=0).read_commit(version)
    if commit is None:
        raise OutOfReachError(f"{uri} version {version}: its commit is no longer in the log")
    return utc_from_ms(commit.timestamp_ms)


def _open_as_of(cfg: Config, name: str, at: datetime | None) -> DeltaTable | None:
    """Table ``name`` as of ``at`` (None: latest); None when it did not exist then (or does not)."""
    uri = cfg.lakehouse.table_uri(name)
    try:
        return open_table_at(uri, at, name="--as-of", storage_options=_storage(cfg))
    except TableNotFoundError:
        return None
    except OutOfReachError:
        first = DeltaLog(uri, storage_options=_storage(cfg), cache_size=0).read_commit(0)
        if at is not None and first is not None and utc_from_ms(first.timestamp_ms) > at:
            return None  # created after that moment
        raise


def _start(cfg: Config, name: str, at: int | datetime | None, missing: str) -> tuple[DeltaTable, ReadPoint]:
    """The starting table at ``at`` and the moment the other tables are read as of."""
    uri = cfg.lakehouse.table_uri(name)
    try:
        dt = open_table_at(uri, at, name="--as-of", storage_options=_storage(cfg))
    except TableNotFoundError:
        raise ExplainError(f"no table {name} under {cfg.lakehouse.root}", fix=missing) from None
    version = dt.version()
    moment = at if isinstance(at, datetime) else _commit_time(uri, version, cfg)
    return dt, ReadPoint(name, version, moment, latest=at is None)


# -- explain order ------------------------------------------------------------------------------------


def _silver_row(
    cfg: Config, order_id: str, at: int | datetime | None
) -> tuple[dict[str, Any] | None, TableVersions]:
    """Silver's row of ``order_id`` as of ``at`` and where it was read. Merge-on-read reads from the
    changes table (``at`` a version of it); before its first commit (a lakehouse copy-on-write wrote)
    ``silver/orders`` alone, as in copy-on-write."""
    missing = "run `lakestream ingest` first"
    changes: DeltaTable | None = None
    if cfg.tables.silver_layout == "merge_on_read":
        try:
            changes, point = _start(cfg, SILVER_CHANGES_TABLE, at, missing)
        except ExplainError:
            changes = None
    if changes is not None:
        table = silver_mor_table(cfg)
        snapshot = _open_as_of(cfg, SILVER_TABLE, point.moment)
        through = None if snapshot is None else folded_through(snapshot)
        pending = scan(
            changes,
            table.schema,
            storage_options=table.storage_options,
            min_seq=None if through is None else (table.seq, through),
            keys=("order_id", [order_id]),
        )
        base = _order_rows(snapshot, table.schema, order_id)
        rows = current_rows(base, pending, table.spec, table.seq).to_pylist()
        versions = {
            SILVER_CHANGES_TABLE: point.version,
            SILVER_TABLE: None if snapshot is None else snapshot.version(),
        }
    else:
        dt, point = _start(cfg, SILVER_TABLE, at, missing)
        rows = _order_rows(dt, SILVER_SCHEMA, order_id).to_pylist()
        versions = {SILVER_TABLE: point.version}
    return (rows[0] if rows else None), TableVersions(point, versions)


def _order_rows(dt: DeltaTable | None, schema: pa.Schema, order_id: str) -> pa.Table:
    """The rows of ``order_id`` in ``schema`` (a column the table lacks is null): DataFusion skips files
    by their ``order_id`` statistics and row groups by theirs and by bloom filters
    (``tables.bloom_filter_columns``, DESIGN.md section 12.1)."""
    if dt is None:
        return schema.empty_table()
    rows = query(f"SELECT * FROM t WHERE order_id = {literal(order_id)}", t=dt)
    columns = [
        rows[f.name] if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema
    ]
    return pa.table(columns, names=schema.names).cast(schema)


def _with_bronze_versions(rows: pa.Table, dt: DeltaTable, cfg: Config) -> pa.Table:
    """Each row with the bronze version that committed it: the first commit whose progress for the
    row's Kafka partition passed its offset (the job records the next offset in every commit), so the
    answer holds after compaction or clustering rewrote the file."""
    log = DeltaLog(dt.table_uri, storage_options=_storage(cfg))
    found: list[int | None] = []
    coords = rows.select(["topic", "partition", "offset", "ingest_time"]).to_pylist()
    for r in coords:
        suffix = f":{PROGRESS_SEGMENT}:{kafka_key(r['topic'], int(r['partition']))}"
        offset = int(r["offset"])

        def passed(txn: Mapping[str, int], suffix: str = suffix, offset: int = offset) -> bool:
            return any(app.endswith(suffix) and v > offset for app, v in txn.items())

        after = int(r["ingest_time"].timestamp() * 1000) - CLOCK_SLACK_MS
        found.append(log.first_txn_commit(passed, after_ms=after, at_most=dt.version()))
    return rows.append_column(BRONZE_VERSION, pa.array(found, pa.int64()))


def _rejects_naming(dt: DeltaTable | None, order_id: str) -> list[Reject]:
    """Quarantine rows the adapters could not read whose bytes name ``order_id`` as a whole token."""
    if dt is None:
        return []
    rows = query("SELECT * FROM t WHERE stage = 'adapter'", t=dt)
    if rows.num_rows == 0:
        return []
    token = r"(^|[^0-9A-Za-z_-])" + re.escape(order_id) + r"([^0-9A-Za-z_-]|$)"
    named = rows.filter(pc.match_substring_regex(rows["raw"], token))
    return [
        Reject(r["source"], r["reason"], r["topic"], int(r["partition"]), int(r["offset"]), r["ingest_time"])
        for r in named.select(["source", "reason", "topic", "partition", "offset", "ingest_time"]).to_pylist()
    ]


def nearby_orders(dt: DeltaTable | None, order_id: str, cfg: Config) -> list[str]:
    """Up to ``NEARBY`` existing order ids around ``order_id``, from one data file of the table (reading
    every id of a table of tens of millions of events would take seconds to say "not there")."""
    if dt is None:
        return []
    actions = pa.table(dt.get_add_actions(flatten=True))
    fs = open_filesystem(dt.table_uri, _storage(cfg))
    values: list[str] = []
    for i in pc.array_sort_indices(actions["size_bytes"], order="descending").to_pylist():
        with fs.open_input_file(unquote(str(actions["path"][i]))) as fh:  # the largest file holding ids
            ids = read_parquet(fh, columns=["order_id"])["order_id"]
        values = sorted({v for v in ids.to_pylist() if v is not None})
        if values:
            break
    at = next((i for i, v in enumerate(values) if v >= order_id), len(values))
    lo = max(0, at - NEARBY // 2)
    return values[lo : lo + NEARBY]


def read_order(
    cfg: Config, order_id: str, at: int | datetime | None = None
) -> tuple[OrderExplanation, TableVersions]:
    """The explanation of ``order_id`` as of ``at`` and the table versions it was read from."""
    silver, versions = _silver_row(cfg, order_id, at)
    bronze_dt = _open_as_of(cfg, BRONZE_TABLE, versions.point.moment)
    bronze = _order_rows(bronze_dt, BRONZE_SCHEMA, order_id)
    if bronze_dt is not None:
        bronze = _with_bronze_versions(bronze, bronze_dt, cfg)
    late_dt = _open_as_of(cfg, LATE_TABLE, versions.point.moment)
    late = _order_rows(late_dt, LATE_SCHEMA, order_id)
    quarantine_dt = _open_as_of(cfg, QUARANTINE_TABLE, versions.point.moment)
    rejects = _rejects_naming(quarantine_dt, order_id)
    versions.versions.update(
        {
            BRONZE_TABLE: None if bronze_dt is None else bronze_dt.version(),
            LATE_TABLE: None if late_dt is None else late_dt.version(),
            QUARANTINE_TABLE: None if quarantine_dt is None else quarantine_dt.version(),
        }
    )
    if silver is None and bronze.num_rows == 0 and not rejects:
        near = nearby_orders(bronze_dt, order_id, cfg)
        where = f"{versions.point.table} version {versions.point.version}"
        raise ExplainError(
            f"order {order_id!r}: no row in {where} and no event in {BRONZE_TABLE}"
            + (f"; existing order ids nearby: {', '.join(near)}" if near else "; bronze holds no order yet"),
            fix="check the id (ids are compared as text, exactly)",
        )
    explanation = explain_order(order_id, silver, bronze, late=late, rejects=rejects)
    return _with_silver_versions(cfg, explanation, bronze_dt, versions), versions


def _with_silver_versions(
    cfg: Config, explanation: OrderExplanation, bronze: DeltaTable | None, read: TableVersions
) -> OrderExplanation:
    """The history with the silver table and version that applied each change.

    The bronze commit of an event names its run and, per writer subtask, the last checkpoint it landed
    (its ``txn``); one commit can land several checkpoints (skipped COMMITs, the end of a bounded
    input), so the event's checkpoint lies after what the previous commit recorded and at most what
    this one records. The silver commits of that run covering that range are the candidates; the
    first whose row shows the change applied is the one (``shows_change``; the last candidate when
    none does). In merge-on-read they are commits of the changes table, or, for a change a
    copy-on-write run applied before the switch, of ``silver/orders`` (folds commit there under their
    own txn id, never the job's).
    """
    if bronze is None or not explanation.history:
        return explanation
    point = read.point
    # (table, newest version read), in the order they are searched.
    tables = [(point.table, point.version)]
    if point.table == SILVER_CHANGES_TABLE and (snapshot := read.versions.get(SILVER_TABLE)) is not None:
        tables.append((SILVER_TABLE, snapshot))
    bronze_log = DeltaLog(bronze.table_uri, storage_options=_storage(cfg))
    logs = {t: DeltaLog(cfg.lakehouse.table_uri(t), storage_options=_storage(cfg)) for t, _ in tables}
    candidates: dict[int, tuple[str, list[int]]] = {}
    rows: dict[tuple[str, int], dict[str, Any] | None] = {}
    history = explanation.history
    changes = []
    for i, change in enumerate(history):
        version = change.event.bronze_version
        if version is not None and version not in candidates:
            after = int(change.event.ingest_time.timestamp() * 1000) - CLOCK_SLACK_MS
            candidates[version] = next(
                (
                    (table, found)
                    for table, at_most in tables
                    if (found := _silver_candidates(bronze_log, version, logs[table], table, after, at_most))
                ),
                ("", []),
            )
        table, found = ("", []) if version is None else candidates[version]
        chosen = found[-1] if found else None
        for v in found[:-1]:
            if (table, v) not in rows:
                rows[(table, v)] = _silver_row_at(cfg, table, v, explanation.order_id)
            if shows_change(history, i, rows[(table, v)]):
                chosen = v
                break
        changes.append(
            dataclasses.replace(change, silver_version=chosen, silver_table=table if found else None)
        )
    return dataclasses.replace(explanation, history=tuple(changes))


def _silver_row_at(cfg: Config, table: str, version: int, order_id: str) -> dict[str, Any] | None:
    """Silver's row of ``order_id`` after commit ``version`` of ``table`` (one of silver's tables)."""
    if table == SILVER_CHANGES_TABLE:
        return _silver_row(cfg, order_id, version)[0]
    dt = open_table_at(cfg.lakehouse.table_uri(table), version, name="--as-of", storage_options=_storage(cfg))
    rows = _order_rows(dt, SILVER_SCHEMA, order_id).to_pylist()
    return rows[0] if rows else None


def _silver_candidates(
    bronze_log: DeltaLog,
    bronze_version: int,
    silver_log: DeltaLog,
    silver_table: str,
    after_ms: int,
    at_most: int,
) -> list[int]:
    """The silver versions that may have applied an event of ``bronze_version``, ascending (see
    ``_with_silver_versions``); empty when that commit is not the ingest job's or its silver commits
    are not in the log."""
    commit = bronze_log.read_commit(bronze_version)
    if commit is None:
        return []
    suffix = f"/{BRONZE_TABLE}"
    landed: dict[str, int] = {}
    owner = ""
    for app, checkpoint in commit.txn.items():
        prefix, _, rest = app.partition(":")
        run_id = rest.partition(":")[0]
        if prefix.endswith(suffix) and run_id and run_id != PROGRESS_SEGMENT:
            landed[app] = checkpoint
            owner = f"{prefix[: -len(suffix)]}/{silver_table}:{run_id}:"
    if not landed:
        return []  # not a commit of the ingest job
    try:
        before = bronze_log.txn_before(bronze_version, landed)
    except DeltaLogError:
        before = {}  # the log is incomplete there: any earlier checkpoint of the run
    low = min(before.get(app, 0) for app in landed) + 1
    high = max(landed.values())

    def reaching(checkpoint: int) -> Callable[[Mapping[str, int]], bool]:
        return lambda txn: any(app.startswith(owner) and v >= checkpoint for app, v in txn.items())

    first = silver_log.first_txn_commit(reaching(low), after_ms=after_ms, at_most=at_most)
    last = silver_log.first_txn_commit(reaching(high), after_ms=after_ms, at_most=at_most)
    if first is None or last is None:
        return [] if last is None else [last]
    out = []
    for v in range(first, last + 1):
        silver_commit = silver_log.read_commit(v)
        if silver_commit is not None and any(app.startswith(owner) for app in silver_commit.txn):
            out.append(v)
    return out


# -- explain window -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowFacts:
    """What the tables say about a window beyond bronze's events."""

    row: GoldRow
    #: The realtime row a backfill replaced: the last gold version where the window was realtime.
    realtime: GoldRow | None
    realtime_version: int | None
    #: (gold version, run id) of the backfills that wrote the batch rows found: the first and the
    #: one that wrote the current row.
    backfills: tuple[tuple[int, str | None], ...]
    reconcile: tuple[dict[str, Any], ...]


def _row_at(cfg: Config, uri: str, version: int, start: datetime) -> GoldRow | None:
    dt = open_gold(uri, version)
    rows = read_rows(dt, uri, start, start + timedelta(microseconds=1))
    return rows[0] if rows else None


def _first_version(lo: int, hi: int, test: Any) -> int:
    """The least version in ``[lo, hi]`` for which ``test`` holds (it holds at ``hi`` and is monotone)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _backfill_run(uri: str, version: int, cfg: Config) -> str | None:
    commit = DeltaLog(uri, storage_options=_storage(cfg), cache_size=0, details=True).read_commit(version)
    if commit is None:
        return None
    value = commit.info.get("lakestream.backfill")
    return None if value is None else str(value)


def _window_history(
    cfg: Config, uri: str, version: int, row: GoldRow
) -> tuple[GoldRow | None, int | None, tuple[tuple[int, str | None], ...]]:
    """The realtime row before a batch one, and the backfills found (binary searches on versions)."""
    if row.layer != "batch":
        return None, None, ()
    oldest = min(DeltaLog(uri, storage_options=_storage(cfg), cache_size=0).commit_versions() or [version])

    def batch_at(v: int) -> bool:
        r = _row_at(cfg, uri, v, row.window_start)
        return r is not None and r.layer == "batch"

    def current_at(v: int) -> bool:
        r = _row_at(cfg, uri, v, row.window_start)
        return r is not None and r.layer == "batch" and r.updated_at == row.updated_at

    try:
        first_batch = _first_version(oldest, version, batch_at)
        current = _first_version(first_batch, version, current_at)
    except LakestreamError:  # an old version out of reach (log cleanup, vacuum): report what is known
        return None, None, ()
    realtime = _row_at(cfg, uri, first_batch - 1, row.window_start) if first_batch > oldest else None
    found = [(first_batch, _backfill_run(uri, first_batch, cfg))]
    if current != first_batch:
        found.append((current, _backfill_run(uri, current, cfg)))
    kept = realtime if realtime is not None and realtime.layer == "realtime" else None
    return kept, (first_batch - 1 if kept is not None else None), tuple(found)


def _reconcile_rows(cfg: Config, start: datetime, at: datetime | None) -> tuple[dict[str, Any], ...]:
    dt = _open_as_of(cfg, cfg.reconcile.table, at)
    if dt is None:
        return ()
    rows = scan(dt, normalize_schema(pa.schema(dt.schema().to_arrow())), storage_options=_storage(cfg))
    rows = rows.filter(
        pc.equal(rows["window_start"], pa.scalar(start, rows.schema.field("window_start").type))
    )
    return tuple(sorted(rows.to_pylist(), key=lambda r: (r["run_time"], r["metric"])))


def read_window(
    cfg: Config, when: datetime, at: int | datetime | None = None
) -> tuple[WindowExplanation, WindowFacts, TableVersions]:
    """The explanation of the gold window holding ``when`` as of ``at``."""
    low, high = EXPLAIN_TIMES
    if not low <= when < high:
        raise ExplainError(
            f"window {iso_utc(when)}: outside the times gold can hold",
            fix=f"give a time from {iso_utc(low)} to before {iso_utc(high)}",
        )
    settings = GoldSettings.from_config(cfg)
    start, end = window_of(when, settings)
    uri = cfg.lakehouse.table_uri(cfg.gold.table)
    gold, point = _start(
        cfg, cfg.gold.table, at, "run `lakestream ingest` (gold.enabled) or `lakestream backfill`"
    )
    rows = read_rows(gold, uri, start, end)
    if not rows:
        near = read_rows(gold, uri, start - timedelta(days=1), end + timedelta(days=1))
        before = [r.window_start for r in near if r.window_start < start]
        after = [r.window_start for r in near if r.window_start > start]
        around = ", ".join(
            iso_utc(t) for t in ([max(before)] if before else []) + ([min(after)] if after else [])
        )
        raise ExplainError(
            f"window {iso_utc(start)}: {cfg.gold.table} version {point.version} has no row for it"
            + (f"; the nearest windows it has start at {around}" if around else "; it has none within a day"),
            fix="pick a window gold has (lakestream query metrics), or backfill this one",
        )
    row = rows[0]
    bronze_dt = _open_as_of(cfg, BRONZE_TABLE, point.moment)
    late_dt = _open_as_of(cfg, LATE_TABLE, point.moment)
    bronze = _window_rows(bronze_dt, BRONZE_SCHEMA, start, end)
    late = _window_rows(late_dt, LATE_SCHEMA, start, end)
    explanation = explain_window(start, end, bronze, late, settings)
    realtime, realtime_version, backfills = _window_history(cfg, uri, point.version, row)
    facts = WindowFacts(row, realtime, realtime_version, backfills, _reconcile_rows(cfg, start, point.moment))
    versions = TableVersions(
        point,
        {
            cfg.gold.table: point.version,
            BRONZE_TABLE: None if bronze_dt is None else bronze_dt.version(),
            LATE_TABLE: None if late_dt is None else late_dt.version(),
        },
    )
    return explanation, facts, versions


def _window_rows(dt: DeltaTable | None, schema: pa.Schema, start: datetime, end: datetime) -> pa.Table:
    """Rows with event time in ``[start, end)``: files skipped by their event-time statistics."""
    if dt is None:
        return schema.empty_table()
    where = f"event_time >= {literal(iso_utc(start))} AND event_time < {literal(iso_utc(end))}"
    return query(f"SELECT * FROM t WHERE {where}", t=dt).select(schema.names).cast(schema)
