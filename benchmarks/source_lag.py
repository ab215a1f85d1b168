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
    schema = pa.schema([("batch", pa.int64()), ("i", pa.int64())])

    def batch(b: int) -> pa.Table:
        return pa.table(
            {"batch": pa.array([b] * rows, pa.int64()), "i": pa.array(range(rows), pa.int64())}, schema=schema
        )

    write_deltalake(table, batch(-1), mode="append")
    committed: dict[int, float] = {}
    stop = threading.Event()

    def writer() -> None:
        b = 0
        while not stop.is_set():
            write_deltalake(table, batch(b), mode="append")
            committed[b] = time.time()
            b += 1
            stop.wait(commit_every)

    opts = DeltaSourceOptions(
        mode="table_changes", starting_version="latest", poll_interval=timedelta(seconds=poll_interval)
    )
    reader = DeltaStreamReader(table, opts)
    offset = reader.start(None)
    lags: list[float] = []
    seen = 0
    w = threading.Thread(target=writer, daemon=True)
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
