"""Delta source lag without Flink: commit -> rows returned by ``sources.stream_reader.DeltaStreamReader``.

A writer appends a small batch every ``commit_every`` seconds (recording when each commit returned);
a follower polls every ``poll_interval`` seconds like the Flink operator's ticks do and records when
each row came out. Lag = emitted time - commit time. The Flink operator adds its tick scheduling and the
Python operator hop on top; its ``sourceLagMs`` gauge reports the same quantity from inside the job.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

_SCHEMA = pa.schema([("batch", pa.int64()), ("i", pa.int64())])


def _batch(b: int, rows: int) -> pa.Table:
    """``rows`` rows tagged with commit number ``b`` (-1: the table's first version)."""
    return pa.table(
        {"batch": pa.array([b] * rows, pa.int64()), "i": pa.array(range(rows), pa.int64())}, schema=_SCHEMA
    )


def _commit_loop(
    table: str, *, rows: int, every: float, committed: dict[int, float], stop: threading.Event
) -> None:
    """Append a batch every ``every`` s until ``stop``; ``committed[b]`` = wall time commit b returned."""
    from deltalake import write_deltalake

    b = 0
    while not stop.is_set():
        write_deltalake(table, _batch(b, rows), mode="append")
        committed[b] = time.time()
        b += 1
        stop.wait(every)


def _writer(
    table: str, rows: int, every: float, committed: dict[int, float], stop: threading.Event
) -> threading.Thread:
    kwargs = {"rows": rows, "every": every, "committed": committed, "stop": stop}
    return threading.Thread(target=_commit_loop, args=(table,), kwargs=kwargs, daemon=True)


def measure(
    root: Path,
    *,
    seconds: float = 30,
    commit_every: float = 0.37,
    rows: int = 1000,
    poll_interval: float = 1.0,
) -> dict[str, Any]:
    """Run writer and follower for ``seconds``; return lag percentiles (ms) and rows seen."""
    from deltalake import write_deltalake

    from benchmarks.latency import percentiles
    from sources.options import DeltaSourceOptions
    from sources.stream_reader import DeltaStreamReader

    table = str(root / "source_lag")
    write_deltalake(table, _batch(-1, rows), mode="append")
    committed: dict[int, float] = {}
    stop = threading.Event()

    opts = DeltaSourceOptions(
        mode="table_changes", starting_version="latest", poll_interval=timedelta(seconds=poll_interval)
    )
    reader = DeltaStreamReader(table, opts)
    offset = reader.start(None)
    lags: list[float] = []
    seen = 0
    w = _writer(table, rows, commit_every, committed, stop)
    w.start()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        plan = reader.plan(offset)
        for t in reader.read(plan):
            now = time.time()
            seen += t.num_rows
            for b in set(t.column("batch").to_pylist()):
                if b in committed:
                    lags.append(now - committed[b])
        offset = plan.end
        time.sleep(poll_interval)
    stop.set()
    w.join(timeout=5)
    return {
        "rows_seen": seen,
        "commits": len(committed),
        "poll_interval_s": poll_interval,
        **{k.replace("_s", "_ms"): round(v * 1000) for k, v in percentiles(lags).items()},
    }


def measure_flink(
    work: Path,
    bootstrap: str,
    *,
    seconds: float = 45,
    commit_every: float = 0.37,
    rows: int = 100,
    poll_interval: str = "1s",
    startup_timeout: float = 240,
) -> dict[str, Any]:
    """Commit -> change row readable on Kafka, through the real ``changefeed`` Flink job.

    The job runs as its own process (MiniCluster): the Delta source operator (ticks -> keyed Python
    poller reading the change data feed), the Python-to-JVM hop and Flink's KafkaSink in at-least-once
    mode (exactly-once output would only become readable at the next checkpoint, which measures the
    checkpoint interval, not the source). Lag per commit = first of its rows consumed - commit returned.
    """
    import json
    import shutil
    import subprocess
    import sys

    from confluent_kafka import Consumer
    from deltalake import write_deltalake

    from benchmarks.latency import percentiles, utc_now
    from benchmarks.unbounded import child_env
    from devtools.kafka_broker import create_topic
    from devtools.processes import kill_group
    from lakestream import paths

    run_dir = work / "source-lag-flink"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    lakehouse = run_dir / "lakehouse"
    table = str(lakehouse / "lag" / "src")
    write_deltalake(
        table, _batch(-1, rows), mode="append", configuration={"delta.enableChangeDataFeed": "true"}
    )
    suffix = time.time_ns()
    topic = f"lag{suffix}.changes"
    create_topic(bootstrap, topic, partitions=1)
    cmd = [
        sys.executable, "-m", "cli", "changefeed", "--table", "lag/src", "--to", f"kafka:{topic}",
        "--at-least-once", "--poll-interval", poll_interval, "--fresh",
        "--lakehouse", str(lakehouse), "--bootstrap-servers", bootstrap,
    ]  # fmt: skip
    env = child_env(LAKESTREAM__FLINK__CHECKPOINT_DIR=str(run_dir / "checkpoints"))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lag-{suffix}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    first_seen: dict[int, float] = {}
    committed: dict[int, float] = {}
    stop = threading.Event()

    def consume(until: float) -> None:
        while time.monotonic() < until and not (stop.is_set() and len(first_seen) > len(committed)):
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            b = json.loads(msg.value())["batch"]
            first_seen.setdefault(b, time.time())

    out: dict[str, Any] = {
        "started": utc_now(),
        "poll_interval": poll_interval,
        "commit_every_s": commit_every,
        "rows_per_commit": rows,
    }
    with open(run_dir / "log.txt", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=paths.PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + startup_timeout
            while -1 not in first_seen and proc.poll() is None and time.monotonic() < deadline:
                consume(time.monotonic() + 0.5)
            if -1 not in first_seen:
                out["error"] = (run_dir / "log.txt").read_text(errors="replace")[-3000:]
                return out
            w = _writer(table, rows, commit_every, committed, stop)
            w.start()
            consume(time.monotonic() + seconds)
            stop.set()
            w.join(timeout=10)
            consume(time.monotonic() + 10)  # drain the last commits
        finally:
            consumer.close()
            kill_group(proc, grace=20)
    lags = [first_seen[b] - t for b, t in committed.items() if b in first_seen]
    out.update(
        commits=len(committed),
        commits_seen=len(lags),
        **{k.replace("_s", "_ms"): round(v * 1000) for k, v in percentiles(lags).items()},
    )
    return out
