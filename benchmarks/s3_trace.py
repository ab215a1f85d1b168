"""Where an S3 run's time goes: every request to the S3 server, and each checkpoint's commit timeline.

``python -m benchmarks.s3_trace`` runs the object-store variant's visibility run (unbounded ingest at a
fixed rate, ``benchmarks.__main__.run_latency``) with a recording proxy between every client (delta-rs
and obstore in the Python workers, Flink's S3 plugin in the JVM) and the local S3 server, then sums the
requests by kind (method and what they touch: Delta log, data files, manifests, merge sources, Flink
checkpoints; LISTs by their prefix) and lays out each checkpoint's commits from the Delta logs, next to a
local-folder run of the same length. The proxy forwards bytes and headers unchanged (SigV4 signs the
``Host`` it keeps); a request's time is the upstream part (sent to the server -> response read), so the
proxy's own cost is outside it but the runs are slower than unproxied ones: this is for finding where
requests go, the benchmark's figures come from ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

#: Headers that belong to one connection, not to the request: never forwarded.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
}
#: The lakehouse's tables, as the request kinds name them.
TABLE_KINDS = ("bronze", "silver", "gold", "late", "quarantine", "review")


@dataclass(frozen=True)
class Request:
    """One request the proxy forwarded: when (epoch s), how long upstream (ms), what, the answer."""

    t: float
    ms: float
    method: str
    key: str
    query: str
    status: int
    sent_bytes: int
    received_bytes: int
    client: str = ""
    #: The client closed the connection before the answer reached it.
    cancelled: bool = False


def request_kind(method: str, key: str, query: str) -> str:
    """What a request is for, e.g. ``PUT delta log``, ``LIST flink checkpoint``, ``GET data file``.

    ``key`` is the object key below the bucket (a LIST's is empty: its ``prefix`` parameter is used);
    multipart uploads show as ``multipart start`` / ``multipart part`` / ``multipart complete``.
    """
    params = parse_qs(query, keep_blank_values=True)
    verb = method
    if "list-type" in params or (method == "GET" and not key):
        verb = "LIST"
        key = params.get("prefix", [""])[0]
    elif "delete" in params:
        verb = "DELETE many"
    elif "uploads" in params:
        verb = "multipart start"
    elif "partNumber" in params:
        verb = "multipart part"
    elif "uploadId" in params:
        verb = "multipart complete" if method == "POST" else f"multipart {method}"
    return f"{verb} {area(key)}"


def area(key: str) -> str:
    """What part of a run's files an object key is in."""
    if "/checkpoints/" in f"/{key}":
        return "flink checkpoint"
    if "/_delta_log/" in f"/{key}/":
        return "delta log"
    if "/_lakestream/manifests/" in f"/{key}":
        return "manifest"
    if "/_lakestream/staging/" in f"/{key}":
        return "merge source"
    if "/_lakestream/" in f"/{key}":
        return "lakestream other"
    if key.endswith(".parquet"):
        return "data file"
    return "other"


def table_of(key: str) -> str | None:
    """The table an object key belongs to (``silver``), None outside the lakehouse."""
    parts = key.split("/")
    if "lakehouse" in parts:
        i = parts.index("lakehouse")
        if i + 1 < len(parts) and parts[i + 1] in TABLE_KINDS:
            return parts[i + 1]
    return None


def summarize_requests(requests: Sequence[Request], *, checkpoints: int) -> list[dict[str, Any]]:
    """Per client and kind of request: count, per checkpoint, summed upstream seconds, p50/p99/max ms,
    bytes; the kinds with the most summed time first."""
    by_kind: dict[tuple[str, str], list[Request]] = {}
    for r in requests:
        by_kind.setdefault((r.client, request_kind(r.method, r.key, r.query)), []).append(r)
    rows = []
    for (client, kind), rs in by_kind.items():
        ms = sorted(r.ms for r in rs)
        tables = sorted({t for r in rs if (t := table_of(r.key))})
        rows.append(
            {
                "client": client,
                "kind": kind,
                "count": len(rs),
                "per_checkpoint": round(len(rs) / checkpoints, 1) if checkpoints else None,
                "total_s": round(sum(ms) / 1000, 2),
                "p50_ms": round(statistics.median(ms), 1),
                "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
                "max_ms": round(ms[-1], 1),
                "mib": round(sum(r.sent_bytes + r.received_bytes for r in rs) / 2**20, 1),
                "errors": sum(1 for r in rs if r.status >= 400),
                "cancelled": sum(1 for r in rs if r.cancelled),
                "tables": tables,
            }
        )
    return sorted(rows, key=lambda row: -float(row["total_s"]))


def waterfall(
    requests: Sequence[Request], start: float, end: float, *, gap_s: float = 0.25
) -> list[dict[str, Any]]:
    """The requests between epoch seconds ``start`` and ``end`` as spans: consecutive requests of one
    client and kind (less than ``gap_s`` apart) merged, each span's offsets from ``start`` in ms."""
    spans: list[dict[str, Any]] = []
    open_spans: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(requests, key=lambda r: r.t):
        if not start <= r.t <= end:
            continue
        key = (r.client, request_kind(r.method, r.key, r.query))
        done = r.t + r.ms / 1000
        span = open_spans.get(key)
        if span is None or r.t - span["_end"] > gap_s:
            span = {"client": key[0], "kind": key[1], "_start": r.t, "_end": done, "count": 0, "busy_ms": 0.0}
            open_spans[key] = span
            spans.append(span)
        span["_end"] = max(span["_end"], done)
        span["count"] += 1
        span["busy_ms"] += r.ms
    return [
        {
            "client": s["client"],
            "kind": s["kind"],
            "from_ms": round((s["_start"] - start) * 1000),
            "to_ms": round((s["_end"] - start) * 1000),
            "count": s["count"],
            "busy_ms": round(s["busy_ms"]),
        }
        for s in spans
    ]


def client_kind(pid: int | None, *, own_pid: int) -> str:
    """Who sent a request, by its process: the Flink JVM, a Python worker, the job's client, the bench."""
    import psutil

    if pid is None:
        return "unknown"
    if pid == own_pid:
        return "bench reader"
    try:
        proc = psutil.Process(pid)
        name, cmd = proc.name(), " ".join(proc.cmdline())
    except psutil.Error:
        return "unknown"
    if name == "java" or "java" in cmd.split(" ")[0]:
        return "flink jvm"
    if "beam_boot" in cmd or "fn_execution" in cmd:
        return "python worker"
    if "benchmarks.ingest_run" in cmd:
        return "job client"
    return str(name)


def _peer_pid(port: int) -> int | None:
    """The process whose TCP socket on 127.0.0.1 has local port ``port``."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.pid is not None:
            return int(conn.pid)
    return None


# ------------------------------------------------------------------------------------------ the proxy


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: Clients open many connections at once (delta-rs reads a log's versions in parallel).
    request_queue_size = 256
    upstream: tuple[str, int]
    bench_pid: int
    log: TextIO
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    """Forwards one client connection's requests to the server over one connection of its own."""

    protocol_version = "HTTP/1.1"
    server: _Server
    _conn: http.client.HTTPConnection | None = None
    _client = "unknown"

    def setup(self) -> None:
        super().setup()
        self._client = client_kind(_peer_pid(self.client_address[1]), own_pid=self.server.bench_pid)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the records are the log."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _upstream(self, fresh: bool = False) -> http.client.HTTPConnection:
        if fresh and self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._conn is None:
            self._conn = http.client.HTTPConnection(*self.server.upstream, timeout=120)
        return self._conn

    def _forward(self) -> None:
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if "Transfer-Encoding" in self.headers:
            headers["Content-Length"] = str(len(body))
        t0, m0 = time.time(), time.monotonic()
        for attempt in (0, 1):
            try:
                conn = self._upstream(fresh=attempt > 0)
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if attempt:
                    raise
                t0, m0 = time.time(), time.monotonic()  # the server had closed an idle connection
        ms = (time.monotonic() - m0) * 1000
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_BY_HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        cancelled = False
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave the request up (delta-rs cancels the rest of a parallel log read once it
            # has found what it looks for): recorded, and the connection closed.
            cancelled, self.close_connection = True, True
        split = urlsplit(self.path)
        key = unquote(split.path.lstrip("/")).partition("/")[2]
        record = Request(
            t0,
            round(ms, 2),
            self.command,
            key,
            split.query,
            resp.status,
            len(body),
            len(data),
            self._client,
            cancelled,
        )
        line = json.dumps(dataclasses.asdict(record)) + "\n"
        with self.server.lock:
            self.server.log.write(line)
            self.server.log.flush()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def finish(self) -> None:
        super().finish()
        if self._conn is not None:
            self._conn.close()


def serve_proxy(upstream_url: str, log: Path, *, bench_pid: int) -> None:
    """Run the recording proxy until SIGTERM: print its URL, then append one JSON line per request to
    ``log``; requests from ``bench_pid`` are the bench's own ("bench reader")."""
    import signal

    split = urlsplit(upstream_url)
    server = _Server(("127.0.0.1", 0), _Handler)
    server.upstream = (split.hostname or "127.0.0.1", split.port or 80)
    server.bench_pid = bench_pid
    server.lock = threading.Lock()
    with open(log, "a", encoding="utf-8") as fh:
        server.log = fh
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
        print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
        server.serve_forever()
        server.server_close()


@contextmanager
def recording_proxy(upstream_url: str, log: Path) -> Iterator[str]:
    """The recording proxy in front of ``upstream_url`` in a process of its own, its URL; every request
    it forwarded is in ``log`` (``read_requests``) once the block has ended.

    Its own process, because some deltalake calls keep the GIL while they wait for their requests: a
    proxy thread in the process of such a caller would stall those requests, and every other.
    """
    import os
    import subprocess

    from lakestream import paths

    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.s3_trace", "proxy", upstream_url, str(log), str(os.getpid())],
        stdout=subprocess.PIPE,
        text=True,
        cwd=paths.PROJECT_ROOT,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the recording proxy did not start (exit code {proc.poll()})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_requests(log: Path) -> list[Request]:
    """The requests a proxy recorded into ``log``."""
    if not log.exists():
        return []
    with open(log, encoding="utf-8") as fh:
        return [Request(**json.loads(line)) for line in fh if line.strip()]


# --------------------------------------------------------------------------- checkpoint commit timeline


@dataclass
class Commit:
    """One Delta commit of a table as its log tells it."""

    table: str
    version: int
    timestamp_ms: int
    checkpoint: int | None
    operation: str
    added_modified_ms: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def read_commits(table_dir: Path, table: str) -> list[Commit]:
    """The commits of a table folder's Delta log (the local folder, or the S3 server's folder of it)."""
    out = []
    for f in sorted(table_dir.glob("_delta_log/*.json")):
        info: dict[str, Any] = {}
        adds: list[int] = []
        for line in f.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action:
                adds.append(int(action["add"]["modificationTime"]))
        versions = info.get("lakestream.appVersions") or {}
        out.append(
            Commit(
                table=table,
                version=int(f.stem),
                timestamp_ms=int(info.get("timestamp", 0)),
                checkpoint=max(versions.values()) if versions else None,
                operation=str(info.get("operation", "")),
                added_modified_ms=adds,
                metrics=dict(info.get("operationMetrics") or {}),
            )
        )
    return out


def checkpoint_timeline(commits: Sequence[Commit], *, anchor: str = "bronze") -> list[dict[str, Any]]:
    """Per checkpoint: each table's commit, ms after the anchor table's staged files were written
    (their ``modificationTime``, the moment the checkpoint barrier reached the writer), and the silver
    MERGE's own times. Checkpoints without a staged anchor file are left out."""
    by_ck: dict[int, dict[str, Commit]] = {}
    for c in commits:
        if c.checkpoint is not None:
            by_ck.setdefault(c.checkpoint, {})[c.table] = c
    rows = []
    for ck, tables in sorted(by_ck.items()):
        base = tables.get(anchor)
        if base is None or not base.added_modified_ms:
            continue
        t0 = min(base.added_modified_ms)
        row: dict[str, Any] = {
            "checkpoint": ck,
            "anchor_epoch_ms": t0,
            "commit_ms": {t: c.timestamp_ms - t0 for t, c in sorted(tables.items())},
        }
        silver = tables.get("silver")
        if silver is not None and silver.operation == "MERGE":
            row["merge_ms"] = {
                k: silver.metrics.get(k) for k in ("execution_time_ms", "scan_time_ms", "rewrite_time_ms")
            }
        rows.append(row)
    return rows


def lakehouse_commits(root: Path) -> list[Commit]:
    """Every commit of the ingest job's tables under a lakehouse folder."""
    tables = {"bronze": "bronze/order_events", "silver": "silver/orders", "gold": "gold/order_metrics_5m"}
    return [c for name, rel in tables.items() for c in read_commits(root / rel, name)]


def _median_of(rows: list[dict[str, Any]], path: tuple[str, str]) -> float | None:
    xs = [float(r[path[0]][path[1]]) for r in rows if r.get(path[0], {}).get(path[1]) is not None]
    return statistics.median(xs) if xs else None


def timeline_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and maxima over the checkpoints of a timeline (the first checkpoint, with no input yet,
    and the run's last, cut by the stop, count as they are)."""
    out: dict[str, Any] = {"checkpoints": len(rows)}
    for table in ("bronze", "gold", "silver"):
        xs = [float(r["commit_ms"][table]) for r in rows if table in r["commit_ms"]]
        out[f"{table}_commit_ms"] = {"median": statistics.median(xs), "max": max(xs)} if xs else None
    for k in ("execution_time_ms", "scan_time_ms", "rewrite_time_ms"):
        out[f"merge_{k}"] = _median_of(rows, ("merge_ms", k))
    return out


# ------------------------------------------------------------------------------------------------ CLI


def _run(a: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import s3_variant
    from benchmarks.__main__ import run_latency
    from devtools.kafka_broker import LocalKafka
    from lakestream.config import load_config

    out_dir = Path(a.out)
    work = out_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    interval = str(load_config(None, environ={}).flink.checkpoint_interval.total_seconds()) + "s"
    result: dict[str, Any] = {"seconds": a.seconds, "rate": a.rate, "checkpoints": a.checkpoints}
    with LocalKafka.start(data_dir=work / "kafka", heap="1g") as broker:
        kw: dict[str, Any] = {
            "mode": "process",
            "rate": a.rate,
            "seconds": a.seconds,
            "checkpoint_interval": interval,
            "sets": [],
        }
        if not a.skip_local:
            local = run_latency(work, broker.bootstrap_servers, **kw)
            result["local"] = {k: v for k, v in local.items() if k != "memory"}
            rows = checkpoint_timeline(lakehouse_commits(work / f"latency-process-{a.rate}" / "lakehouse"))
            result["local"]["timeline"] = rows
            result["local"]["timeline_summary"] = timeline_summary(rows)
        with s3_variant.started_store(work, checkpoints_on_store=a.checkpoints == "store") as store:
            log = out_dir / "requests.jsonl"
            log.unlink(missing_ok=True)
            with recording_proxy(store.endpoint.url, log) as url:
                traced = replace(store, endpoint=replace(store.endpoint, url=url))
                t0 = time.time()
                s3 = run_latency(work, broker.bootstrap_servers, store=traced, **kw)
                t1 = time.time()
            requests = read_requests(log)
            place = traced.place(work / f"latency-s3-process-{a.rate}")
            rows = checkpoint_timeline(lakehouse_commits(place.lakehouse_view))
            result["s3"] = {k: v for k, v in s3.items() if k != "memory"}
            result["s3"]["timeline"] = rows
            result["s3"]["timeline_summary"] = timeline_summary(rows)
            result["s3"]["requests"] = summarize_requests(requests, checkpoints=max(1, len(rows)))
            result["s3"]["requests_total"] = len(requests)
            result["s3"]["requests_per_s"] = round(len(requests) / max(1e-9, t1 - t0), 1)
            typical = _typical_checkpoint(rows)
            if typical is not None:
                t_anchor = typical["anchor_epoch_ms"] / 1000
                until = t_anchor + max(typical["commit_ms"].values()) / 1000
                result["s3"]["waterfall"] = {
                    "checkpoint": typical["checkpoint"],
                    "commit_ms": typical["commit_ms"],
                    "spans": waterfall(requests, t_anchor - 1.0, until + 0.5),
                }
    return result


def _typical_checkpoint(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The checkpoint whose silver commit came at the median delay (one with a silver commit)."""
    with_silver = sorted(
        (r for r in rows if "silver" in r["commit_ms"]), key=lambda r: r["commit_ms"]["silver"]
    )
    return with_silver[len(with_silver) // 2] if with_silver else None


def markdown(result: Mapping[str, Any]) -> str:
    """The request table and the two timelines' medians, for RESULTS.md and the terminal."""
    s3 = result["s3"]
    lines = [
        f"Traced visibility run: {result['rate']} events/s for {result['seconds']} s, checkpoints "
        f"{'on S3' if result['checkpoints'] == 'store' else 'local'}; {s3['requests_total']} requests "
        f"({s3['requests_per_s']}/s), visibility p99 {s3.get('p99_s')} s"
        + (f" (local folder: {result['local'].get('p99_s')} s)" if "local" in result else ""),
        "",
        "| client | request | count | per checkpoint | summed s | p50 ms | p99 ms | max ms | MiB | 4xx | "
        "cancelled | tables |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in s3["requests"]:
        lines.append(
            f"| {r['client']} | {r['kind']} | {r['count']} | {r['per_checkpoint']} | {r['total_s']} | "
            f"{r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['mib']} | {r['errors']} | "
            f"{r['cancelled']} | {', '.join(r['tables'])} |"
        )
    lines += [
        "",
        "| lakehouse | checkpoints | bronze commit ms | gold commit ms | silver commit ms | MERGE ms "
        "(scan, rewrite) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("local", "s3"):
        if name not in result:
            continue
        t = result[name]["timeline_summary"]

        def mm(x: dict[str, float] | None) -> str:
            return "–" if not x else f"{x['median']:,.0f} (max {x['max']:,.0f})"

        lines.append(
            f"| {name} | {t['checkpoints']} | {mm(t['bronze_commit_ms'])} | {mm(t['gold_commit_ms'])} | "
            f"{mm(t['silver_commit_ms'])} | {t['merge_execution_time_ms']} ({t['merge_scan_time_ms']}, "
            f"{t['merge_rewrite_time_ms']}) |"
        )
    lines.append(
        "\nCommit ms: after bronze's staged files were written at the checkpoint barrier (medians over the "
        "run's checkpoints). MERGE ms: delta-rs' own operation metrics of silver's commit."
    )
    w = s3.get("waterfall")
    if w:
        commits = ", ".join(f"{t} +{ms:,}" for t, ms in sorted(w["commit_ms"].items(), key=lambda kv: kv[1]))
        lines += [
            "",
            f"Checkpoint {w['checkpoint']} on S3 (the median silver delay), ms after bronze's staged files; "
            f"commits: {commits}:",
            "",
            "| client | request | from ms | to ms | count | summed ms |",
            "| --- | --- | --- | --- | --- | --- |",
            *(
                f"| {sp['client']} | {sp['kind']} | {sp['from_ms']:,} | {sp['to_ms']:,} | {sp['count']} | "
                f"{sp['busy_ms']:,} |"
                for sp in w["spans"]
            ),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["proxy"]:  # the proxy's own process (``recording_proxy``): UPSTREAM LOG BENCH_PID
        serve_proxy(args[1], Path(args[2]), bench_pid=int(args[3]))
        return 0
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3_trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--checkpoints", choices=("store", "local"), default="store")
    p.add_argument("--skip-local", action="store_true", help="no local-folder run to compare with")
    p.add_argument("--out", default="")
    a = p.parse_args(args)
    if not a.out:
        from lakestream import paths

        a.out = str(paths.STATE_DIR / "bench" / "s3-trace")
    result = _run(a)
    out = Path(a.out)
    (out / "trace.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    md = markdown(result)
    (out / "trace.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
