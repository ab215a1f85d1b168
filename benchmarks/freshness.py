"""Freshness at size: event produced -> readable in bronze and in silver's read path, per checkpoint interval.

Workload, per checkpoint interval of ``--intervals`` (one unbounded run each, ``--minutes`` long, on a
fresh copy of the same seeded lakehouse): ``--rate`` ``orders_db`` records/s, a share ``--update-share``
of them updates of orders chosen uniformly over a silver table seeded with ``--orders`` orders
(random-looking ids, sorted into disjoint files as a fold leaves them), the rest new orders. A record
goes to partition ``order index mod 2``, so on the fresh topics each partition's offsets are its send
order and every event has a send time.

Visibility of an event: the first bronze commit whose Kafka progress for its partition passed its
offset puts it in bronze; the first silver commit (``silver/orders_changes`` in the merge-on-read
layout, ``silver/orders`` in copy-on-write) whose checkpoint id reaches that bronze commit's makes it
readable in silver's read path. A commit's time is when the poller first saw its log file (every
``POLL_S``), on the send clock. Also per run: the p99 of each minute (held over time), the send rate
achieved, the checkpoints' duration and the commit after each (Flink's REST API), disk use of the
lakehouse against the live tables' bytes, ``DeltaTable()`` open time of bronze and silver at the start
and the end, and at the end the exactly-once check: bronze holds every sent record once, and a sample
of updated orders reads, through silver's read path, as the last update sent to each. ``by_minute``
puts next to each minute's p99 what grows with it: the checkpoints' p99 and the phases of the slowest
(Flink's per-subtask barrier delay, alignment, sync and async parts), the machine's busy share and
the CPU of the job's processes by kind.

Run: ``python -m benchmarks.freshness --orders 1000000 --minutes 3`` (``make bench-freshness``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks.latency import Message, paced_send
from benchmarks.s3_variant import RunPlace
from benchmarks.silver_scale import ADDRESSES, STATUSES, initial_rows, order_ids
from benchmarks.unbounded import env_overrides, unbounded_ingest
from lakestream import paths
from lakestream.progress import PROGRESS_SEGMENT, kafka_key

POLL_S = 0.05
SHANGHAI = timezone(timedelta(hours=8))
LAYOUTS = {"mor": "merge_on_read", "cow": "copy_on_write"}
#: Seconds per event (NaN: not seen), checkpoint ids, times.
Arr = NDArray[Any]


# ---------------------------------------------------------------- what the logs say (pure)


@dataclass(frozen=True)
class SeenCommit:
    """A commit of a table as the poller saw it: its version, when its log file appeared (monotonic s),
    its checkpoint id (the highest sink ``txn``; None: not a sink's commit) and the Kafka progress it
    records for the workload's topic (partition -> next offset)."""

    version: int
    seen_s: float
    checkpoint: int | None
    offsets: dict[int, int] = field(default_factory=dict)


def seen_commit(version: int, seen_s: float, txn: dict[str, int], topic: str) -> SeenCommit:
    """``txn`` (app id -> version) of a commit, read as its checkpoint id and ``topic``'s progress."""
    checkpoints = [v for app, v in txn.items() if f":{PROGRESS_SEGMENT}:" not in app]
    offsets: dict[int, int] = {}
    for app, value in txn.items():
        _, found, key = app.partition(f":{PROGRESS_SEGMENT}:")
        topic_of, _, partition = key.rpartition("/")
        if found and topic_of == kafka_key(topic, 0).rpartition("/")[0] and partition.isdigit():
            offsets[int(partition)] = value
    return SeenCommit(version, seen_s, max(checkpoints) if checkpoints else None, offsets)


def silver_times(silver: Sequence[SeenCommit]) -> tuple[Arr, Arr]:
    """The running highest checkpoint id of the sink's silver commits in version order, and when each was
    seen: the first entry at or above checkpoint C is when C's rows became readable."""
    ordered = sorted((c for c in silver if c.checkpoint is not None), key=lambda c: c.version)
    reached = np.maximum.accumulate(np.array([c.checkpoint for c in ordered], dtype=np.int64))
    return reached, np.array([c.seen_s for c in ordered], dtype=float)


def visibility(
    sent: Sequence[float],
    partitions: Sequence[int],
    bronze: Sequence[SeenCommit],
    silver: Sequence[SeenCommit],
) -> tuple[Arr, Arr]:
    """Per event (send order; ``partitions[i]`` its partition, whose offsets are counted in send order),
    seconds from its send to readable in bronze and in silver (NaN: not seen).

    Bronze: the first commit, in version order, whose progress for the event's partition passed its
    offset. Silver: the first commit whose checkpoint id reached that bronze commit's."""
    times = np.asarray(sent, dtype=float)
    parts = np.asarray(partitions, dtype=np.int64)
    in_bronze = np.full(len(times), np.nan)
    in_silver = np.full(len(times), np.nan)
    s_reached, s_seen = silver_times(silver)
    ordered = sorted(bronze, key=lambda c: c.version)
    for p in np.unique(parts).tolist():
        events = np.flatnonzero(parts == p)
        commits = [c for c in ordered if p in c.offsets and c.checkpoint is not None]
        if not commits:
            continue
        reached = np.maximum.accumulate(np.array([c.offsets[p] for c in commits], dtype=np.int64))
        at = np.searchsorted(reached, np.arange(len(events)), side="right")
        landed = at < len(commits)
        events, at = events[landed], at[landed]
        seen = np.array([c.seen_s for c in commits], dtype=float)[at]
        checkpoint = np.array([c.checkpoint for c in commits], dtype=np.int64)[at]
        in_bronze[events] = seen - times[events]
        j = np.searchsorted(s_reached, checkpoint, side="left")
        readable = j < len(s_reached)
        in_silver[events[readable]] = s_seen[j[readable]] - times[events[readable]]
    return np.maximum(in_bronze, 0.0), np.maximum(in_silver, 0.0)


def quantiles(values: Arr) -> dict[str, Any]:
    """p50/p95/p99/max of the seen values, and how many were never seen (NaN)."""
    xs = values[~np.isnan(values)]
    if not len(xs):
        return {"events": len(values), "missing": len(values)}
    p50, p95, p99 = np.percentile(xs, [50, 95, 99])
    return {
        "events": len(values),
        "missing": len(values) - len(xs),
        "p50_s": round(float(p50), 3),
        "p95_s": round(float(p95), 3),
        "p99_s": round(float(p99), 3),
        "max_s": round(float(xs.max()), 3),
    }


def per_minute_p99(sent: Sequence[float], values: Arr) -> list[float | None]:
    """The p99 of the events sent in each minute of the run (None: a minute with an event never seen)."""
    if not len(sent):
        return []
    times = np.asarray(sent, dtype=float)
    minute = ((times - times[0]) // 60).astype(np.int64)
    out: list[float | None] = []
    for m in range(int(minute.max()) + 1):
        vs = values[minute == m]
        if not len(vs):
            continue
        out.append(None if np.isnan(vs).any() else round(float(np.percentile(vs, 99)), 3))
    return out


def caught_up(partitions: Sequence[int], in_silver: Arr) -> bool:
    """Whether the last event of every partition is readable in silver (so every event is)."""
    parts = np.asarray(partitions, dtype=np.int64)
    for p in np.unique(parts).tolist():
        if np.isnan(in_silver[np.flatnonzero(parts == p)[-1]]):
            return False
    return bool(len(parts))


# ---------------------------------------------------------------- workload


@dataclass
class Sent:
    """What the producer sent, in send order, and the last update of each sampled order."""

    times: list[float] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    last: dict[int, tuple[str, str]] = field(default_factory=dict)


def records(
    topic: str, orders: int, update_share: float, seed: int, sample: set[int], sent: Sent
) -> Iterator[Message]:
    """Endless ``orders_db`` records: updates of orders in ``[0, orders)``, new orders from ``orders`` on;
    ``sent`` gets each one's partition and the last update of each sampled order, as it is handed out."""
    rng = np.random.default_rng(seed)
    new = orders
    block = 4096
    n = 0
    while True:
        is_update = (rng.random(block) < update_share) & (orders > 0)
        index = rng.integers(0, max(1, orders), block)
        fresh = int((~is_update).sum())
        index[~is_update] = np.arange(new, new + fresh)
        new += fresh
        oids = order_ids(index).to_pylist()
        statuses = rng.integers(1, len(STATUSES), block)
        addresses = rng.integers(0, len(ADDRESSES), block)
        for j in range(block):
            i = int(index[j])
            status = STATUSES[int(statuses[j])] if is_update[j] else "created"
            address = ADDRESSES[int(addresses[j])]
            payload = {
                "op": "u" if is_update[j] else "c",
                "order_id": oids[j],
                "user_id": "U1",
                # Unique per record: an update whose payload repeats an earlier one (same status,
                # address and second) would be a re-delivery by the adapters' content ids.
                "amount": f"{10 + n % 10_000_000 / 100:.2f}",
                "status": status,
                "address": address,
                "updated_at": datetime.now(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S"),
            }
            n += 1
            if i in sample:
                sent.last[i] = (status, address)
            sent.partitions.append(i % 2)
            yield topic, oids[j].encode(), json.dumps(payload).encode(), i % 2


# ---------------------------------------------------------------- seeding, polling, sampling


def seed_lakehouse(lakehouse: Path, orders: int, layout: str, seed: int) -> dict[str, Any]:
    """Silver of ``orders`` orders in ``layout`` under ``lakehouse``: sorted by order id into files of the
    sink's size (disjoint key ranges, as a full merge of runs leaves them), with the job's table spec."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from lakestream.silver import CHANGE_SEQ
    from merge_on_read.table import silver_mor_table
    from sinks.table_bootstrap import open_table
    from sinks.table_spec import TableSpec
    from storage.parquet_encoding import writer_properties

    t0 = time.monotonic()
    cfg = config_for(lakehouse, layout)
    mor = silver_mor_table(cfg)
    spec = mor.snapshot_spec()
    if layout == "cow":
        from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA

        spec = TableSpec(
            table_uri=spec.table_uri,
            schema=SILVER_SCHEMA,
            mode="merge",
            merge=SILVER_MERGE,
            target_file_size=spec.target_file_size,
            bloom_filter_columns=spec.bloom_filter_columns,
        )
    open_table(spec, log_name="bench seed")
    rng = np.random.default_rng(seed)
    chunks = [initial_rows(s, min(orders, s + 1_000_000), rng) for s in range(0, orders, 1_000_000)]
    rows = pa.concat_tables(chunks).sort_by("order_id")
    if layout == "mor":
        rows = rows.append_column(
            pa.field(CHANGE_SEQ, pa.int64()), pa.array(np.zeros(rows.num_rows, np.int64))
        )
    write_deltalake(
        spec.table_uri,
        rows,
        mode="append",
        target_file_size=spec.target_file_size,
        writer_properties=writer_properties(rows.column_names, bloom_filters=spec.bloom_filter_columns),
    )
    return {"orders": orders, "seconds": round(time.monotonic() - t0, 1), "bytes": folder_bytes(lakehouse)}


def config_for(lakehouse: Path | str, layout: str) -> Any:
    """The configuration of a run's lakehouse in ``layout`` (``mor`` / ``cow``)."""
    from lakestream.config import load_config

    return load_config(
        None,
        environ={
            "LAKESTREAM__LAKEHOUSE__ROOT": json.dumps(str(lakehouse)),
            "LAKESTREAM__TABLES__SILVER_LAYOUT": json.dumps(LAYOUTS[layout]),
        },
    )


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass  # removed while walking (a vacuum, a staging file)
    return total


def live_bytes(table: Path) -> int:
    """Bytes of the data files in ``table``'s current snapshot (0 before it exists)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        actions = DeltaTable(str(table)).get_add_actions(flatten=True)
    except TableNotFoundError:
        return 0
    return int(sum(actions.column("size_bytes").to_pylist()))


def open_seconds(table: Path, repeat: int = 3) -> float | None:
    """Median seconds of ``DeltaTable(table)`` (None before it exists)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            DeltaTable(str(table))
        except TableNotFoundError:
            return None
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 4)


#: When the start's source poll is measured, after the producer started (seconds).
FIRST_POLL_AFTER_S = 15.0


def source_poll_seconds(table: Path, repeat: int = 3) -> float | None:
    """Median seconds of one poll of the Delta source that reads the table's newest commit (a fresh
    reader each time: listing the log, planning and reading that version, as a running stream does
    each poll interval); None before the table has two commits."""
    from sources.options import DeltaSourceOptions
    from sources.stream_reader import DeltaStreamReader
    from storage.delta_log import DeltaLog

    versions = DeltaLog(str(table)).commit_versions()
    if len(versions) < 2:
        return None
    options = DeltaSourceOptions(starting_version=versions[-1], ignore_deletes=True, ignore_changes=True)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        reader = DeltaStreamReader(str(table), options)
        plan = reader.plan(reader.start(None))
        for _batch in reader.read(plan):
            pass
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 4)


class LogPoller(threading.Thread):
    """Notes when each new log file of each table appears, every ``POLL_S``."""

    def __init__(self, tables: dict[str, Path]) -> None:
        from storage.delta_log import DeltaLog

        super().__init__(daemon=True)
        self.tables = tables
        self.logs = {name: DeltaLog(str(path)) for name, path in tables.items()}
        self.seen: dict[str, dict[int, float]] = {name: {} for name in tables}
        self.next: dict[str, int] = {name: self._first(path) for name, path in tables.items()}
        self.stop = threading.Event()

    @staticmethod
    def _first(table: Path) -> int:
        versions = [int(p.name[:20]) for p in (table / "_delta_log").glob("*.json") if p.name[:20].isdigit()]
        return max(versions) + 1 if versions else 0

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            for name, table in self.tables.items():
                v = self.next[name]
                while (table / "_delta_log" / f"{v:020d}.json").exists():
                    self.seen[name][v] = now
                    v += 1
                self.next[name] = v
            time.sleep(POLL_S)

    def commits(self, name: str, topic: str) -> list[SeenCommit]:
        """The commits of table ``name`` seen so far, with their txn actions read from the log."""
        out = []
        for version, at in sorted(self.seen[name].items()):
            commit = self.logs[name].read_commit(version)
            if commit is not None:
                out.append(seen_commit(version, at, dict(commit.txn), topic))
        return out


class DiskSampler(threading.Thread):
    """Every ``every`` s: bytes under the lakehouse and the live bytes of its main tables."""

    def __init__(self, lakehouse: Path, tables: Sequence[str], every: float) -> None:
        super().__init__(daemon=True)
        self.lakehouse, self.tables, self.every = lakehouse, list(tables), every
        self.samples: list[dict[str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.wait(0 if not self.samples else self.every):
            disk = folder_bytes(self.lakehouse)
            live = sum(live_bytes(self.lakehouse / t) for t in self.tables)
            self.samples.append(
                {"t_s": round(time.monotonic() - t0, 1), "disk_mb": disk / 2**20, "live_mb": live / 2**20}
            )


class CheckpointSampler(threading.Thread):
    """Every 2 s: the completed checkpoints in the job's REST history (trigger and end, epoch ms), by id,
    and for each the seconds from its trigger to each vertex's last acknowledgement (by vertex name)."""

    def __init__(self, port: int) -> None:
        from benchmarks.flink_rest import FlinkRest

        super().__init__(daemon=True)
        self.rest = FlinkRest(port)
        self.completed: dict[int, tuple[int, int]] = {}
        self.acks: dict[str, list[float]] = {}
        self.names: dict[str, str] = {}
        #: Per completed checkpoint: trigger (epoch s), trigger -> last ack (s), and per vertex the
        #: slowest subtask's phases (``subtask_phases``).
        self.series: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(2.0):
            try:
                self._poll()
            except OSError:
                continue  # the cluster not answering this time

    def _poll(self) -> None:
        job = self.rest.running_job()
        if not job:
            return
        if not self.names:
            self.names = {vid: v["name"][:60] for vid, v in self.rest.vertices(job).items()}
        for c in self.rest.get(f"/jobs/{job}/checkpoints").get("history", []):
            cid = int(c["id"])
            if c.get("status") != "COMPLETED" or not c.get("latest_ack_timestamp") or cid in self.completed:
                continue
            trigger = int(c["trigger_timestamp"])
            self.completed[cid] = (trigger, int(c["latest_ack_timestamp"]))
            tasks = self.rest.get(f"/jobs/{job}/checkpoints/details/{cid}").get("tasks", {})
            phases: dict[str, dict[str, float]] = {}
            for vid, task in tasks.items():
                ack = task.get("latest_ack_timestamp")
                if ack:
                    name = self.names.get(vid, vid)
                    self.acks.setdefault(name, []).append((int(ack) - trigger) / 1000)
                    subtasks = self.rest.get(f"/jobs/{job}/checkpoints/details/{cid}/subtasks/{vid}")
                    phases[name] = subtask_phases(subtasks.get("subtasks", []))
            self.series.append(
                {
                    "trigger": trigger / 1000,
                    "took_s": (int(c["latest_ack_timestamp"]) - trigger) / 1000,
                    "phases": phases,
                }
            )

    def vertex_acks(self) -> dict[str, dict[str, float]]:
        """Per vertex, p50/p99 seconds from a checkpoint's trigger to the vertex's last acknowledgement."""
        out = {}
        for name, xs in self.acks.items():
            p50, p99 = np.percentile(xs, [50, 99])
            out[name] = {"p50_s": round(float(p50), 3), "p99_s": round(float(p99), 3)}
        return out


def subtask_phases(subtasks: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds of a vertex's checkpoint phases, each the maximum over its subtasks (Flink's REST
    ``subtasks`` of a checkpoint): ``delay`` (trigger -> first barrier received: records queued ahead of
    it), ``align`` (first -> last barrier of the inputs), ``sync`` (the operator's snapshot, including a
    Python operator's flush of its bundle), ``async`` (writing the state), ``ack`` (trigger -> ack)."""
    out = {"delay": 0.0, "align": 0.0, "sync": 0.0, "async": 0.0, "ack": 0.0}
    for t in subtasks:
        if t.get("status") != "completed":
            continue
        out["delay"] = max(out["delay"], t.get("start_delay", 0) / 1000)
        out["align"] = max(out["align"], (t.get("alignment") or {}).get("duration", 0) / 1000)
        out["sync"] = max(out["sync"], (t.get("checkpoint") or {}).get("sync", 0) / 1000)
        out["async"] = max(out["async"], (t.get("checkpoint") or {}).get("async", 0) / 1000)
        out["ack"] = max(out["ack"], t.get("end_to_end_duration", 0) / 1000)
    return out


def by_minute(
    t0: float,
    sent: Sequence[float],
    in_silver: Arr,
    checkpoints: Sequence[dict[str, Any]],
    machine: Sequence[tuple[float, float, float]],
    cpu: Sequence[tuple[float, dict[str, float]]],
) -> list[dict[str, Any]]:
    """Per minute of the run (epoch ``t0`` = the first send): silver's p99, the checkpoints' p99 and the
    phase that took longest in the slowest one, the machine's busy share and the cores of the job's
    processes by kind: what grows when visibility does."""
    from benchmarks.procs import cpu_between

    p99 = per_minute_p99(sent, in_silver)
    out = []
    for m, silver in enumerate(p99):
        lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
        these = [c for c in checkpoints if lo <= c["trigger"] < hi]
        row: dict[str, Any] = {"minute": m, "silver_p99_s": silver, "checkpoints": len(these)}
        if these:
            row["checkpoint_p99_s"] = round(float(np.percentile([c["took_s"] for c in these], 99)), 2)
            slowest = max(these, key=lambda c: c["took_s"])
            vertex, ph = max(slowest["phases"].items(), key=lambda kv: kv[1]["ack"], default=("", {}))
            row["slowest"] = {
                "took_s": slowest["took_s"],
                "vertex": vertex,
                **{k: round(v, 2) for k, v in ph.items()},
            }
        inside = [x for x in machine if lo <= x[0] < hi]
        if len(inside) >= 2:
            busy = inside[-1][1] - inside[0][1]
            total = inside[-1][2] - inside[0][2]
            row["machine_busy"] = round(busy / total, 3) if total else None
        cores = cpu_between(cpu, lo, hi)
        row["cores"] = {k: round(v / 60, 2) for k, v in cores.items()}
        out.append(row)
    return out


class MachineCpu(threading.Thread):
    """Every ``every`` s: (epoch s, busy CPU s, all CPU s) of the whole machine (``psutil.cpu_times``)."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.samples: list[tuple[float, float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        while True:
            t = psutil.cpu_times()
            idle = t.idle + getattr(t, "iowait", 0.0)
            total = sum(t)
            self.samples.append((time.time(), total - idle, total))
            if self.stop.wait(self.every):
                return


def checkpoint_phases(
    completed: dict[int, tuple[int, int]], bronze: Sequence[SeenCommit], epoch_of_monotonic: float
) -> dict[str, Any]:
    """How long checkpoints took (trigger -> last acknowledgement) and how long after that bronze's
    commit of each appeared, both in seconds (p50/p99): where a commit interval's visibility goes."""
    took = [(end - start) / 1000 for start, end in completed.values()]
    first_seen: dict[int, float] = {}
    for c in bronze:
        if c.checkpoint is not None:
            first_seen.setdefault(c.checkpoint, c.seen_s + epoch_of_monotonic)
    after = [first_seen[i] - end / 1000 for i, (_, end) in completed.items() if i in first_seen]

    def q(xs: list[float]) -> dict[str, float] | None:
        if not xs:
            return None
        p50, p99 = np.percentile(xs, [50, 99])
        return {"p50_s": round(float(p50), 3), "p99_s": round(float(p99), 3), "n": len(xs)}

    starts = sorted(start for start, _ in completed.values())
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
    return {"duration": q(took), "commit_after": q(after), "trigger_gap": q(gaps)}


# ---------------------------------------------------------------- one run, the sweep


@dataclass(frozen=True)
class Settings:
    """Command-line settings."""

    orders: list[int]
    intervals: list[str]
    layout: str = "mor"
    minutes: float = 3.0
    rate: int = 10_000
    update_share: float = 0.5
    sample: int = 2000
    seed: int = 23
    disk_every_s: float = 20.0
    out: Path = paths.STATE_DIR / "bench-freshness"
    sets: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def run_one(
    work: Path, bootstrap: str, seed_dir: Path, interval: str, orders: int, s: Settings
) -> dict[str, Any]:
    """One unbounded run at checkpoint ``interval`` on a copy of ``seed_dir`` (module docstring)."""
    from deltalake import DeltaTable

    from lakestream.table_names import BRONZE_TABLE, SILVER_CHANGES_TABLE, SILVER_TABLE

    out: dict[str, Any] = {"interval": interval, "orders": orders, "layout": s.layout, "rate": s.rate}
    silver_name = SILVER_CHANGES_TABLE if s.layout == "mor" else SILVER_TABLE

    def seed(place: RunPlace) -> None:
        shutil.copytree(seed_dir, place.lakehouse_view, dirs_exist_ok=True)

    from benchmarks.flink_rest import free_port, rest_settings

    port = free_port()
    env = {
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": json.dumps(interval),
        "LAKESTREAM__TABLES__SILVER_LAYOUT": json.dumps(LAYOUTS[s.layout]),
        **s.env,
    }
    with unbounded_ingest(
        work,
        bootstrap,
        label=f"freshness-{s.layout}-{orders}-{interval}",
        topic_prefix="fresh",
        mode="process",
        env_over=env,
        sets=[*s.sets, *rest_settings(port), "web.checkpoints.history=50"],
        tree=paths.PROJECT_ROOT,
        prepare=seed,
    ) as run:
        lake = (run.place.lakehouse_view if run.place else run.run_dir / "lakehouse").resolve()
        if not run.wait_first_checkpoint(timeout=300):
            out["error"] = run.log_tail()
            return out
        bronze, silver = lake / BRONZE_TABLE, lake / silver_name
        out["open_s_start"] = {"bronze": open_seconds(bronze), "silver": open_seconds(lake / SILVER_TABLE)}
        rng = np.random.default_rng(s.seed)
        sample = (
            {int(i) for i in rng.choice(orders, size=min(s.sample, orders), replace=False)}
            if orders
            else set()
        )
        sent = Sent()
        topic = run.topics["orders_db"]
        poller = LogPoller({"bronze": bronze, "silver": silver})
        poller.start()
        disk = DiskSampler(lake, [BRONZE_TABLE, SILVER_TABLE, SILVER_CHANGES_TABLE], s.disk_every_s)
        disk.start()
        checkpoints = CheckpointSampler(port)
        checkpoints.start()
        machine = MachineCpu()
        machine.start()
        from benchmarks.procs import RssSampler

        job_cpu = RssSampler(run.proc.pid, interval=5.0).start()
        epoch_of_monotonic = time.time() - time.monotonic()
        stop = threading.Event()
        seconds = s.minutes * 60
        t_send = time.monotonic()
        # The source poll at the start: once the job's first commits are in bronze (the seed is one).
        first_poll = threading.Timer(
            FIRST_POLL_AFTER_S,
            lambda: out.update(source_poll_s_start={"bronze": source_poll_seconds(bronze)}),
        )
        first_poll.start()
        count = paced_send(
            bootstrap,
            records(topic, orders, s.update_share, s.seed, sample, sent),
            rate=s.rate,
            seconds=seconds,
            stop=stop,
            sent=sent.times,
        )
        send_s = time.monotonic() - t_send
        first_poll.join()
        del sent.partitions[count:]
        # drain: until silver's checkpoints reach the ones that landed each partition's last record
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.proc.poll() is None:
            _, in_silver = visibility(
                sent.times, sent.partitions, poller.commits("bronze", topic), poller.commits("silver", topic)
            )
            if caught_up(sent.partitions, in_silver):
                break
            time.sleep(1)
        poller.stop.set()
        disk.stop.set()
        checkpoints.stop.set()
        machine.stop.set()
        job_cpu.stop()
        poller.join(5)
        disk.join(120)
        bronze_commits, silver_commits = poller.commits("bronze", topic), poller.commits("silver", topic)
        in_bronze, in_silver = visibility(sent.times, sent.partitions, bronze_commits, silver_commits)
        out["sent"] = count
        out["sent_per_s"] = round(count / send_s, 1)
        out["bronze"] = quantiles(in_bronze)
        out["silver"] = quantiles(in_silver)
        out["silver_p99_by_minute"] = per_minute_p99(sent.times, in_silver)
        out["bronze_p99_by_minute"] = per_minute_p99(sent.times, in_bronze)
        out["commits"] = {"bronze": len(bronze_commits), "silver": len(silver_commits)}
        out["checkpoints"] = checkpoint_phases(checkpoints.completed, bronze_commits, epoch_of_monotonic)
        out["checkpoints"]["vertex_ack"] = checkpoints.vertex_acks()
        if sent.times:
            out["by_minute"] = by_minute(
                sent.times[0] + epoch_of_monotonic,
                sent.times,
                in_silver,
                checkpoints.series,
                machine.samples,
                job_cpu.cpu_series,
            )
        out["open_s_end"] = {"bronze": open_seconds(bronze), "silver": open_seconds(lake / SILVER_TABLE)}
        out["source_poll_s_end"] = {"bronze": source_poll_seconds(bronze)}
        out["disk"] = _disk_summary(disk.samples)
        if s.layout == "mor":
            out["folds"] = fold_summary(lake / SILVER_TABLE, after=seed_version(seed_dir / SILVER_TABLE))
        out["job_alive"] = run.proc.poll() is None
        out["check"] = _check(lake, s.layout, topic, count, sent.last, DeltaTable(str(bronze)))
        if not out["job_alive"]:
            out["error"] = run.log_tail()
    return out


def seed_version(table: Path) -> int:
    """The newest version of a seeded table (-1: none)."""
    from storage.delta_log import DeltaLog

    versions = DeltaLog(str(table)).commit_versions()
    return versions[-1] if versions else -1


def fold_summary(snapshot: Path, *, after: int) -> dict[str, Any]:
    """What the folds and merges of runs did to the snapshot after version ``after``, from its log:
    bytes each wrote and removed, against the snapshot's live bytes at the end."""
    from lakestream.freshness import FRESHNESS_KEY
    from merge_on_read.fold_changes import COMPACTION_KEY
    from storage.delta_log import DeltaLog

    log = DeltaLog(str(snapshot), details=True)
    folds: list[dict[str, int]] = []
    merges: list[dict[str, int]] = []
    for v in (v for v in log.commit_versions() if v > after):
        commit = log.read_commit(v)
        if commit is None:
            continue
        row = {
            "version": v,
            "written": sum(a.size for a in commit.adds),
            "removed": sum(r.size for r in commit.removes),
        }
        if COMPACTION_KEY in commit.info:
            merges.append(row)
        elif FRESHNESS_KEY in commit.info:
            folds.append(row)
    versions = log.commit_versions()
    live = sum(f.action.size for f in log.snapshot_files(versions[-1])) if versions else 0
    rewritten = sum(m["removed"] for m in merges)
    return {
        "folds": len(folds),
        "merges": len(merges),
        "live_mb": round(live / 1e6, 1),
        "fold_written_mb_max": round(max((f["written"] for f in folds), default=0) / 1e6, 1),
        "merge_rewritten_mb_max": round(max((m["removed"] for m in merges), default=0) / 1e6, 1),
        "rewritten_mb_total": round(rewritten / 1e6, 1),
        "written_mb_total": round(sum(x["written"] for x in folds + merges) / 1e6, 1),
        "series": folds + merges,
    }


def _disk_summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    ratios = [x["disk_mb"] / x["live_mb"] for x in samples if x["live_mb"]]
    return {
        "samples": len(samples),
        "max_disk_mb": round(max((x["disk_mb"] for x in samples), default=0), 1),
        "last_live_mb": round(samples[-1]["live_mb"], 1) if samples else None,
        "max_disk_over_live": round(max(ratios), 2) if ratios else None,
        "series": [{k: round(v, 1) for k, v in x.items()} for x in samples],
    }


def _check(
    lake: Path, layout: str, topic: str, sent: int, last: dict[int, tuple[str, str]], bronze: Any
) -> dict[str, Any]:
    """Bronze holds every sent record once; sampled orders read as their last update in silver."""
    import pyarrow.compute as pc

    from serving.silver_query import current_silver

    rows = bronze.to_pyarrow_table(columns=["topic", "partition", "offset"])
    rows = rows.filter(pc.equal(rows.column("topic"), topic))
    keys = pc.add(pc.multiply(rows.column("offset").cast("int64"), 2), rows.column("partition").cast("int64"))
    distinct = len(pc.unique(keys))
    ids = {str(order_ids(np.array([i], dtype=np.int64))[0]): v for i, v in last.items()}
    current = current_silver(config_for(lake, layout), sorted(ids)) if ids else None
    got = {}
    if current is not None:
        for r in current.select(["order_id", "status", "address"]).to_pylist():
            got[r["order_id"]] = (r["status"], r["address"])
    wrong = [k for k, v in ids.items() if got.get(k) != v]
    return {
        "bronze_rows": rows.num_rows,
        "bronze_distinct": distinct,
        "sampled_orders": len(ids),
        "sampled_wrong": len(wrong),
        "exactly_once_ok": rows.num_rows == sent == distinct and not wrong,
    }


def markdown(runs: Sequence[dict[str, Any]]) -> str:
    """One table row per run."""
    lines = [
        "| orders | layout | checkpoint | sent/s | bronze p50 / p99 s | silver p50 / p99 s "
        "| silver p99 worst minute | checkpoint took p50 / p99 s | commit after it p50 / p99 s "
        "| disk / live (max) | open s start -> end (silver) | source poll s start -> end (bronze) "
        "| exactly once |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if "error" in r and "silver" not in r:
            lines.append(f"| {r['orders']:,} | {r['layout']} | {r['interval']} | failed |" + " |" * 9)
            continue
        b, sv = r["bronze"], r["silver"]
        minutes = [m for m in r["silver_p99_by_minute"] if m is not None]
        worst: Any = max(minutes) if minutes else None
        if None in r["silver_p99_by_minute"]:
            worst = "unseen"
        o0, o1 = r["open_s_start"]["silver"], r["open_s_end"]["silver"]
        p0 = r.get("source_poll_s_start", {}).get("bronze")
        p1 = r.get("source_poll_s_end", {}).get("bronze")
        took = r.get("checkpoints", {}).get("duration") or {}
        after = r.get("checkpoints", {}).get("commit_after") or {}
        lines.append(
            f"| {r['orders']:,} | {r['layout']} | {r['interval']} | {r['sent_per_s']:,} | "
            f"{b.get('p50_s')} / {b.get('p99_s')} | {sv.get('p50_s')} / {sv.get('p99_s')} | {worst} | "
            f"{took.get('p50_s')} / {took.get('p99_s')} | {after.get('p50_s')} / {after.get('p99_s')} | "
            f"{r['disk']['max_disk_over_live']} | {o0} -> {o1} | {p0} -> {p1} | "
            f"{r['check']['exactly_once_ok']} |"
        )
    return "\n".join(lines) + "\n"


def sweep(
    work: Path, bootstrap: str, s: Settings, done: Callable[[list[dict[str, Any]]], None] | None = None
) -> list[dict[str, Any]]:
    """Seed once per size, then one run per interval on the broker at ``bootstrap``; ``done`` gets the
    results after each run."""
    results: list[dict[str, Any]] = []
    for orders in s.orders:
        seed_dir = work / f"seed-{s.layout}-{orders}"
        print(f"  freshness: seeding {orders:,} orders ({s.layout}) ...", flush=True)
        seeded = seed_lakehouse(seed_dir, orders, s.layout, s.seed)
        for interval in s.intervals:
            r = run_one(work, bootstrap, seed_dir, interval, orders, s)
            r["seed"] = seeded
            results.append(r)
            print(
                f"  freshness {orders:,} {interval}: bronze {r.get('bronze')}, silver {r.get('silver')}, "
                f"checkpoints { {k: v for k, v in r.get('checkpoints', {}).items() if k != 'vertex_ack'} }, "
                f"check {r.get('check')}" + (f"\n{r['error']}" if "error" in r else ""),
                flush=True,
            )
            if done is not None:
                done(results)
        shutil.rmtree(seed_dir, ignore_errors=True)
    return results


def run(s: Settings) -> list[dict[str, Any]]:
    """The sweep on a broker of its own; results written to ``s.out`` as they come."""
    from devtools.kafka_broker import LocalKafka

    work = s.out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with LocalKafka.start(data_dir=work / "kafka", heap="1g") as broker:
        return sweep(work, broker.bootstrap_servers, s, done=lambda results: _write(s, results))


def _write(s: Settings, results: list[dict[str, Any]]) -> None:
    s.out.mkdir(parents=True, exist_ok=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(s).items()}
    (s.out / "results.json").write_text(json.dumps({"settings": settings, "runs": results}, indent=1))
    (s.out / "results.md").write_text(markdown(results))


def parse(argv: Sequence[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(prog="python -m benchmarks.freshness", description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", default="1000000", help="seeded silver sizes, comma-separated")
    p.add_argument("--intervals", default="500ms,1s,2s,5s,10s", help="checkpoint intervals, comma-separated")
    p.add_argument("--layout", choices=sorted(LAYOUTS), default="mor")
    p.add_argument("--minutes", type=float, default=3.0, help="input time of each run")
    p.add_argument("--rate", type=int, default=10_000, help="records/s")
    p.add_argument("--update-share", type=float, default=0.5)
    p.add_argument("--disk-every", type=float, default=20.0, help="seconds between disk samples")
    p.add_argument("--set", action="append", default=[], help="extra Flink setting of the runs")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="LAKESTREAM__SECTION__KEY=VALUE",
        help="configuration override of the runs, e.g. LAKESTREAM__TABLES__SILVER_FOLD_EVERY='\"10m\"'",
    )
    p.add_argument("--out", type=Path, default=paths.STATE_DIR / "bench-freshness")
    a = p.parse_args(argv)
    try:
        env = env_overrides(a.env, "--env")
    except ValueError as exc:
        p.error(str(exc))
    return Settings(
        orders=[int(x) for x in a.orders.split(",") if x.strip()],
        intervals=[x.strip() for x in a.intervals.split(",") if x.strip()],
        layout=a.layout,
        minutes=a.minutes,
        rate=a.rate,
        update_share=a.update_share,
        disk_every_s=a.disk_every,
        out=a.out,
        sets=a.set,
        env=env,
    )


def main(argv: Sequence[str] | None = None) -> None:
    s = parse(argv)
    results = run(s)
    print(markdown(results))
    sys.exit(0 if all(r.get("check", {}).get("exactly_once_ok") for r in results) else 1)


if __name__ == "__main__":
    main()
