"""Visibility latency in unbounded mode: producer send time -> row visible in silver (Delta version polled).

Workload: one ``orders_db`` create event per new order id, paced at a fixed rate. Silver gains exactly
one row per event, and commits are all-or-nothing per checkpoint, so when a poll at time ``t`` sees
``C`` new rows, events ``1..C`` (send order; the two partitions are filled round-robin) became visible
at ``t`` at the latest. Latency of event i = first poll time with count >= i, minus its send time.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SHANGHAI = timedelta(hours=8)


#: One message for ``paced_send``: topic, key, value, partition (None: by key, as the sources do).
Message = tuple[str, bytes | None, bytes, int | None]


def paced_send(
    bootstrap: str,
    messages: Iterator[Message],
    *,
    rate: int,
    seconds: float,
    stop: threading.Event,
    sent: list[float] | None = None,
) -> int:
    """Send ``rate`` messages/s for ``seconds`` in 10 ms slices; ``sent`` gets each send time (monotonic).

    Stops early when ``messages`` runs out or ``stop`` is set; returns how many were sent. A full
    client queue (the broker acknowledging slower than the rate) makes it wait, not fail.
    """
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "enable.idempotence": True})
    t0 = time.monotonic()
    total = int(rate * seconds)
    i = 0
    while i < total and not stop.is_set():
        due = min(total, int((time.monotonic() - t0) * rate) + 1)
        while i < due:
            msg = next(messages, None)
            if msg is None:
                p.flush(60)
                return i
            topic, key, value, partition = msg
            extra = {} if partition is None else {"partition": partition}
            while True:
                try:
                    p.produce(topic, key=key, value=value, **extra)
                    break
                except BufferError:  # the client's queue is full (a slow broker): wait for deliveries
                    if stop.is_set():
                        p.flush(60)
                        return i
                    p.poll(0.1)
            if sent is not None:
                sent.append(time.monotonic())
            i += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(60)
    return i


def paced_producer(
    bootstrap: str,
    topic: str,
    *,
    rate: int,
    seconds: float,
    first_id: int,
    sent: list[float],
    stop: threading.Event,
) -> None:
    """One ``orders_db`` create per new order id, paced (see ``paced_send``); partitions round-robin."""
    base = datetime(2024, 6, 1, 12, 0, 0)

    def creates() -> Iterator[Message]:
        for i in itertools.count():
            oid = str(first_id + i)
            at = (base + timedelta(milliseconds=i)).strftime("%Y-%m-%d %H:%M:%S")
            payload = {
                "op": "c",
                "order_id": oid,
                "user_id": "U1",
                "amount": "10.00",
                "status": "created",
                "address": "Haidian",
                "updated_at": at,
            }
            yield topic, oid.encode(), json.dumps(payload).encode(), i % 2

    paced_send(bootstrap, creates(), rate=rate, seconds=seconds, stop=stop, sent=sent)


def poll_visibility(
    table: Path | str,
    *,
    base_rows: int,
    until: float,
    seen: list[tuple[float, int]],
    storage_options: dict[str, str] | None = None,
) -> None:
    """Poll the silver table's version every 100 ms; on a new version record (time, new rows).

    ``table`` is a folder or a URI (``s3://``, read through the store with ``storage_options``)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    dt: DeltaTable | None = None
    last = -1
    while time.monotonic() < until:
        try:
            if dt is None:
                dt = DeltaTable(str(table), storage_options=storage_options)
            else:
                dt.update_incremental()
            v = dt.version()
            if v != last:
                last = v
                seen.append((time.monotonic(), dt.to_pyarrow_dataset().count_rows() - base_rows))
        except (TableNotFoundError, OSError):
            pass
        time.sleep(0.1)


def latencies(sent: list[float], seen: list[tuple[float, int]]) -> list[float]:
    """Per-event visibility latency (s) for the events that became visible."""
    out: list[float] = []
    j = 0
    for t, count in seen:
        while j < min(count, len(sent)):
            out.append(t - sent[j])
            j += 1
    return out


def percentiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))], 3)

    return {"p50_s": q(0.50), "p95_s": q(0.95), "p99_s": q(0.99), "max_s": round(s[-1], 3)}


def summarize(rate: int, seconds: float, sent: list[float], seen: list[tuple[float, int]]) -> dict[str, Any]:
    lat = latencies(sent, seen)
    return {
        "rate_target": rate,
        "seconds": seconds,
        "sent": len(sent),
        "visible": len(lat),
        "achieved_send_rate": round(len(sent) / max(1e-9, (sent[-1] - sent[0])) if len(sent) > 1 else 0),
        "commits_seen": len(seen),
        **percentiles(lat),
    }


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def gold_paced_producer(
    bootstrap: str,
    topic: str,
    *,
    rate: int,
    seconds: float,
    first_id: int,
    event_times: list[datetime],
    stop: threading.Event,
) -> None:
    """``orders_db`` creates stamped with the wall clock (so the watermark follows it), paced.

    ``event_times`` gets each event's time as the adapter reads it (whole seconds, UTC), for the
    per-window counts the gold rows must reach.
    """

    def creates() -> Iterator[Message]:
        for i in itertools.count():
            oid = str(first_id + i)
            now = datetime.now(timezone.utc).replace(microsecond=0)
            payload = {
                "op": "c",
                "order_id": oid,
                "user_id": f"U{i % 97}",
                "amount": "10.00",
                "status": "created",
                "address": "Haidian",
                "updated_at": (now.replace(tzinfo=None) + SHANGHAI).strftime("%Y-%m-%d %H:%M:%S"),
            }
            event_times.append(now)
            yield topic, oid.encode(), json.dumps(payload).encode(), i % 2

    paced_send(bootstrap, creates(), rate=rate, seconds=seconds, stop=stop)


def poll_gold(table: Path, *, until: float, seen: list[tuple[float, dict[datetime, int]]]) -> None:
    """Poll the gold table every 100 ms; on a new version record (wall time, events per window)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    dt: DeltaTable | None = None
    last = -1
    while time.monotonic() < until:
        try:
            if dt is None:
                dt = DeltaTable(str(table))
            else:
                dt.update_incremental()
            v = dt.version()
            if v != last:
                last = v
                rows = dt.to_pyarrow_table(columns=["window_start", "events"]).to_pylist()
                seen.append((time.time(), {r["window_start"]: r["events"] for r in rows}))
        except (TableNotFoundError, OSError):
            pass
        time.sleep(0.1)


def gold_visibility(
    event_times: list[datetime],
    seen: list[tuple[float, dict[datetime, int]]],
    *,
    window: timedelta,
    bound: timedelta,
) -> dict[str, Any]:
    """Per closed window: first wall time its row showed every event sent in it, minus the wall time
    the watermark passed its end (the first event time past ``end + bound`` was sent then: event
    times are the send clock, so that is ``end + bound``, an upper bound of the job's own moment)."""
    counts: dict[datetime, int] = {}
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    for t in event_times:
        start = epoch + ((t - epoch) // window) * window
        counts[start] = counts.get(start, 0) + 1
    last_sent = max(event_times) if event_times else epoch
    lags: dict[str, float] = {}
    missing: list[str] = []
    for start, n in sorted(counts.items()):
        passed = start + window + bound
        if passed >= last_sent:
            continue  # the watermark never passed this window's end during the run
        visible = next((t for t, rows in seen if rows.get(start, 0) >= n), None)
        if visible is None:
            missing.append(start.isoformat())
            continue
        lags[start.isoformat()] = round(visible - passed.timestamp(), 3)
    values = sorted(lags.values())
    return {
        "windows_closed": len(lags) + len(missing),
        "windows_missing": missing,
        "lag_after_watermark_s": lags,
        "max_lag_s": values[-1] if values else None,
        "median_lag_s": values[len(values) // 2] if values else None,
    }
