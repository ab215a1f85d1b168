"""The object-store variant: the same bounded ingest and visibility runs with the lakehouse on ``s3://``.

The benchmark starts its own local S3 server (``devtools.s3_server.LocalS3``, data in the run's work
folder) and gives every S3 run a prefix of one bucket; with ``checkpoints_on_store`` Flink's checkpoints
go there too (``runtime.flink_env``'s S3 plugin), else to the run's local folder. The server keeps one
file per object, so the benchmark reads the written tables back from that folder (row counts, commit
times) without adding requests to the runs; the visibility poller reads through the S3 API, as a reader
of the table would. Targets: sustained throughput at least ``TARGET_RATIO`` of the local-folder runs of
the same bench (medians), visibility p99 within the checkpoint interval + ``VISIBILITY_SLACK_S``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devtools.s3_server import S3Endpoint

#: Sustained events/s on S3 over the local folder's, medians of the same bench: at least this.
TARGET_RATIO = 0.8
#: Visibility p99 on S3: at most the checkpoint interval plus this many seconds.
VISIBILITY_SLACK_S = 3.0
#: The bucket every S3 run of a bench writes under (one prefix per run).
BUCKET = "bench"
#: The S3 server JVM in CPU figures.
SERVER = "s3 server"


@dataclass(frozen=True)
class RunPlace:
    """Where one run keeps its tables and checkpoints, how the benchmark reads them, what the run needs.

    ``lakehouse`` / ``checkpoints`` are what the job is given (a folder or ``s3://``); the ``*_view``
    folders hold the same files on this machine; ``env`` reaches the store (credentials included, so it
    is never recorded); ``options`` are delta-rs storage options for readers through the store's API.
    """

    lakehouse: str
    checkpoints: str
    lakehouse_view: Path
    checkpoints_view: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)
    options: dict[str, str] = field(default_factory=dict, repr=False)

    def table(self, name: str) -> str:
        """The URI of table ``name`` (``silver/orders``) as the job writes it."""
        return f"{self.lakehouse}/{name}"


def local_place(run_dir: Path) -> RunPlace:
    """Tables and checkpoints in ``run_dir`` (the benchmark's long-standing layout)."""
    return RunPlace(
        lakehouse=str(run_dir / "lakehouse"),
        checkpoints=str(run_dir / "checkpoints"),
        lakehouse_view=run_dir / "lakehouse",
        checkpoints_view=run_dir / "checkpoints",
    )


def store_env(endpoint: S3Endpoint) -> dict[str, str]:
    """A ``lakestream`` process's environment for ``endpoint``: ``[storage]`` as overrides (what the job
    gives its table specs and Flink's S3 plugin), and the AWS variables every client reads, key pair
    included."""
    return {
        "LAKESTREAM__STORAGE__ENDPOINT": endpoint.url,
        "LAKESTREAM__STORAGE__REGION": endpoint.region,
        "LAKESTREAM__STORAGE__PATH_STYLE": "true",
        "LAKESTREAM__STORAGE__ALLOW_HTTP": "true",
        **endpoint.storage_options(),
    }


@dataclass(frozen=True)
class BenchStore:
    """The bench's S3 server: where it answers, its bucket's folder, its JVM's pid."""

    endpoint: S3Endpoint
    bucket_dir: Path
    pid: int
    checkpoints_on_store: bool

    def place(self, run_dir: Path) -> RunPlace:
        """A run's place under ``s3://BUCKET/<run folder name>/``; checkpoints there or in ``run_dir``."""
        prefix = f"s3://{BUCKET}/{run_dir.name}"
        view = self.bucket_dir / run_dir.name
        local = local_place(run_dir)
        return RunPlace(
            lakehouse=f"{prefix}/lakehouse",
            checkpoints=f"{prefix}/checkpoints" if self.checkpoints_on_store else local.checkpoints,
            lakehouse_view=view / "lakehouse",
            checkpoints_view=view / "checkpoints" if self.checkpoints_on_store else local.checkpoints_view,
            env=store_env(self.endpoint),
            options=self.endpoint.storage_options(),
        )

    def cpu_s(self) -> float | None:
        """The server JVM's CPU seconds so far (user + system), None once it is gone."""
        import psutil

        try:
            t = psutil.Process(self.pid).cpu_times()
        except psutil.Error:
            return None
        return float(t.user + t.system)

    @contextmanager
    def cpu_series(self, interval: float = 0.5) -> Iterator[list[tuple[float, dict[str, float]]]]:
        """The server JVM's cumulative CPU seconds every ``interval`` s while the block runs, as
        ``(epoch s, {"s3 server": seconds})`` (the form ``procs.cpu_between`` reads)."""
        series: list[tuple[float, dict[str, float]]] = []
        stop = threading.Event()

        def sample() -> None:
            while True:
                cpu = self.cpu_s()
                if cpu is not None:
                    series.append((time.time(), {SERVER: cpu}))
                if stop.wait(interval):
                    return

        thread = threading.Thread(target=sample, name="s3-server-cpu", daemon=True)
        thread.start()
        try:
            yield series
        finally:
            stop.set()
            thread.join(timeout=10)
            cpu = self.cpu_s()
            if cpu is not None:
                series.append((time.time(), {SERVER: cpu}))

    def settings(self) -> dict[str, Any]:
        """What results.json records about the store (never the key pair)."""
        return {
            "endpoint": self.endpoint.url,
            "bucket": BUCKET,
            "checkpoints_on_store": self.checkpoints_on_store,
        }


@contextmanager
def started_store(work: Path, *, checkpoints_on_store: bool) -> Iterator[BenchStore]:
    """The local S3 server with its data in ``work/s3`` and the bench's bucket, stopped on exit."""
    from devtools.s3_server import LocalS3

    with LocalS3.start(data_dir=work / "s3", buckets=[BUCKET]) as server:
        yield BenchStore(server.endpoint, server.buckets_dir / BUCKET, server.pid, checkpoints_on_store)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _values(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in runs if r.get(key)]


def throughput(
    local: list[dict[str, Any]],
    s3: list[dict[str, Any]],
    spread: Callable[[list[float]], dict[str, float]],
    *,
    key: str = "sustained_events_per_s",
    target: float = TARGET_RATIO,
) -> dict[str, Any]:
    """S3 runs against the local-folder runs of the same bench: medians, their ratio and the verdict.

    The ratio is of the medians; the per-repeat ratios (runs at the same position of both lists ran
    back to back) show its spread. ``passed`` is None when either side has no measured run.
    """
    lo, hi = _median(_values(local, key)), _median(_values(s3, key))
    ratio = round(hi / lo, 3) if lo and hi else None
    pairs = [
        round(float(b[key]) / float(a[key]), 3)
        for a, b in zip(local, s3, strict=False)
        if a.get(key) and b.get(key)
    ]
    return {
        "key": key,
        "local": spread(_values(local, key)),
        "s3": spread(_values(s3, key)),
        "ratio": ratio,
        "pair_ratios": pairs,
        "target_ratio": target,
        "passed": None if ratio is None else ratio >= target,
    }


def visibility(
    s3: dict[str, Any] | None,
    local: dict[str, Any] | None,
    *,
    checkpoint_interval_s: float,
    slack_s: float = VISIBILITY_SLACK_S,
) -> dict[str, Any] | None:
    """The S3 visibility run's p99 against checkpoint interval + ``slack_s`` (and every event seen);
    the local run's p99 of the same bench beside it. None without an S3 run."""
    if s3 is None:
        return None
    target = round(checkpoint_interval_s + slack_s, 3)
    p99 = s3.get("p99_s")
    all_visible = bool(s3.get("sent")) and s3.get("visible") == s3.get("sent")
    return {
        "p50_s": s3.get("p50_s"),
        "p99_s": p99,
        "max_s": s3.get("max_s"),
        "sent": s3.get("sent"),
        "visible": s3.get("visible"),
        "local_p99_s": (local or {}).get("p99_s"),
        "slack_s": slack_s,
        "target_s": target,
        "passed": None if p99 is None or "error" in s3 else bool(p99 <= target and all_visible),
        "error": s3.get("error"),
    }


def summarize(
    results: dict[str, Any], spread: Callable[[list[float]], dict[str, float]]
) -> dict[str, Any] | None:
    """The object-store summary of a results.json (None when the bench had no S3 runs)."""
    store = results.get("object_store")
    if not store:
        return None
    mode = results["settings"]["modes"][0]
    local_runs = results.get("ingest", {}).get(mode, [])
    s3_runs = store.get("ingest", [])
    local_lat = next((r for r in results.get("latency", []) if r.get("mode") == mode), None)
    s3_cpu = [float(r["s3_server_cpu_s"]) for r in s3_runs if r.get("s3_server_cpu_s") is not None]
    return {
        "sustained": throughput(local_runs, s3_runs, spread),
        "end_to_end": throughput(local_runs, s3_runs, spread, key="events_per_s"),
        "cpu_us_per_event": {
            "local": spread(_values(local_runs, "cpu_us_per_event")),
            "s3": spread(_values(s3_runs, "cpu_us_per_event")),
            "s3_server": spread(_values(s3_runs, "s3_server_cpu_us_per_event")),
        },
        "s3_server_cpu_s": spread(s3_cpu),
        "exactly_once": {
            "local": all(r.get("exactly_once_ok") for r in local_runs) if local_runs else None,
            "s3": all(r.get("exactly_once_ok") for r in s3_runs) if s3_runs else None,
        },
        "visibility": visibility(
            store.get("latency"), local_lat, checkpoint_interval_s=float(store["checkpoint_interval_s"])
        ),
    }
