"""``lakestream demo`` as a user runs it: its own broker, the job on a MiniCluster, live progress, the end
summary, the HTML report, exact tables; and Ctrl-C mid-run leaving no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from demo.event_feed import plan
from devtools.processes import kill_group, pids_with_env
from devtools.s3_server import status_detached, stop_detached
from devtools.sample_events import SampleSettings, generate
from lakestream.config import load_config
from storage.delta_log import END_OF_INPUT
from tests.support.silver_oracle import FIELDS as RESOLVED
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EVENTS = 2000
#: The object-store variant: enough for late events, duplicates and several checkpoints.
STORE_EVENTS = 600
MARK = "LAKESTREAM_DEMO_TEST"
#: The speed layer's table (``gold.table``), written by the demo's ingest.
GOLD = "gold/order_metrics_5m"
LINE = re.compile(r"^\[\s*(\d+)s\] (\S.*?) \| produced (\d+)/(\d+) \| rows: bronze (\d+) ")


def _env(tmp_path: Path, mark: str) -> dict[str, str]:
    return {
        **os.environ,
        "LAKESTREAM_STATE_DIR": str(tmp_path / "state"),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        MARK: mark,
    }


def _start(tmp_path: Path, mark: str, *args: str) -> subprocess.Popen[str]:
    where = [] if "--object-store" in args else ["--lakehouse", str(tmp_path / "lake")]
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "demo", *where, *args],
        cwd=ROOT,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell runs a foreground command
    )


@pytest.fixture
def mark() -> Iterator[str]:
    """A marker in the demo's environment: every process it starts inherits it."""
    value = uuid.uuid4().hex
    yield value
    for pid in pids_with_env(MARK, value):  # never leave one behind, whatever the test's outcome
        os.kill(pid, signal.SIGKILL)


def _read(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return rows


def _expected_late(
    records: list[Any], sample: list[Any], max_out_of_orderness_ms: int
) -> set[tuple[str, int, int]]:
    """Late per the rule of DESIGN.md section 2, computed here from the partitions' contents."""
    newest: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], int] = {}
    late = set()
    for rec, ev in zip(records, sample, strict=True):
        part = (rec.topic, rec.partition)
        offset = offsets.get(part, 0)
        offsets[part] = offset + 1
        if ev.malformed:
            continue
        ms = int(ev.event_time.timestamp() * 1000)
        if part in newest and ms <= newest[part] - max_out_of_orderness_ms - 1:
            late.add((rec.topic, rec.partition, offset))
        newest[part] = max(newest.get(part, ms), ms)
    return late


class _Report(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ident = dict(attrs).get("id")
        if tag == "script" and ident:
            self._in = ident
            self.scripts[ident] = ""

    def handle_data(self, data: str) -> None:
        if self._in:
            self.scripts[self._in] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in = None


def _run_demo(tmp_path: Path, mark: str, *args: str) -> str:
    """Run the demo to its end; its output, once it exited 0 and left no process of its own."""
    started = time.monotonic()
    proc = _start(tmp_path, mark, *args)
    try:
        out, err = proc.communicate(timeout=420)
    finally:
        kill_group(proc)
    print(f"demo took {time.monotonic() - started:.1f}s")
    assert proc.returncode == 0, f"demo exited {proc.returncode}\n{out[-6000:]}\n{err[-6000:]}"

    # Live progress (plain lines: stdout is not a terminal): rows were committed while events still came.
    lines = [m.groups() for m in map(LINE.match, out.splitlines()) if m]
    assert len(lines) >= 3, out
    produced = [int(p) for _, _, p, _, _ in lines]
    assert produced == sorted(produced)
    assert any(0 < int(b) and int(p) < int(total) for _, _, p, total, b in lines), out
    assert lines[-1][1] == "done"
    return out


def _check_tables(read: Callable[[str], list[dict[str, Any]]], events: int) -> dict[str, int]:
    """The demo's tables (``read(name)``: its rows) hold exactly the sample of ``events``; their counts."""
    cfg = load_config(None)
    sample = generate(SampleSettings(orders=events // 6, source_zone=cfg.event_time.source_zone))
    records = plan(sample, dict(cfg.kafka.topics), dict.fromkeys(cfg.kafka.topics.values(), 2))
    coords: list[tuple[str, int, int]] = []
    next_offset: dict[tuple[str, int], int] = {}
    for r in records:
        o = next_offset.get((r.topic, r.partition), 0)
        next_offset[(r.topic, r.partition)] = o + 1
        coords.append((r.topic, r.partition, o))

    # Exact tables: every record at its planned coordinates, in bronze or quarantine.
    bronze = {(r["topic"], r["partition"], r["offset"]): r for r in read("bronze/order_events")}
    quarantine = {(r["topic"], r["partition"], r["offset"]): r for r in read("quarantine/order_events")}
    assert {c: bronze[c]["raw"] for c in bronze} == {
        c: r.value for c, r, ev in zip(coords, records, sample, strict=True) if not ev.malformed
    }
    assert {c: quarantine[c]["raw"] for c in quarantine} == {
        c: r.value for c, r, ev in zip(coords, records, sample, strict=True) if ev.malformed
    }
    assert read("review/order_events") == []
    late = {(r["topic"], r["partition"], r["offset"]) for r in read("late/order_events")}
    limit_ms = int(cfg.event_time.max_out_of_orderness.total_seconds() * 1000)
    assert late == _expected_late(records, sample, limit_ms) != set()
    silver_rows = read("silver/orders")
    silver = {r["order_id"]: {f: r[f] for f in RESOLVED if r[f] is not None} for r in silver_rows}
    assert len(silver) == len(silver_rows)
    assert silver == expected_silver(sample)
    return {
        "bronze/order_events": len(bronze),
        "quarantine/order_events": len(quarantine),
        "review/order_events": 0,
        "late/order_events": len(late),
        "silver/orders": len(silver),
    }


def _check_summary(out: str, counts: dict[str, int], versions: dict[str, int], where: str) -> None:
    """The end summary: each table with its rows, version and path (ending ``<where><name>``), and how
    to query them."""
    for name, rows in counts.items():
        path = re.escape(where + name)
        pattern = rf"│ {re.escape(name)}\s+│\s+{rows:,} │\s+{versions[name]} │ .*{path}"
        assert re.search(pattern, out), out
    assert "tables --lakehouse" in out and "DeltaTable(" in out


def _check_report(page: str, read: Callable[[str], list[dict[str, Any]]], counts: dict[str, int]) -> None:
    """The report: a page whose embedded numbers are the tables' numbers."""
    parser = _Report()
    parser.feed(page)
    data = json.loads(parser.scripts["report-data"])
    gold = sorted(read(GOLD), key=lambda r: r["window_start"])
    assert {name: t["rows"] for name, t in data["tables"].items()} == {
        **counts,
        GOLD: len(gold),
    }
    hist = data["lateness"]["histogram"]
    bronze = counts["bronze/order_events"]
    assert sum(hist["on_time"]) + sum(hist["late"]) == bronze == data["lateness"]["valid_events"]
    assert sum(hist["late"]) == counts["late/order_events"]
    assert sum(p["rows"] for p in data["commits"]["bronze/order_events"]) == bronze
    assert data["commits"]["bronze/order_events"][-1]["checkpoint"] == "end of input"
    assert len(data["commits"]["bronze/order_events"]) >= 3  # several checkpoints, not one commit at the end
    figure = json.loads(parser.scripts["lateness-figure"])
    assert [t["y"] for t in figure["data"]] == [hist["on_time"], hist["late"]]
    # The speed layer ran inside the demo's ingest: the page's gold series are the table's realtime rows.
    assert gold and {r["layer"] for r in gold} == {"realtime"}
    assert set(data["gold"]) == {"realtime"}
    assert data["gold"]["realtime"]["window_start"] == [r["window_start"].isoformat() for r in gold]
    assert data["gold"]["realtime"]["events"] == [r["events"] for r in gold]


def test_demo_shows_progress_and_ends_with_exact_tables_a_summary_and_a_report(
    tmp_path: Path, mark: str
) -> None:
    out = _run_demo(tmp_path, mark, "--events", str(EVENTS), "--produce-seconds", "15")
    assert pids_with_env(MARK, mark) == [], "the demo left processes behind"
    root = tmp_path / "lake" / "demo"

    def read(name: str) -> list[dict[str, Any]]:
        return _read(root / name)

    counts = _check_tables(read, EVENTS)
    listed = {**counts, GOLD: len(read(GOLD))}  # the closing table lists gold too
    versions = {name: DeltaTable(str(root / name)).version() for name in listed}
    _check_summary(out, listed, versions, "")
    assert f"Report: {root / 'report.html'}" in out
    assert "duckdb" in out
    _check_report((root / "report.html").read_text(encoding="utf-8"), read, counts)


def test_demo_on_the_local_object_store_writes_the_same_tables_and_checkpoints_there(
    tmp_path: Path, mark: str
) -> None:
    state = tmp_path / "state"
    try:
        out = _run_demo(
            tmp_path, mark, "--object-store", "--events", str(STORE_EVENTS), "--produce-seconds", "12"
        )
        # The demo's S3 server is `lakestream s3 start`'s, and it keeps running for the printed commands.
        server = status_detached(state_file=state / "s3.json")
        assert server.running and server.endpoint is not None
        assert set(pids_with_env(MARK, mark)) <= {server.pid}, "the demo left processes behind"
        root = "s3://lakestream/demo"
        options = server.storage_options()

        def read(name: str) -> list[dict[str, Any]]:
            table = DeltaTable(f"{root}/{name}", storage_options=options)
            rows: list[dict[str, Any]] = table.to_pyarrow_table().to_pylist()
            return rows

        counts = _check_tables(read, STORE_EVENTS)
        listed = {**counts, GOLD: len(read(GOLD))}
        versions = {n: DeltaTable(f"{root}/{n}", storage_options=options).version() for n in listed}
        _check_summary(out, listed, versions, f"{root}/")
        assert "duckdb" not in out
        secret = server.endpoint.secret_key
        assert secret not in out and secret not in (state / "logs" / "demo-flink.log").read_text()
        # Checkpoints went to the store, none to the local checkpoint folder: the commits rode on
        # checkpoints (txn versions below end of input), and a run that ended by itself may have removed
        # its lineage from the store already, so its folder is evidence only while it is there.
        checkpoints = state / "s3" / "buckets" / "lakestream" / "checkpoints" / "demo"
        history = DeltaTable(f"{root}/bronze/order_events", storage_options=options).history()
        rode = [
            v for h in history for v in (h.get("lakestream.appVersions") or {}).values() if v < END_OF_INPUT
        ]
        kept = checkpoints.is_dir() and [p.name for p in checkpoints.iterdir() if p.is_dir()]
        assert rode or kept, "no commit rode on a checkpoint and none is on the S3 server"
        assert not (tmp_path / "checkpoints").exists()
        report = state / "demo" / "report.html"
        assert f"Report: {report}" in out
        _check_report(report.read_text(encoding="utf-8"), read, counts)

        # The printed commands, as a user pastes them: the export line (the secret read from the state
        # file), then `lakestream tables` on the bucket.
        export = next(line.strip() for line in out.splitlines() if line.strip().startswith("export "))
        tables = next(line.strip() for line in out.splitlines() if "tables --lakehouse s3://" in line)
        clean = {k: v for k, v in _env(tmp_path, mark).items() if not k.startswith("AWS_")}
        listed = subprocess.run(
            ["bash", "-c", f"{export} && {tables}"], cwd=ROOT, env=clean, capture_output=True, text=True
        )
        assert listed.returncode == 0, listed.stderr
        for name, rows in counts.items():
            line = rf"^  {re.escape(name)}\s+{rows} rows   version {versions[name]}\b"
            assert re.search(line, listed.stdout, re.M), listed.stdout
    finally:
        stop_detached(state_file=state / "s3.json")
    assert pids_with_env(MARK, mark) == []


def _kinds(pids: list[int]) -> set[str]:
    kinds = set()
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "kafka.Kafka" in cmd:
            kinds.add("broker")
        elif "java" in cmd.split(" ", 1)[0] and "pyflink" in cmd:
            kinds.add("minicluster")
        elif "beam_boot" in cmd or "fn_execution" in cmd:
            kinds.add("python worker")
    return kinds


def test_ctrl_c_mid_run_leaves_no_process_and_exits_130(tmp_path: Path, mark: str) -> None:
    proc = _start(tmp_path, mark, "--events", str(EVENTS), "--produce-seconds", "60")
    first_data = tmp_path / "lake" / "demo" / "bronze/order_events" / "_delta_log" / f"{1:020d}.json"
    try:
        deadline = time.monotonic() + 300
        while not first_data.exists():
            assert proc.poll() is None, f"demo ended early: {proc.communicate()}"
            if time.monotonic() > deadline:
                kill_group(proc)
                out, err = proc.communicate()
                log = tmp_path / "state" / "logs" / "demo-flink.log"
                tail = log.read_text()[-4000:] if log.exists() else "(no job log)"
                raise AssertionError(f"no commit within 300 s\n{out[-3000:]}\n{err[-3000:]}\n{tail}")
            time.sleep(0.5)
        running = pids_with_env(MARK, mark)
        assert {"broker", "minicluster", "python worker"} <= _kinds(running), running

        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends its foreground group on Ctrl-C
        interrupted = time.monotonic()
        out, err = proc.communicate(timeout=90)
        took = time.monotonic() - interrupted
    finally:
        kill_group(proc)
    print(f"demo ended {took:.1f}s after SIGINT")
    assert proc.returncode == 130, f"{out[-3000:]}\n{err[-3000:]}"
    last = err.strip().splitlines()[-1]
    assert last.startswith("lakestream demo: interrupted (SIGINT)") and "no process left behind" in last, err
    assert "Traceback" not in err
    assert pids_with_env(MARK, mark) == [], "processes of the demo are still running"
    assert "Done in" not in out and not (tmp_path / "lake" / "demo" / "report.html").exists()


def test_a_failing_job_ends_the_demo_with_its_cause_and_no_process_left(tmp_path: Path, mark: str) -> None:
    # Valid for the configuration as a whole; the job refuses it when it builds its sinks.
    env = {**_env(tmp_path, mark), "LAKESTREAM__TABLES__BRONZE_PARTITION_BY": '["no_such_column"]'}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "demo",
            "--lakehouse",
            str(tmp_path / "lake"),
            "--events",
            "300",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert proc.returncode == 1, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "lakestream demo: job failed: the ingest job exited with code 2" in proc.stderr
    assert "tables.bronze_partition_by: no_such_column not a column of bronze/order_events" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert pids_with_env(MARK, mark) == []
