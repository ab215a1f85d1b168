"""The S3 request trace's kinds, sums, spans and the checkpoint timeline read from Delta logs."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import s3_trace
from benchmarks.s3_trace import Request, request_kind


def test_requests_are_named_by_what_they_touch() -> None:
    assert request_kind("PUT", "r/lakehouse/silver/orders/_delta_log/00000000000000000003.json", "") == (
        "PUT delta log"
    )
    assert request_kind("GET", "", "list-type=2&prefix=r%2Flakehouse%2Fbronze%2Fx%2F_delta_log%2F") == (
        "LIST delta log"
    )
    assert request_kind("HEAD", "r/checkpoints/abc/chk-3/_metadata", "") == "HEAD flink checkpoint"
    key = "r/lakehouse/silver/orders/_lakestream/staging/app/run/0/00000000000000000004-t.arrow"
    assert request_kind("PUT", key, "partNumber=2&uploadId=u") == "multipart part merge source"
    assert request_kind("POST", key, "uploads") == "multipart start merge source"
    assert request_kind("POST", key, "uploadId=u") == "multipart complete merge source"
    assert request_kind("PUT", "r/lakehouse/bronze/order_events/_lakestream/manifests/a/b/0/1.json", "") == (
        "PUT manifest"
    )
    assert request_kind("HEAD", "r/lakehouse/bronze/order_events/source=x/part-0.snappy.parquet", "") == (
        "HEAD data file"
    )
    assert request_kind("POST", "", "delete") == "DELETE many other"
    assert s3_trace.table_of("r/lakehouse/gold/order_metrics_5m/_delta_log/1.json") == "gold"
    assert s3_trace.table_of("r/checkpoints/abc/_metadata") is None


def req(
    t: float, ms: float, method: str, key: str, *, client: str = "python worker", status: int = 200
) -> Request:
    return Request(t, ms, method, key, "", status, 10, 2**20, client)


LOG = "r/lakehouse/silver/orders/_delta_log/1.json"
DATA = "r/lakehouse/silver/orders/part-0.snappy.parquet"


def test_requests_sum_per_client_and_kind_slowest_first() -> None:
    rows = s3_trace.summarize_requests(
        [
            req(0.0, 10, "GET", LOG, status=404),
            req(0.1, 30, "GET", LOG),
            req(0.2, 500, "PUT", DATA),
            req(0.3, 20, "GET", LOG, client="bench reader"),
        ],
        checkpoints=2,
    )
    assert [(r["client"], r["kind"]) for r in rows] == [
        ("python worker", "PUT data file"),
        ("python worker", "GET delta log"),
        ("bench reader", "GET delta log"),
    ]
    logs = rows[1]
    assert logs["count"] == 2 and logs["per_checkpoint"] == 1.0 and logs["total_s"] == 0.04
    assert logs["p50_ms"] == 20.0 and logs["max_ms"] == 30.0 and logs["errors"] == 1
    assert logs["tables"] == ["silver"] and logs["mib"] == 2.0


def test_waterfall_merges_close_requests_of_one_kind_into_spans() -> None:
    spans = s3_trace.waterfall(
        [
            req(100.0, 100, "PUT", DATA),
            req(100.2, 100, "PUT", DATA),  # 0.1 s after the first ended: same span
            req(101.0, 50, "PUT", DATA),  # 0.7 s later: a new span
            req(100.5, 10, "GET", LOG, client="flink jvm"),
            req(99.0, 10, "GET", LOG),  # before the window
        ],
        100.0,
        102.0,
    )
    assert spans == [
        {
            "client": "python worker",
            "kind": "PUT data file",
            "from_ms": 0,
            "to_ms": 300,
            "count": 2,
            "busy_ms": 200,
        },
        {
            "client": "flink jvm",
            "kind": "GET delta log",
            "from_ms": 500,
            "to_ms": 510,
            "count": 1,
            "busy_ms": 10,
        },
        {
            "client": "python worker",
            "kind": "PUT data file",
            "from_ms": 1000,
            "to_ms": 1050,
            "count": 1,
            "busy_ms": 50,
        },
    ]


def write_commit(
    table: Path, version: int, ts: int, checkpoint: int | None, adds: list[int], op: str
) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    info: dict[str, object] = {"timestamp": ts, "operation": op}
    if checkpoint is not None:
        info["lakestream.appVersions"] = {"a:0": checkpoint, "a:1": checkpoint - 1}
    if op == "MERGE":
        info["operationMetrics"] = {"execution_time_ms": 400, "scan_time_ms": 100, "rewrite_time_ms": 200}
    lines = [json.dumps({"commitInfo": info})] + [json.dumps({"add": {"modificationTime": m}}) for m in adds]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def test_checkpoint_timeline_from_the_delta_logs(tmp_path: Path) -> None:
    root = tmp_path / "lakehouse"
    write_commit(root / "bronze/order_events", 0, 500, None, [], "CREATE TABLE")
    write_commit(root / "bronze/order_events", 1, 11_000, 1, [10_000, 10_050], "WRITE")
    write_commit(root / "silver/orders", 1, 12_500, 1, [12_400], "MERGE")
    write_commit(root / "gold/order_metrics_5m", 1, 11_200, 1, [11_100], "WRITE")
    write_commit(root / "bronze/order_events", 2, 21_500, 2, [20_000], "WRITE")
    write_commit(root / "silver/orders", 2, 24_000, 2, [23_000], "MERGE")
    write_commit(root / "silver/orders", 3, 30_000, 3, [], "WRITE")  # no bronze commit of 3: left out
    rows = s3_trace.checkpoint_timeline(s3_trace.lakehouse_commits(root))
    assert [r["checkpoint"] for r in rows] == [1, 2]
    assert rows[0]["commit_ms"] == {"bronze": 1000, "gold": 1200, "silver": 2500}
    assert rows[0]["anchor_epoch_ms"] == 10_000 and rows[0]["merge_ms"]["scan_time_ms"] == 100
    summary = s3_trace.timeline_summary(rows)
    assert summary["silver_commit_ms"] == {"median": 3250.0, "max": 4000.0}
    assert summary["gold_commit_ms"] == {"median": 1200.0, "max": 1200.0}
    assert summary["merge_execution_time_ms"] == 400.0
    assert s3_trace._typical_checkpoint(rows) == rows[1]


def test_the_proxy_forwards_requests_unchanged_and_records_them(tmp_path: Path) -> None:
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str, str | None, bytes]] = []

    class Upstream(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.command, self.path, self.headers.get("Host"), body))
            reply = b"stored " + body
            self.send_response(404 if self.path.endswith("missing") else 200)
            self.send_header("Content-Length", str(len(reply)))
            self.send_header("ETag", '"e1"')
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply)

        do_PUT = do_GET = do_HEAD = _answer

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    log = tmp_path / "requests.jsonl"
    try:
        with s3_trace.recording_proxy(f"http://127.0.0.1:{upstream.server_address[1]}", log) as url:
            conn = http.client.HTTPConnection(url.removeprefix("http://"))
            conn.request("PUT", "/bench/r/lakehouse/silver/orders/_delta_log/1.json", body=b"commit")
            put = conn.getresponse()
            assert (put.status, put.read(), put.getheader("ETag")) == (200, b"stored commit", '"e1"')
            conn.request("HEAD", "/bench/r/missing")  # same connection: keep-alive through the proxy
            head = conn.getresponse()
            assert head.status == 404 and head.read() == b"" and head.getheader("Content-Length") == "7"
            conn.close()
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert seen[0][:2] == ("PUT", "/bench/r/lakehouse/silver/orders/_delta_log/1.json")
    assert seen[0][2] == url.removeprefix("http://") and seen[0][3] == b"commit"  # Host kept: SigV4 signs it
    records = s3_trace.read_requests(log)
    assert [(r.method, r.key, r.status, r.sent_bytes, r.received_bytes) for r in records] == [
        ("PUT", "r/lakehouse/silver/orders/_delta_log/1.json", 200, 6, 13),
        ("HEAD", "r/missing", 404, 0, 0),
    ]
    assert records[0].client == "bench reader"  # this test's process: the proxy's parent
