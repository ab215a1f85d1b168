"""Silver at production size: copy-on-write MERGE vs merge-on-read changes + fold, per table size.

A sink-level benchmark: no Flink, no Kafka. It drives ``sinks.writer.TwoPhaseDeltaWriter`` directly with
the partial silver rows the job would hand it, on the job's wall-clock checkpoint schedule, so what it
measures is the silver commit path alone (the job's other operators and tables are not running).

Workload: ``--rate`` events/s (default 10,000), a share ``--update-share`` (0.5) of them updates of
existing orders chosen uniformly over the whole table, the rest new orders; order ids are random-looking
32-hex-char strings (a hash of the order's index), so every checkpoint's keys spread over every file.
For each ``--orders`` size N an initial table of N orders is written with pyarrow + ``write_deltalake``
into tables created with 16 MB files, then per layout:

  mor  ``mode="changes"``: each checkpoint appends one file of folded rows to the changes table; a
       background thread runs ``fold_once`` every ``--fold-every`` s (or once ``--fold-rows`` are
       pending); at the end one more fold, then a sample of keys is checked against what was written.
  cow  ``mode="merge"`` on the silver table: one MERGE per checkpoint, capped at ``--cow-checkpoints``
       (at large N one MERGE takes longer than the interval, so the full duration would only grow the
       backlog).

Checkpoint n's barrier is at ``t0 + n * interval``; at the barrier (or when the previous commit ends, if
later: the backlog) ``prepare(n)`` and ``commit(n)`` run. Visibility is commit end - barrier (a row is
readable once its commit lands); an event arriving just after the previous barrier waits one interval
more, so the worst-case event-to-visible is visibility + interval.

Run: ``python -m benchmarks.silver_scale --orders 1000000,4000000 --minutes 3`` (``make bench-silver``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from numpy.typing import NDArray

from lakestream.silver import (
    CHANGE_SEQ,
    FIELD_TYPES,
    SILVER_MERGE,
    SILVER_MOR_MERGE,
    SILVER_MOR_SCHEMA,
    SILVER_SCHEMA,
)

#: A numpy array (ids, indexes, codes, microseconds).
Arr = NDArray[Any]
FILE_SIZE = 16 * 1024 * 1024
STATUSES = ("created", "pending", "shipped", "delivered", "completed")
ADDRESSES = ("Chaoyang", "Haidian", "Xicheng", "Dongcheng", "Fengtai", "Tongzhou", "Shunyi")
#: Event time of the initial table's orders; checkpoint events come after it.
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------- ids and rows (pure)


def _splitmix64(x: Arr) -> Arr:
    """The splitmix64 finaliser, vectorised (uint64 wrap-around is the point)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def hex_ids(index: Arr, *, salt: int = 0) -> pa.Array:
    """Index i -> a random-looking 32-hex-char id (two splitmix64 words), the same for the same (i, salt).

    Built as one Arrow string buffer: formatting millions of ids in Python would dominate the build.
    """
    i = index.astype(np.uint64)
    with np.errstate(over="ignore"):
        base = i * np.uint64(2) + np.uint64(salt) * np.uint64(0x1000000000000)
    words = np.stack([_splitmix64(base), _splitmix64(base + np.uint64(1))], axis=1)
    raw = words.astype(">u8").view(np.uint8).reshape(len(i), 16)
    chars = np.empty((len(i), 32), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 0x0F]
    offsets = np.arange(0, 32 * (len(i) + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(i), [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def order_ids(index: Arr) -> pa.Array:
    """The order id of each order index."""
    return hex_ids(index, salt=0)


def _decimal_cents(cents: Arr) -> pa.Array:
    """Non-negative int64 cents -> decimal128(18, 2), built from the 16-byte little-endian words."""
    words = np.zeros((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    typ = FIELD_TYPES["amount"]
    return pa.Array.from_buffers(typ, len(cents), [None, pa.py_buffer(words)])


def _timestamps(micros: Arr) -> pa.Array:
    return pa.array(micros.astype(np.int64), pa.timestamp("us", tz="UTC"))


def _pick(pool: Sequence[str], codes: Arr) -> pa.Array:
    return pa.array(list(pool), pa.string()).take(pa.array(codes))


def partial_rows(
    order_index: Arr,
    is_update: Arr,
    event_micros: Arr,
    event_ids: pa.Array,
    rng: np.random.Generator,
    *,
    status_codes: Arr | None = None,
) -> pa.Table:
    """Partial silver rows (``silver_source`` shape), one per event, in ``SILVER_SCHEMA``.

    A create sets user_id/status/amount/address/created_time; an update sets status and address. A set
    field F has F__ts = the event time and F__eid = the event id; last_event_time/id are always set.
    """
    n = len(order_index)
    create = ~is_update
    null_ts = pa.nulls(n, pa.timestamp("us", tz="UTC"))
    null_s = pa.nulls(n, pa.string())
    ts = _timestamps(event_micros)
    if status_codes is None:
        status_codes = rng.integers(1, len(STATUSES), n)
    status_codes = np.where(create, 0, status_codes)
    mask_c = pa.array(create)
    set_all = pa.array(np.ones(n, dtype=bool))

    def only(mask: pa.Array, value: pa.Array, typ: pa.DataType) -> pa.Array:
        return pc.if_else(mask, value, pa.scalar(None, typ))

    users = pa.array(np.char.add("U", rng.integers(1, 1_000_000, n).astype(str)).tolist(), pa.string())
    cols: dict[str, pa.Array] = {"order_id": order_ids(order_index)}
    values: dict[str, tuple[pa.Array, pa.Array]] = {
        "user_id": (mask_c, users),
        "status": (set_all, _pick(STATUSES, status_codes)),
        "amount": (mask_c, _decimal_cents(rng.integers(100, 9_999_900, n))),
        "address": (set_all, _pick(ADDRESSES, rng.integers(0, len(ADDRESSES), n))),
        "created_time": (mask_c, ts),
    }
    for f, typ in FIELD_TYPES.items():
        if f in values:
            mask, value = values[f]
            cols[f] = only(mask, value, typ)
            cols[f"{f}__ts"] = only(mask, ts, ts.type)
            cols[f"{f}__eid"] = only(mask, event_ids, pa.string())
        else:
            cols[f] = pa.nulls(n, typ)
            cols[f"{f}__ts"] = null_ts
            cols[f"{f}__eid"] = null_s
    cols["last_event_time"] = ts
    cols["last_event_id"] = event_ids
    return pa.table([cols[c] for c in SILVER_SCHEMA.names], schema=SILVER_SCHEMA)


def initial_rows(start: int, stop: int, rng: np.random.Generator) -> pa.Table:
    """Orders ``start .. stop-1`` of the initial table, as created before ``EPOCH`` (one row each)."""
    idx = np.arange(start, stop, dtype=np.int64)
    epoch_us = int(EPOCH.timestamp() * 1_000_000)
    micros = epoch_us - 20_000_000_000 + idx * 1000  # older orders first, all before EPOCH
    return partial_rows(idx, np.zeros(len(idx), dtype=bool), micros, hex_ids(idx, salt=1), rng)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint's events: rows in arrival order, and the updates among them (for the check)."""

    rows: pa.Table
    update_index: Arr
    update_status: Arr
    new_orders: int


def checkpoint_rows(
    n: int,
    *,
    orders_before: int,
    events: int,
    update_share: float,
    interval_s: float,
    rng: np.random.Generator,
) -> Checkpoint:
    """Checkpoint ``n``'s ``events`` partial rows: ``update_share`` of them (binomially) updates of orders
    chosen uniformly in ``[0, orders_before)``, the rest new orders numbered from ``orders_before``; event
    times strictly increase over the checkpoint's interval (so within a key the later arrival wins)."""
    is_update = rng.random(events) < update_share
    if orders_before == 0:
        is_update[:] = False
    new = int((~is_update).sum())
    index = np.empty(events, dtype=np.int64)
    index[is_update] = rng.integers(0, max(1, orders_before), int(is_update.sum()))
    index[~is_update] = np.arange(orders_before, orders_before + new, dtype=np.int64)
    epoch_us = int(EPOCH.timestamp() * 1_000_000)
    span = int(interval_s * 1_000_000)
    micros = epoch_us + (n - 1) * span + (np.arange(events, dtype=np.int64) * span) // max(1, events)
    status = rng.integers(1, len(STATUSES), events)
    eids = hex_ids(np.arange(events, dtype=np.int64) + n * 10_000_000_000, salt=2)
    rows = partial_rows(index, is_update, micros, eids, rng, status_codes=status)
    return Checkpoint(rows, index[is_update], status[is_update], new)


def last_status(expected: dict[int, int], cp: Checkpoint, sample: Arr) -> None:
    """Record in ``expected`` (order index -> status code) the last update of each sampled order."""
    hit = np.isin(cp.update_index, sample)
    for i, s in zip(cp.update_index[hit].tolist(), cp.update_status[hit].tolist(), strict=True):
        expected[int(i)] = int(s)


# ---------------------------------------------------------------- schedule and report (pure)


@dataclass(frozen=True)
class CheckpointRecord:
    """When checkpoint n's barrier was due, when its prepare+commit started and ended (run seconds)."""

    n: int
    barrier: float
    start: float
    end: float
    prepare_s: float
    rows: int

    @property
    def commit_s(self) -> float:
        return self.end - self.start

    @property
    def lateness(self) -> float:
        return self.start - self.barrier

    @property
    def visibility(self) -> float:
        return self.end - self.barrier


@dataclass(frozen=True)
class FoldRecord:
    """One background fold: when it started (run seconds), how long, what it did."""

    start: float
    seconds: float
    change_rows: int
    keys: int
    files_rewritten: int


def barrier_at(t0: float, n: int, interval_s: float) -> float:
    """Checkpoint n's barrier time."""
    return t0 + n * interval_s


def start_of(barrier: float, previous_end: float | None) -> float:
    """When checkpoint n's commit can start: at its barrier, or after the previous commit (the backlog)."""
    return barrier if previous_end is None else max(barrier, previous_end)


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear), None for no values."""
    return None if not values else float(np.percentile(np.asarray(values, dtype=float), q))


def backlog_growing(records: Sequence[CheckpointRecord], interval_s: float) -> bool:
    """Whether the barriers fall further behind: the last lateness exceeds one interval and the lateness
    of the second half's end is above that of its start (a steady backlog under one interval is not)."""
    if len(records) < 2:
        return False
    last = records[-1].lateness
    mid = records[len(records) // 2].lateness
    return last > interval_s and last > mid


def summarize(
    layout: str,
    orders: int,
    records: Sequence[CheckpointRecord],
    folds: Sequence[FoldRecord],
    *,
    interval_s: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The numbers of one (layout, size) run."""
    commit = [r.commit_s for r in records]
    vis = [r.visibility for r in records]
    fold_s = [f.seconds for f in folds]
    return {
        "layout": layout,
        "orders": orders,
        "checkpoints": len(records),
        "commit_p50_s": pct(commit, 50),
        "commit_p99_s": pct(commit, 99),
        "commit_max_s": max(commit, default=None),
        "visibility_p50_s": pct(vis, 50),
        "visibility_p99_s": pct(vis, 99),
        "worst_event_to_visible_p99_s": None if not vis else pct(vis, 99) + interval_s,  # type: ignore[operator]
        "lateness_end_s": records[-1].lateness if records else None,
        "backlog_growing": backlog_growing(records, interval_s),
        "folds": len(folds),
        "fold_median_s": pct(fold_s, 50),
        "fold_max_s": max(fold_s, default=None),
        "fold_rows_median": pct([f.change_rows for f in folds], 50),
        "fold_files_median": pct([f.files_rewritten for f in folds], 50),
        **(extra or {}),
        "per_checkpoint": [
            {**asdict(r), "commit_s": r.commit_s, "lateness_s": r.lateness, "visibility_s": r.visibility}
            for r in records
        ],
        "per_fold": [asdict(f) for f in folds],
    }


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """One markdown table row per (layout, size)."""
    head = (
        "| layout | orders | checkpoints | commit p50 / p99 s | visibility p50 / p99 s "
        "| worst event->visible p99 s | lateness at end s | backlog growing | folds "
        "| fold median / max s | fold rows | fold files rewritten |"
    )
    lines = [head, "|" + "---|" * 12]
    for s in summaries:
        lines.append(
            "| "
            + " | ".join(
                [
                    s["layout"] + (" (capped)" if s.get("capped") else ""),
                    f"{s['orders']:,}",
                    str(s["checkpoints"]),
                    f"{_fmt(s['commit_p50_s'])} / {_fmt(s['commit_p99_s'])}",
                    f"{_fmt(s['visibility_p50_s'])} / {_fmt(s['visibility_p99_s'])}",
                    _fmt(s["worst_event_to_visible_p99_s"]),
                    _fmt(s["lateness_end_s"]),
                    _fmt(s["backlog_growing"]),
                    str(s["folds"]),
                    f"{_fmt(s['fold_median_s'])} / {_fmt(s['fold_max_s'])}",
                    _fmt(s["fold_rows_median"], 0),
                    _fmt(s["fold_files_median"], 0),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the run


@dataclass
class Settings:
    """Command-line settings."""

    orders: list[int]
    minutes: float = 20.0
    rate: int = 10_000
    update_share: float = 0.5
    interval_s: float = 10.0
    cow_checkpoints: int = 6
    fold_every_s: float = 60.0
    fold_rows: int = 0
    retention_min: float = 10.0
    layouts: list[str] = field(default_factory=lambda: ["mor", "cow"])
    chunk_rows: int = 1_000_000
    sample: int = 2000
    seed: int = 17
    out: Path = Path(".lakestream/bench-silver")
    keep: bool = False


def _now() -> float:
    return time.monotonic()


def build_tables(root: Path, n: int, layouts: Sequence[str], s: Settings) -> dict[str, float]:
    """The initial silver table of ``n`` orders for each layout (the MOR snapshot has change_seq=0)."""
    from sinks.table_bootstrap import open_table
    from sinks.table_spec import TableSpec

    specs = {
        "cow": TableSpec(
            table_uri=str(root / "cow"),
            schema=SILVER_SCHEMA,
            mode="merge",
            merge=SILVER_MERGE,
            target_file_size=FILE_SIZE,
        ),
        "mor": TableSpec(
            table_uri=str(root / "mor_snapshot"),
            schema=SILVER_MOR_SCHEMA,
            mode="merge",
            merge=SILVER_MOR_MERGE,
            target_file_size=FILE_SIZE,
        ),
    }
    rng = np.random.default_rng(s.seed)
    timings: dict[str, float] = {"generate_s": 0.0}
    for layout in layouts:
        open_table(specs[layout], log_name=f"bench {layout}")
        timings[f"write_{layout}_s"] = 0.0
    for start in range(0, n, s.chunk_rows):
        t = _now()
        rows = initial_rows(start, min(n, start + s.chunk_rows), rng)
        timings["generate_s"] += _now() - t
        for layout in layouts:
            t = _now()
            data = rows
            if layout == "mor":
                data = rows.append_column(
                    pa.field(CHANGE_SEQ, pa.int64(), nullable=False),
                    pa.array(np.zeros(rows.num_rows, np.int64)),
                )
            write_deltalake(specs[layout].table_uri, data, mode="append", target_file_size=FILE_SIZE)
            timings[f"write_{layout}_s"] += _now() - t
    for layout in layouts:
        dt = DeltaTable(specs[layout].table_uri)
        timings[f"files_{layout}"] = float(len(dt.file_uris()))
        timings[f"bytes_{layout}"] = float(
            sum(os.path.getsize(u.removeprefix("file://")) for u in dt.file_uris())
        )
    return {k: round(v, 2) for k, v in timings.items()}


class Folder:
    """The background fold: every ``every_s`` seconds, or once ``rows`` changes are pending (0: off)."""

    def __init__(self, table: Any, *, every_s: float, rows: int, retention: timedelta, t0: float) -> None:
        self.table, self.every_s, self.rows, self.retention, self.t0 = table, every_s, rows, retention, t0
        self.records: list[FoldRecord] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fold", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def fold(self) -> FoldRecord:
        from merge_on_read.fold_changes import fold_once

        start = _now()
        r = fold_once(self.table, retention=self.retention)
        rec = FoldRecord(start - self.t0, r.seconds, r.change_rows, r.keys, r.files_rewritten)
        return rec

    def _run(self) -> None:
        from merge_on_read.fold_changes import pending_changes

        last = _now()
        try:
            while not self._stop.wait(1.0):
                due = _now() - last >= self.every_s
                if not due and self.rows:
                    due = pending_changes(self.table)[0] >= self.rows
                if due:
                    rec = self.fold()
                    if rec.change_rows:
                        self.records.append(rec)
                    last = _now()
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def drive(
    writer: Any,
    s: Settings,
    *,
    orders: int,
    checkpoints: int,
    sample: Arr,
    expected: dict[int, int],
    t0: float,
    rng: np.random.Generator,
    between: Callable[[], None] = lambda: None,
) -> tuple[list[CheckpointRecord], int, float]:
    """Checkpoints 1..``checkpoints`` on the wall-clock schedule; records, orders after, generate seconds."""
    events = int(s.rate * s.interval_s)
    records: list[CheckpointRecord] = []
    gen_s = 0.0
    previous_end: float | None = None
    for n in range(1, checkpoints + 1):
        t = _now()
        cp = checkpoint_rows(
            n,
            orders_before=orders,
            events=events,
            update_share=s.update_share,
            interval_s=s.interval_s,
            rng=rng,
        )
        last_status(expected, cp, sample)
        gen_s += _now() - t
        writer.write(cp.rows)
        orders += cp.new_orders
        barrier = barrier_at(t0, n, s.interval_s)
        wait = barrier - _now()
        if wait > 0:
            time.sleep(wait)
        start = _now()
        writer.prepare(n)
        prepared = _now()
        writer.commit(n)
        end = _now()
        records.append(
            CheckpointRecord(n, barrier - t0, start - t0, end - t0, prepared - start, cp.rows.num_rows)
        )
        previous_end = end
        between()
        print(
            f"    ckpt {n}: commit {end - start:.2f}s (prepare {prepared - start:.2f}), "
            f"late {start - barrier:.2f}s, visible {end - barrier:.2f}s",
            flush=True,
        )
    del previous_end
    return records, orders, gen_s


def check_rows(current: pa.Table, sample: Arr, expected: dict[int, int]) -> dict[str, Any]:
    """Compare the sampled orders' current rows with what was written: present, last status wins."""
    got = dict(zip(current["order_id"].to_pylist(), current["status"].to_pylist(), strict=True))
    ids = order_ids(sample).to_pylist()
    missing = sum(1 for i in ids if i not in got)
    wrong = sum(
        1
        for idx, oid in zip(sample.tolist(), ids, strict=True)
        if oid in got and got[oid] != STATUSES[expected.get(int(idx), 0)]
    )
    return {
        "sampled": len(ids),
        "missing": missing,
        "wrong_status": wrong,
        "updated_in_sample": len(expected),
    }


def run_mor(root: Path, n: int, s: Settings, checkpoints: int) -> dict[str, Any]:
    """The merge-on-read layout at size ``n``."""
    from merge_on_read.fold_changes import pending_changes
    from merge_on_read.table import MergeOnReadTable, read_current
    from sinks.table_spec import TableSpec
    from sinks.writer import TwoPhaseDeltaWriter

    table = MergeOnReadTable(
        snapshot_uri=str(root / "mor_snapshot"),
        changes_uri=str(root / "mor_changes"),
        schema=SILVER_MOR_SCHEMA,
        spec=SILVER_MOR_MERGE,
        seq=CHANGE_SEQ,
        event_time="last_event_time",
        target_file_size=FILE_SIZE,
    )
    w = TwoPhaseDeltaWriter(
        spec=TableSpec(
            table_uri=table.changes_uri,
            schema=SILVER_SCHEMA,
            mode="changes",
            merge=SILVER_MERGE,
            sequence_column=CHANGE_SEQ,
        ),
        app_prefix="bench",
    )
    w.open(restored_checkpoint_id=None, run_id="r1", subtask=0, parallelism=1)
    rng = np.random.default_rng(s.seed + 1)
    sample = np.sort(rng.choice(n, size=min(n, s.sample), replace=False))
    expected: dict[int, int] = {}
    t0 = _now()
    folder = Folder(
        table, every_s=s.fold_every_s, rows=s.fold_rows, retention=timedelta(minutes=s.retention_min), t0=t0
    )
    folder.start()
    try:
        records, orders, gen_s = drive(
            w, s, orders=n, checkpoints=checkpoints, sample=sample, expected=expected, t0=t0, rng=rng
        )
    finally:
        folder.stop()
    w.close()
    if folder.error is not None:
        raise folder.error
    pending_rows, pending_commits = pending_changes(table)
    keys = order_ids(sample[:100]).to_pylist()
    t = _now()
    read_current(table, keys=keys)
    read_100_s = _now() - t
    before_fold = check_rows(read_current(table, keys=order_ids(sample).to_pylist()), sample, expected)
    final = folder.fold()
    after = pending_changes(table)
    current = read_current(table, keys=order_ids(sample).to_pylist())
    snap = DeltaTable(table.snapshot_uri)
    snap_rows = snap.to_pyarrow_dataset().count_rows()
    from merge_on_read.table import scan

    snapshot_sample = scan(snap, table.schema, keys=("order_id", order_ids(sample).to_pylist()))
    same = (
        current.select(SILVER_SCHEMA.names)
        .sort_by("order_id")
        .equals(snapshot_sample.select(SILVER_SCHEMA.names).sort_by("order_id"))
    )
    check = check_rows(current, sample, expected)
    extra = {
        "generate_s": round(gen_s, 2),
        "pending_before_final_fold": {"rows": pending_rows, "commits": pending_commits},
        "read_current_100_keys_s": round(read_100_s, 3),
        "final_fold": asdict(final),
        "pending_after_final_fold": {"rows": after[0], "commits": after[1]},
        "snapshot_rows": snap_rows,
        "orders_expected": orders,
        "read_current_equals_snapshot": same,
        "check_before_final_fold": before_fold,
        "check": check,
        "ok": same
        and snap_rows == orders
        and after[0] == 0
        and not any(c["missing"] or c["wrong_status"] for c in (check, before_fold)),
    }
    return summarize("mor", n, records, folder.records, interval_s=s.interval_s, extra=extra)


def run_cow(root: Path, n: int, s: Settings, checkpoints: int, capped: bool) -> dict[str, Any]:
    """The copy-on-write layout at size ``n`` (one MERGE per checkpoint)."""
    from sinks.table_spec import TableSpec
    from sinks.writer import TwoPhaseDeltaWriter

    w = TwoPhaseDeltaWriter(
        spec=TableSpec(
            table_uri=str(root / "cow"),
            schema=SILVER_SCHEMA,
            mode="merge",
            merge=SILVER_MERGE,
            target_file_size=FILE_SIZE,
        ),
        app_prefix="bench",
    )
    w.open(restored_checkpoint_id=None, run_id="r1", subtask=0, parallelism=1)
    rng = np.random.default_rng(s.seed + 1)
    sample = np.sort(rng.choice(n, size=min(n, s.sample), replace=False))
    expected: dict[int, int] = {}
    t0 = _now()
    records, orders, gen_s = drive(
        w, s, orders=n, checkpoints=checkpoints, sample=sample, expected=expected, t0=t0, rng=rng
    )
    w.close()
    dt = DeltaTable(str(root / "cow"))
    rows = dt.to_pyarrow_dataset().count_rows()
    ids = order_ids(sample).to_pylist()
    current = dt.to_pyarrow_table(columns=["order_id", "status"], filters=[("order_id", "in", ids)])
    check = check_rows(current, sample, expected)
    extra = {
        "capped": capped,
        "generate_s": round(gen_s, 2),
        "table_rows": rows,
        "orders_expected": orders,
        "check": check,
        "ok": rows == orders and not check["missing"] and not check["wrong_status"],
    }
    return summarize("cow", n, records, [], interval_s=s.interval_s, extra=extra)


def load() -> dict[str, Any]:
    """Load averages and cores, recorded beside the numbers (the machine is shared)."""
    one, five, fifteen = os.getloadavg()
    return {"load_1_5_15": [round(one, 2), round(five, 2), round(fifteen, 2)], "cpus": os.cpu_count()}


def run(s: Settings) -> list[dict[str, Any]]:
    """Every size and layout; writes results.json and results.md to ``s.out`` as it goes."""
    s.out.mkdir(parents=True, exist_ok=True)
    full = max(1, int(s.minutes * 60 / s.interval_s))
    summaries: list[dict[str, Any]] = []
    for n in s.orders:
        root = s.out / "tables" / str(n)
        shutil.rmtree(root, ignore_errors=True)
        print(f"== {n:,} orders: building {', '.join(s.layouts)}", flush=True)
        build = build_tables(root, n, s.layouts, s)
        print(f"   built: {build}", flush=True)
        try:
            for layout in s.layouts:
                before = load()
                if layout == "mor":
                    print(f"-- mor, {full} checkpoints", flush=True)
                    summary = run_mor(root, n, s, full)
                else:
                    k = min(full, s.cow_checkpoints)
                    print(f"-- cow, {k} checkpoints" + (" (capped)" if k < full else ""), flush=True)
                    summary = run_cow(root, n, s, k, capped=k < full)
                summary.update(build=build, load_before=before, load_after=load())
                summaries.append(summary)
                print(markdown([summary]), flush=True)
                _write(s, summaries)
        finally:
            if not s.keep:
                shutil.rmtree(root, ignore_errors=True)
    return summaries


def _write(s: Settings, summaries: list[dict[str, Any]]) -> None:
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()}
    (s.out / "results.json").write_text(
        json.dumps({"settings": settings, "runs": summaries}, indent=2, default=str)
    )
    (s.out / "results.md").write_text(markdown(summaries) + "\n")


def parse(argv: Sequence[str] | None = None) -> Settings:
    """Settings from the command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.silver_scale", description=__doc__.split("\n")[0])
    p.add_argument("--orders", default="1000000", help="comma-separated table sizes")
    p.add_argument("--minutes", type=float, default=20.0, help="duration per size and layout (the issue: 20)")
    p.add_argument("--rate", type=int, default=10_000, help="events per second")
    p.add_argument("--update-share", type=float, default=0.5, help="share of events updating old orders")
    p.add_argument("--interval", type=float, default=10.0, help="checkpoint interval, seconds")
    p.add_argument("--cow-checkpoints", type=int, default=6, help="cap on copy-on-write checkpoints")
    p.add_argument("--fold-every", type=float, default=60.0, help="fold when the last fold is this old (s)")
    p.add_argument("--fold-rows", type=int, default=0, help="fold also once this many rows pend (0: off)")
    p.add_argument("--retention-min", type=float, default=10.0, help="fold retention of changes, minutes")
    p.add_argument("--layouts", default="mor,cow")
    p.add_argument("--chunk-rows", type=int, default=1_000_000)
    p.add_argument("--sample", type=int, default=2000, help="orders checked at the end")
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--out", type=Path, default=Path(".lakestream/bench-silver"))
    p.add_argument("--keep", action="store_true", help="keep the table directories")
    a = p.parse_args(argv)
    layouts = [x for x in a.layouts.split(",") if x]
    if set(layouts) - {"mor", "cow"}:
        p.error("--layouts: mor and/or cow")
    return Settings(
        orders=[int(x) for x in a.orders.split(",") if x],
        minutes=a.minutes,
        rate=a.rate,
        update_share=a.update_share,
        interval_s=a.interval,
        cow_checkpoints=a.cow_checkpoints,
        fold_every_s=a.fold_every,
        fold_rows=a.fold_rows,
        retention_min=a.retention_min,
        layouts=layouts,
        chunk_rows=a.chunk_rows,
        sample=a.sample,
        seed=a.seed,
        out=a.out,
        keep=a.keep,
    )


def main(argv: Sequence[str] | None = None) -> None:
    s = parse(argv)
    print(f"silver_scale: {asdict(s)} load {load()}", flush=True)
    summaries = run(s)
    print("\n" + markdown(summaries))
    full = max(1, int(s.minutes * 60 / s.interval_s))
    if any(x.get("capped") for x in summaries):
        print(f"\ncow (capped): {s.cow_checkpoints} checkpoints instead of {full}")
    bad = [f"{x['layout']} {x['orders']}" for x in summaries if not x.get("ok")]
    if bad:
        raise SystemExit(f"check failed: {bad} (see {s.out / 'results.json'})")


if __name__ == "__main__":
    main()
