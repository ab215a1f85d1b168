"""``explain order`` at size: p50/p99 of random orders at 10M silver orders and ~50M bronze events, and
what the bloom-filter layout (``tables.bloom_filter_columns``) costs ``maintain``'s compaction.

A table-level benchmark: no Flink, no Kafka. Bronze is appended as the sink appends it (each append one
checkpoint's events in event-time order, partitioned by ``source``, written without bloom filters as
pyarrow writes the sink's files, the Kafka progress and the checkpoint recorded as ``txn`` actions);
order ids are random-looking (32 hex characters), so every file's id range covers every id and no
min/max statistics prune. Silver holds the fold of the same events (``silver_source`` +
``SILVER_MERGE``, as the job's MERGEs leave it) in 16 MB files with the MERGE's writer properties. Then:

  before   ``--before-samples`` lookups on the appended files (no bloom filters anywhere in bronze);
  compact  ``maintenance.operations.optimize`` on bronze with ``bloom_filters`` (what ``maintain``
           runs), timed;
  after    ``--samples`` lookups: p50 / p99;
  cost     compaction of a ``--cost-orders`` bronze with and without bloom filters, alternating,
           ``--repeat`` times: the medians and their ratio.

Each lookup is ``serving.explain_read.read_order`` with every table opened afresh, as a CLI call
does (without the interpreter start). Each explanation is checked: no problems, every field's winner in
bronze. Run: ``python -m benchmarks.explain_scale`` (``make bench-explain``); results in
``.lakestream/bench-explain/``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, Transaction, write_deltalake

from benchmarks.silver_scale import FILE_SIZE, hex_ids
from lakestream import paths
from lakestream.config import Config, LakehouseConfig, TablesConfig
from lakestream.merge_reduce import reduce_guarded
from lakestream.progress import kafka_key, progress_app_id
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA, silver_source
from lakestream.standard import BRONZE_SCHEMA
from lakestream.table_names import BRONZE_TABLE, SILVER_TABLE
from maintenance.facts import resolve_table
from maintenance.operations import optimize
from serving.explain_read import read_order
from storage.parquet_encoding import writer_properties

T0_US = 1_780_000_000_000_000  # 2026-05-28
#: Orders start this far apart: 10M orders over 30 days.
STEP_US = 259_200
SOURCES = np.array(["orders_db", "payments", "logistics", "behaviour"])
SOURCE_SHARE = np.array([0.35, 0.2, 0.25, 0.2])
TOPICS = np.array(["orders.db.changes", "payments.callbacks", "logistics.pushes", "behaviour.logs"])
PARTITIONS = 12
BLOOM = ("order_id",)
JOB = "bench"
#: Bronze's appended files: the size of a busy checkpoint's files, below what compaction leaves alone.
SINK_FILE_SIZE = 16 * 1024 * 1024
RUN = "r1"


def order_ids(index: np.ndarray[Any, Any]) -> pa.Array:
    """The id of each order index: 32 hex characters, a pseudo-random function of the index."""
    return hex_ids(index, salt=0)


def _only(mask: np.ndarray[Any, Any], values: np.ndarray[Any, Any]) -> pa.Array:
    """``values`` where ``mask`` holds, null elsewhere (a string column)."""
    chosen: pa.Array = pc.if_else(pa.array(mask), pa.array(values, pa.string()), pa.scalar(None, pa.string()))
    return chosen


def events(first: int, count: int) -> pa.Table:
    """Bronze rows of orders ``first .. first+count-1`` (about five events each), in event-time order.

    Each order's first event creates it (orders database); the others are updates, payments, logistics
    pushes and behaviour logs a few minutes to hours later; 1 % are tagged SUSPICIOUS. Offsets grow with
    ``first``, so appends in order of ``first`` are in Kafka order per partition.
    """
    rng = np.random.default_rng(first)
    index = np.arange(first, first + count, dtype=np.int64)
    per_order = np.minimum(1 + rng.poisson(4.0, count), 12)
    n = int(per_order.sum())
    order_of = np.repeat(index, per_order)
    nth = np.arange(n) - np.repeat(np.cumsum(per_order) - per_order, per_order)
    src = rng.choice(4, size=n, p=SOURCE_SHARE)
    src[nth == 0] = 0
    gap = rng.exponential(20 * 60e6, size=n).astype(np.int64)
    gap[nth == 0] = 0
    cum = np.cumsum(gap)
    at = T0_US + order_of * STEP_US + cum - np.repeat(cum[np.cumsum(per_order) - per_order], per_order)
    order = np.argsort(at, kind="stable")
    order_of, nth, src, at = order_of[order], nth[order], src[order], at[order]
    is_order, is_pay, is_log = src == 0, src == 1, src == 2
    kinds = np.where(
        is_order,
        np.where(nth == 0, "order_created", "order_updated"),
        np.where(is_pay, "payment", np.where(is_log, "logistics", "behaviour:view")),
    )
    cents = rng.integers(100, 999_999, n)
    words = np.zeros((n, 2), dtype=np.int64)
    words[:, 0] = cents
    amount = pa.Array.from_buffers(pa.decimal128(18, 2), n, [None, pa.py_buffer(words)])
    amount = pc.if_else(pa.array(is_order | is_pay), amount, pa.scalar(None, amount.type))
    statuses = np.array(["created", "pending", "shipped", "completed"])[rng.integers(0, 4, n)]
    status = _only(is_order | is_pay, np.where(is_order, np.where(nth == 0, "created", statuses), "paid"))
    address = _only(is_order, np.char.add("district ", rng.integers(0, 16, n).astype(str)))
    logistics = _only(is_log, np.array(["picked", "in_transit", "delivered"])[rng.integers(0, 3, n)])
    oid = order_ids(order_of)
    eid = hex_ids(order_of * 16 + nth, salt=7)
    quality = np.where(rng.random(n) < 0.01, "SUSPICIOUS", "VALID")
    time_us = pa.array(at, pa.timestamp("us", tz="UTC"))
    raw = pc.binary_join_element_wise(
        '{"order_id":"',
        oid,
        '","event_id":"',
        eid,
        '","type":"',
        pa.array(kinds),
        '","ts":',
        pc.cast(pa.array(at // 1000), pa.string()),
        ',"note":"',
        pa.array(np.char.multiply("x", rng.integers(20, 170, n))),
        '"}',
        "",
    ).cast(pa.binary())
    columns = {
        "event_id": eid,
        "order_id": oid,
        "user_id": pa.array(np.char.add("u", (order_of % 1_000_003).astype(str))),
        "event_type": pa.array(kinds),
        "event_time": time_us,
        "amount": amount,
        "status": status,
        "address": address,
        "logistics_state": logistics,
        "op": _only(is_order, np.where(nth == 0, "c", "u")),
        "source": pa.array(SOURCES[src]),
        "raw": raw,
        "topic": pa.array(TOPICS[src]),
        "partition": pa.array(rng.integers(0, PARTITIONS, n).astype(np.int32)),
        "offset": pa.array(np.arange(n, dtype=np.int64) + first * 16),
        "quality": pa.array(quality),
        "quality_reason": _only(quality == "SUSPICIOUS", np.full(n, "amount: above the ceiling")),
        "ingest_time": pa.array(at + rng.integers(50_000, 3_000_000, n), pa.timestamp("us", tz="UTC")),
    }
    return pa.table([columns[f.name] for f in BRONZE_SCHEMA], schema=BRONZE_SCHEMA)


def _commit(checkpoint: int, progress: dict[str, int], table: str) -> CommitProperties:
    """The txn actions of one checkpoint's commit, as the job writes them."""
    apps = [Transaction(f"{JOB}/{table}:{RUN}:0", checkpoint)]
    apps += [Transaction(progress_app_id(f"{JOB}/{table}", key), v) for key, v in progress.items()]
    return CommitProperties(app_transactions=apps)


def _progress(rows: pa.Table) -> dict[str, int]:
    """Per Kafka partition of ``rows`` the next offset (the job records it with each commit)."""
    grouped = rows.group_by(["topic", "partition"]).aggregate([("offset", "max")]).to_pylist()
    return {kafka_key(r["topic"], int(r["partition"])): int(r["offset_max"]) + 1 for r in grouped}


def build(root: Path, orders: int, chunk: int) -> dict[str, Any]:
    """Bronze and silver of ``orders`` orders, one commit per ``chunk`` orders (a checkpoint)."""
    bronze, silver = str(root / BRONZE_TABLE), str(root / SILVER_TABLE)
    plain = writer_properties(BRONZE_SCHEMA.names)
    merged = writer_properties(SILVER_SCHEMA.names, bloom_filters=BLOOM)
    rows = 0
    started = time.monotonic()
    for k, first in enumerate(range(0, orders, chunk)):
        data = events(first, min(chunk, orders - first))
        rows += data.num_rows
        write_deltalake(
            bronze,
            data,
            mode="append",
            partition_by=["source"],
            writer_properties=plain,
            target_file_size=SINK_FILE_SIZE,
            commit_properties=_commit(k + 1, _progress(data), BRONZE_TABLE),
        )
        folded = reduce_guarded(silver_source(data), SILVER_MERGE)
        write_deltalake(
            silver,
            folded,
            mode="append",
            writer_properties=merged,
            target_file_size=FILE_SIZE,
            commit_properties=_commit(k + 1, {}, SILVER_TABLE),
        )
        print(
            f"  built {first + chunk:,} orders, {rows:,} events ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    return {"orders": orders, "events": rows, "build_s": round(time.monotonic() - started, 1)}


def _cfg(root: Path) -> Config:
    return Config(lakehouse=LakehouseConfig(root=str(root)), tables=TablesConfig(bloom_filter_columns=BLOOM))


def lookups(root: Path, orders: int, samples: int, seed: int) -> dict[str, Any]:
    """``read_order`` of ``samples`` random orders: latency quantiles, each explanation checked."""
    cfg = _cfg(root)
    rng = random.Random(seed)
    wanted = order_ids(np.array([rng.randrange(orders) for _ in range(samples)], dtype=np.int64)).to_pylist()
    read_order(cfg, wanted[0])  # imports and first-use caches, as a long-running server has them
    times, events_seen = [], 0
    for order_id in wanted:
        started = time.perf_counter()
        explanation, _ = read_order(cfg, order_id)
        times.append(time.perf_counter() - started)
        events_seen += len(explanation.timeline)
        if explanation.problems or any(f.value is not None and f.winner is None for f in explanation.fields):
            raise AssertionError(f"{order_id}: {explanation.problems}")
    times.sort()
    return {
        "samples": samples,
        "p50_s": round(statistics.median(times), 3),
        "p99_s": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
        "max_s": round(times[-1], 3),
        "events_per_order": round(events_seen / samples, 2),
    }


def compact(root: Path, bloom: Sequence[str]) -> dict[str, Any]:
    """``maintain optimize`` of bronze (every appended file is below the target size), timed."""
    ref = resolve_table(_cfg(root), BRONZE_TABLE)
    started = time.monotonic()
    result = optimize(ref, bloom_filters=bloom)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "files_removed": result.files_removed,
        "files_added": result.files_added,
    }


def compaction_cost(work: Path, orders: int, chunk: int, repeat: int) -> dict[str, Any]:
    """Compaction of the same bronze with and without bloom filters, alternating: medians and ratio."""
    source = work / "cost-source"
    shutil.rmtree(source, ignore_errors=True)
    build(source, orders, chunk)
    runs: dict[str, list[float]] = {"bloom": [], "plain": []}
    for _ in range(repeat):
        for name, columns in (("bloom", BLOOM), ("plain", ())):
            copy = work / f"cost-{name}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source, copy)
            runs[name].append(compact(copy, columns)["seconds"])
            shutil.rmtree(copy)
    shutil.rmtree(source)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "orders": orders,
        "runs": runs,
        "median_s": medians,
        "ratio": round(medians["bloom"] / medians["plain"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orders", type=int, default=10_000_000)
    p.add_argument("--chunk", type=int, default=200_000, help="orders per append (one checkpoint)")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--before-samples", type=int, default=10)
    p.add_argument("--cost-orders", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=str(paths.STATE_DIR / "bench-explain"))
    a = p.parse_args(argv)
    work = Path(a.out)
    root = work / "lakehouse"
    shutil.rmtree(root, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"args": vars(a)}
    result["cost"] = compaction_cost(work, a.cost_orders, a.chunk, a.repeat)
    print(f"compaction with / without bloom filters: {result['cost']}", flush=True)
    result["build"] = build(root, a.orders, a.chunk)
    result["before"] = lookups(root, a.orders, a.before_samples, seed=1)
    print(f"before compaction: {result['before']}", flush=True)
    result["compact"] = compact(root, BLOOM)
    print(f"compaction: {result['compact']}", flush=True)
    result["after"] = lookups(root, a.orders, a.samples, seed=2)
    print(f"after compaction: {result['after']}", flush=True)
    (work / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
