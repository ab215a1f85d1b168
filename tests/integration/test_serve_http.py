"""``lakestream serve`` over real HTTP on a free loopback port, reading real Delta tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from lakestream.config import Config, LakehouseConfig, ServeConfig
from lakestream.standard import LATE_SCHEMA, QUARANTINE_SCHEMA
from serving.http_server import HttpServer
from tests.support import gold_scenario
from tests.support.cli import ROOT, run_cli
from tests.support.delta_tables import table_at
from tests.support.gold_tables import append_rows, at, ingest_rows, row, upsert_realtime


class Server:
    def __init__(self, root: Path | str) -> None:
        cfg = Config(lakehouse=LakehouseConfig(root=str(root)), serve=ServeConfig(port=0))
        self.httpd = HttpServer(cfg, quiet=True).start()
        self.base = self.httpd.url

    def get(self, path: str) -> tuple[int, Message, Any]:
        """Status, headers (names in any case) and the JSON body of ``GET path``."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=30) as resp:
                return resp.status, resp.headers, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, err.headers, json.loads(err.read())

    def close(self) -> None:
        self.httpd.stop()


@pytest.fixture
def served(any_lakehouse: Path) -> Iterator[tuple[Server, gold_scenario.Scenario]]:
    """The server over a gold scenario on either back end (the S3 server's settings in the environment)."""
    root = table_at(any_lakehouse, "").rstrip("/")
    scenario = gold_scenario.write(root)
    # Late events of June 1 arrived on June 2, one of May 31 arrived on June 1: counted by event time.
    append_rows(
        f"{root}/late/order_events",
        ingest_rows(
            LATE_SCHEMA,
            [at("2024-06-02T08:00")] * 3 + [at("2024-06-01T00:05")],
            [at("2024-06-01T00:10")] * 3 + [at("2024-05-31T23:50")],
        ),
    )
    append_rows(
        f"{root}/quarantine/order_events",
        ingest_rows(
            QUARANTINE_SCHEMA, [at("2024-06-01T09:00"), at("2024-06-02T00:00"), at("2024-05-31T23:59")]
        ),
    )
    server = Server(root)
    try:
        yield server, scenario
    finally:
        server.close()


def test_api_metrics_is_what_query_metrics_prints(served: tuple[Server, gold_scenario.Scenario]) -> None:
    server, scenario = served
    status, headers, body = server.get("/api/metrics?from=2024-06-01T00:20:00Z&to=2024-06-01T00:40")
    assert status == 200 and headers["X-Gold-Version"] == "2"
    cli = run_cli(
        "query",
        "metrics",
        "--lakehouse",
        scenario.root,
        "--from",
        "2024-06-01T00:20:00Z",
        "--to",
        "2024-06-01T00:40",
        "--format",
        "json",
    )
    assert body == json.loads(cli.stdout)
    assert [(r["window_start"], r["layer"], r["events"], r["gmv"], r["day_gmv"]) for r in body] == (
        gold_scenario.expected_v2(4, 8)
    )


def test_api_metrics_as_of_reads_an_older_version(served: tuple[Server, gold_scenario.Scenario]) -> None:
    server, _ = served
    status, headers, body = server.get("/api/metrics?from=2024-06-01T00:25&to=2024-06-01T00:35&as_of=0")
    assert status == 200 and headers["X-Gold-Version"] == "0"
    assert [(r["layer"], r["gmv"]) for r in body] == [("realtime", "10.00"), ("realtime", "10.00")]
    status, _, latest = server.get("/api/metrics?from=2024-06-01T00:25&to=2024-06-01T00:35")
    assert [(r["layer"], r["gmv"]) for r in latest] == [("batch", "11.11"), ("realtime", "20.00")]


@pytest.mark.parametrize(
    ("query", "parameter", "message"),
    [
        ("to=2024-06-02", "from", "parameter 'from' is required"),
        ("from=2024-06-01&to=soon", "to", "to 'soon': not an ISO 8601 date or time"),
        ("from=06/01/2024&to=2024-06-02", "from", "from '06/01/2024': not an ISO 8601 date or time"),
        ("from=2024-06-02&to=2024-06-01", "to", "must be after from"),
        ("from=2024-06-01&to=2024-06-02&as_of=yesterday", "as_of", "expected a table version"),
        ("from=2024-06-01&to=2024-06-02&as_of=7", "as_of", "as_of 7: cannot load"),
        ("from=2024-06-01&to=2024-06-02&asof=1", "asof", "unknown parameter 'asof'"),
        ("from=2024-06-01&from=2024-06-02&to=2024-06-03", "from", "given 2 times"),
    ],
)
def test_bad_parameters_get_400_naming_the_parameter(
    served: tuple[Server, gold_scenario.Scenario], query: str, parameter: str, message: str
) -> None:
    server, _ = served
    status, headers, body = server.get("/api/metrics?" + query)
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert body["parameter"] == parameter and message in body["error"]


def test_bad_day_and_unknown_path(served: tuple[Server, gold_scenario.Scenario]) -> None:
    server, _ = served
    status, _, body = server.get("/api/today?day=tomorrow")
    assert status == 400 and body["parameter"] == "day"
    status, _, body = server.get("/api/nothing")
    assert status == 404 and "/api/metrics" in body["error"]


def test_api_today_has_the_days_windows_totals_data_time_and_counts(
    served: tuple[Server, gold_scenario.Scenario],
) -> None:
    server, _ = served
    status, _, day = server.get("/api/today?day=2024-06-01")
    assert status == 200
    assert (day["day"], day["gold_version"], day["window_seconds"]) == ("2024-06-01", 2, 300)
    assert len(day["windows"]) == 14 and day["windows"][0]["window_start"] == "2024-06-01T00:00:00Z"
    assert day["totals"] == {"events": 6 * 6 + 8 * 8, "orders_created": 28, "payments": 14, "gmv": "226.66"}
    assert day["data_time"] == "2024-06-01T01:10:00Z"  # the newest data_time of the day's rows
    assert day["batch_through"] == "2024-06-01T00:30:00Z"
    # Late by event time (the day of the windows), quarantined by ingest time (no event time to trust).
    assert (day["late"], day["quarantined"]) == (3, 1)
    assert (day["late_counted_by"], day["quarantined_counted_by"]) == ("event_time", "ingest_time")
    status, _, may31 = server.get("/api/today?day=2024-05-31")
    assert [w["day_gmv"] for w in may31["windows"]] == ["10.00"]
    assert (may31["late"], may31["quarantined"]) == (1, 1)
    status, _, june2 = server.get("/api/today?day=2024-06-02")
    assert (june2["late"], june2["quarantined"]) == (0, 1)


def test_a_new_gold_commit_is_served_at_the_next_request(
    served: tuple[Server, gold_scenario.Scenario],
) -> None:
    server, scenario = served
    service = server.httpd.service
    assert service.gold.latest() is service.gold.latest()  # one snapshot per version
    path = "/api/metrics?from=2024-06-01T01:05&to=2024-06-01T01:15"
    _, headers, before = server.get(path)
    assert headers["X-Gold-Version"] == "2" and [r["gmv"] for r in before] == ["20.00"]
    upsert_realtime(scenario.table, [row(at("2024-06-01T01:05"), gmv="30.00"), row(at("2024-06-01T01:10"))])
    _, headers, after = server.get(path)
    assert headers["X-Gold-Version"] == "3"
    assert [(r["gmv"], r["day_gmv"]) for r in after] == [("30.00", "236.66"), ("100.00", "336.66")]


def test_without_a_gold_table_today_says_so_and_metrics_is_404(tmp_path: Path) -> None:
    server = Server(tmp_path)
    try:
        status, _, day = server.get("/api/today")
        assert status == 200 and day["gold_version"] is None and day["windows"] == []
        assert "no gold table at" in day["note"]
        status, _, body = server.get("/api/metrics?from=2024-06-01&to=2024-06-02")
        assert status == 404 and "no gold table at" in body["error"]
    finally:
        server.close()


def test_today_defaults_to_the_current_utc_day(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    start = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    upsert_realtime(
        tmp_path / "gold/order_metrics_5m", [row(start, gmv="1.25"), row(start - timedelta(days=1))]
    )
    server = Server(tmp_path)
    try:
        _, _, day = server.get("/api/today")
        assert day["day"] in {now.strftime("%Y-%m-%d"), datetime.now(timezone.utc).strftime("%Y-%m-%d")}
        assert [w["gmv"] for w in day["windows"]] == ["1.25"]
    finally:
        server.close()


def _serve(*args: str, quiet: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", "0", *(["--quiet"] if quiet else []), *args],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_refuses_a_non_loopback_host_without_allow_remote(tmp_path: Path) -> None:
    proc = _serve("--lakehouse", str(tmp_path), "--host", "0.0.0.0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert "serve.host: '0.0.0.0' is not a loopback address" in err and "--allow-remote" in err


def test_serve_with_allow_remote_warns_and_serves_until_sigterm(tmp_path: Path) -> None:
    proc = _serve("--lakehouse", str(tmp_path), "--host", "0.0.0.0", "--allow-remote")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving ") and " at http://0.0.0.0:" in line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as resp:
            assert b"Gold metrics" in resp.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "stopped" in out
    assert "warning: listening on 0.0.0.0, not loopback" in err


def test_a_line_per_request_on_stderr_and_only_the_start_line_on_stdout(tmp_path: Path) -> None:
    proc = _serve("--lakehouse", str(tmp_path), quiet=False)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?day=2024-06-01", timeout=30) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out == "stopped\n"  # after the start line read above
    assert '"GET /?day=2024-06-01 HTTP/1.1" 200' in err


def test_an_empty_gold_table_as_the_gold_jobs_create_it_serves_no_windows(tmp_path: Path) -> None:
    from lakestream.gold import ensure_gold_table

    ensure_gold_table(str(tmp_path / "gold/order_metrics_5m"))
    server = Server(tmp_path)
    try:
        status, _, day = server.get("/api/today?day=2024-06-01")
        assert status == 200 and (day["gold_version"], day["windows"], day["totals"]) == (0, [], None)
        status, _, rows = server.get("/api/metrics?from=2024-06-01&to=2024-06-02")
        assert status == 200 and rows == []
    finally:
        server.close()


def test_a_taken_port_names_the_setting_and_the_fix(tmp_path: Path) -> None:
    import socket

    from lakestream.config import ConfigError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = Config(lakehouse=LakehouseConfig(root=str(tmp_path)), serve=ServeConfig(port=port))
        with pytest.raises(
            ConfigError, match=rf"serve.host/serve.port: cannot listen on 127.0.0.1:{port}.*--port"
        ):
            HttpServer(cfg)
