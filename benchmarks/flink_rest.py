"""Flink's REST API of a bench run's local MiniCluster: where it listens, and a background metric sampler.

PyFlink's local MiniCluster always starts a REST endpoint, on a random port unless ``rest.bind-port``
is set. The bench picks a free port itself and passes it as extra Flink settings (``--set`` of
``benchmarks.ingest_run``), so it knows where to ask: ``/jobs`` for the job id, ``/jobs/<id>`` for the
vertices (name, parallelism), ``/jobs/<id>/vertices/<vid>/metrics`` for the metric ids a vertex has
(``<subtask>.<metric>`` for task metrics, ``<subtask>.<operator>.<metric>`` for operator metrics,
operator names with spaces as ``_``) and ``?get=a,b`` for their values.

The REST handlers serve metrics from a cache that a request refreshes in the background when it is
older than ``metrics.fetcher.update-interval`` (10 s by default; the bench sets 500 ms), so a request
sees the values of the refresh the previous one started. The sampler therefore lists the metric ids
first (which starts a refresh), waits ``settle_s`` and then reads the values: they are about as old as
the sample's time stamp.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
#: RocksDB native metrics the memory run enables (``state.backend.rocksdb.metrics.<name>``); each is a
#: gauge ``<subtask>.<operator>.<column family>.rocksdb_<name>`` in the REST API (the ``.`` of the
#: property ``rocksdb.<name>`` becomes ``_``), read when the REST cache refreshes.
ROCKSDB_METRICS = (
    "estimate-num-keys",
    "estimate-live-data-size",
    "total-sst-files-size",
    "live-sst-files-size",
    "size-all-mem-tables",
    "estimate-table-readers-mem",
    "block-cache-usage",
)


#: The JVM's own memory gauges (TaskManager metrics, bytes). In the local MiniCluster the JobManager and
#: its TaskManagers share one JVM, so the first TaskManager's values are the whole process's.
JVM_METRICS = {
    "heap_used": "Status.JVM.Memory.Heap.Used",
    "heap_committed": "Status.JVM.Memory.Heap.Committed",
    "heap_max": "Status.JVM.Memory.Heap.Max",
    "nonheap_used": "Status.JVM.Memory.NonHeap.Used",
    "metaspace_used": "Status.JVM.Memory.Metaspace.Used",
    "direct_used": "Status.JVM.Memory.Direct.MemoryUsed",
}


def free_port() -> int:
    """A TCP port free right now on the loopback interface (the MiniCluster binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def rest_settings(port: int, *, fetch_interval_ms: int = 500) -> list[str]:
    """``--set key=value`` entries that put the MiniCluster's REST endpoint on ``port``, metrics fresh."""
    return [
        f"rest.bind-address={HOST}",
        f"rest.address={HOST}",
        f"rest.bind-port={port}",
        f"rest.port={port}",
        f"metrics.fetcher.update-interval={fetch_interval_ms}",
    ]


def rocksdb_settings(localdir: Path) -> list[str]:
    """``--set`` entries: RocksDB's working files under ``localdir`` and its native size metrics on.

    Harmless when the job's state backend is not RocksDB (nothing reads them then).
    """
    return [f"state.backend.rocksdb.localdir={localdir.resolve()}"] + [
        f"state.backend.rocksdb.metrics.{m}=true" for m in ROCKSDB_METRICS
    ]


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


class FlinkRest:
    """The few REST calls the benchmarks make (JSON over plain HTTP, short timeouts)."""

    def __init__(self, port: int, *, timeout: float = 5.0) -> None:
        self.base = f"http://{HOST}:{port}"
        self.timeout = timeout

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=self.timeout) as resp:  # noqa: S310 (loopback)
            return json.loads(resp.read().decode("utf-8"))

    def running_job(self) -> str | None:
        """The id of the (one) running job, else of any job listed, else None."""
        jobs = self.get("/jobs").get("jobs", [])
        running = [j["id"] for j in jobs if j.get("status") == "RUNNING"]
        return running[0] if running else None

    def vertices(self, job_id: str) -> dict[str, dict[str, Any]]:
        """vertex id -> name and parallelism, in graph order."""
        job = self.get(f"/jobs/{job_id}")
        return {v["id"]: {"name": v["name"], "parallelism": int(v["parallelism"])} for v in job["vertices"]}

    def metric_ids(self, job_id: str, vertex_id: str) -> list[str]:
        return [m["id"] for m in self.get(f"/jobs/{job_id}/vertices/{vertex_id}/metrics")]

    def metric_values(self, job_id: str, vertex_id: str, ids: list[str]) -> dict[str, float | None]:
        """Values of ``ids``; ids with a ``/`` are left out (the REST router answers 404 to any of them,
        e.g. RocksDB's timer column families ``_timer_state/...`` or an operator named ``late/silver``)."""
        ids = [i for i in ids if "/" not in i]
        if not ids:
            return {}
        query = urllib.parse.quote(",".join(ids), safe=",")
        rows = self.get(f"/jobs/{job_id}/vertices/{vertex_id}/metrics?get={query}")
        return {r["id"]: _number(r.get("value")) for r in rows}

    def jvm_memory(self) -> dict[str, float | None] | None:
        """``JVM_METRICS`` of the first TaskManager (None when none is registered)."""
        tms = self.get("/taskmanagers").get("taskmanagers", [])
        if not tms:
            return None
        query = urllib.parse.quote(",".join(JVM_METRICS.values()), safe=",")
        rows = self.get(f"/taskmanagers/{tms[0]['id']}/metrics?get={query}")
        values = {r["id"]: _number(r.get("value")) for r in rows}
        return {k: values.get(m) for k, m in JVM_METRICS.items()}

    def latest_checkpoint(self, job_id: str) -> dict[str, Any] | None:
        """The latest completed checkpoint: id, full and incremental state size (bytes), when it was
        triggered (epoch ms) and how long it took (ms)."""
        latest = (self.get(f"/jobs/{job_id}/checkpoints").get("latest") or {}).get("completed")
        if not latest:
            return None
        return {
            "id": latest.get("id"),
            "state_size": latest.get("state_size"),
            "checkpointed_size": latest.get("checkpointed_size"),
            "trigger_timestamp": latest.get("trigger_timestamp"),
            "end_to_end_duration": latest.get("end_to_end_duration"),
        }


@dataclass
class RestSampler:
    """Polls the running job's vertex metrics chosen by ``select`` every ``interval`` seconds.

    Each sample is ``{"t": seconds since t0, "epoch": wall clock s, "vertices": {vertex id: {metric id:
    value}}}`` (plus the latest checkpoint when ``checkpoints``, the JVM's memory gauges when ``jvm``);
    ``vertices`` holds each vertex's name and parallelism.
    Metric ids are listed again on every poll: operator and state-backend metrics appear only once the
    tasks run. Connection errors (the cluster not up yet, or gone) skip a poll.
    """

    port: int
    select: Callable[[str], bool]
    interval: float = 1.0
    settle_s: float = 0.3
    checkpoints: bool = False
    jvm: bool = False
    t0: float = field(default_factory=time.monotonic)
    samples: list[dict[str, Any]] = field(default_factory=list)
    vertices: dict[str, dict[str, Any]] = field(default_factory=dict)
    job_id: str | None = None
    errors: int = 0
    last_error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> RestSampler:
        self._thread = threading.Thread(target=self._run, name="flink-rest-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return self.samples

    def latest(self) -> dict[str, Any] | None:
        return self.samples[-1] if self.samples else None

    def poll(self, rest: FlinkRest) -> dict[str, Any] | None:
        """One sample (None until the job runs)."""
        if self.job_id is None:
            self.job_id = rest.running_job()
            if self.job_id is None:
                return None
        if not self.vertices:
            self.vertices = rest.vertices(self.job_id)
        sample: dict[str, Any] = {
            "t": round(time.monotonic() - self.t0, 2),
            "epoch": round(time.time(), 3),
            "vertices": {},
        }
        ids = {vid: [m for m in rest.metric_ids(self.job_id, vid) if self.select(m)] for vid in self.vertices}
        self._stop.wait(self.settle_s)  # the refresh the listing started lands in the cache
        for vid, chosen in ids.items():
            sample["vertices"][vid] = rest.metric_values(self.job_id, vid, sorted(chosen))
        if self.checkpoints:
            sample["checkpoint"] = rest.latest_checkpoint(self.job_id)
        if self.jvm:
            sample["jvm"] = rest.jvm_memory()
        return sample

    def _run(self) -> None:
        rest = FlinkRest(self.port)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sample = self.poll(rest)
            except (OSError, ValueError, KeyError) as exc:  # URLError and timeouts are OSErrors
                self.errors += 1
                where = getattr(exc, "url", None)
                self.last_error = f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")
                if isinstance(exc, urllib.error.HTTPError) and exc.code == 404:
                    self.job_id, self.vertices = None, {}  # the job ended; a new one may start
                sample = None
            if sample is not None:
                self.samples.append(sample)
            self._stop.wait(max(0.05, self.interval - (time.monotonic() - started)))

    def summary(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "job_id": self.job_id,
            "interval_s": self.interval,
            "polls": len(self.samples),
            "errors": self.errors,
            "last_error": self.last_error,
        }
