"""``lakestream query metrics`` on real Delta tables: the three formats, ``--as-of``, bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.metrics_format import COLUMNS
from tests.support import gold_scenario
from tests.support.cli import ROOT, run_cli
from tests.support.gold_scenario import Scenario


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return gold_scenario.write(tmp_path_factory.mktemp("lakehouse"))


def _root(s: Scenario) -> str:
    return s.root


def _query(s: Scenario, *args: str) -> str:
    return run_cli("query", "metrics", "--lakehouse", _root(s), *args).stdout


def _fails(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "query", "metrics", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    return proc


def _brief(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(r["window_start"], r["layer"], r["events"], r["gmv"], r["day_gmv"]) for r in rows]


def test_json_is_one_array_of_gold_rows_batch_first_with_the_days_running_totals(scenario: Scenario) -> None:
    rows = json.loads(
        _query(scenario, "--from", "2024-06-01T00:20:00Z", "--to", "2024-06-01T00:40", "--format", "json")
    )
    assert _brief(rows) == gold_scenario.expected_v2(4, 8)
    assert list(rows[0]) == list(COLUMNS)
    batch, realtime = rows[1], rows[2]
    assert batch == {
        "window_start": "2024-06-01T00:25:00Z",
        "window_end": "2024-06-01T00:30:00Z",
        "events": 6,
        "orders_created": 2,
        "payments": 1,
        "gmv": "11.11",
        "active_users": 3,
        "layer": "batch",
        "data_time": "2024-06-01T00:30:00Z",
        "source_version": 41,
        "updated_at": "2024-06-01T00:30:01Z",
        "day_events": 36,
        "day_orders_created": 12,
        "day_payments": 6,
        "day_gmv": "66.66",
    }
    assert realtime["layer"] == "realtime" and realtime["source_version"] is None


def test_json_of_a_range_without_rows_is_an_empty_array(scenario: Scenario) -> None:
    out = _query(scenario, "--from", "2024-06-02", "--to", "2024-06-03", "--format", "json")
    assert json.loads(out) == []


def test_csv_has_a_header_and_the_same_rows_as_json(scenario: Scenario) -> None:
    args = ("--from", "2024-05-31T23:00", "--to", "2024-06-01T01:00")
    text = _query(scenario, *args, "--format", "csv")
    as_json = json.loads(_query(scenario, *args, "--format", "json"))
    header, *lines = list(csv.reader(io.StringIO(text)))
    assert tuple(header) == COLUMNS
    expected = [[("" if v is None else str(v)) for v in r.values()] for r in as_json]
    assert lines == expected
    assert len(lines) == 13  # 23:55 on May 31 and the twelve windows of 00:00-01:00
    assert lines[0][COLUMNS.index("day_gmv")] == "10.00"  # May 31 has its own total
    assert lines[1][COLUMNS.index("day_gmv")] == "11.11"  # June 1 starts again


def test_the_table_lists_every_window_empty_ones_as_zero(scenario: Scenario) -> None:
    text = _query(scenario, "--from", "2024-06-01T00:55", "--to", "2024-06-01T01:20")
    lines = {line.split()[1]: line.split() for line in text.splitlines() if line.startswith(" 2024-06-01 ")}
    assert lines["00:55-01:00"][2:4] == ["realtime", "8"]
    assert lines["01:05-01:10"][-1] == "226.66"  # 6 x 11.11 + 8 x 20.00
    empty = lines["01:10-01:15"]
    assert empty[2:8] == ["-", "0", "0", "0", "0.00", "0"]
    assert empty[-1] == "226.66"  # the day's total carried through the empty window
    assert "batch through 2024-06-01T00:30:00Z" not in text  # no batch window in this range
    assert "3 of 5 windows" in text


def test_as_of_a_version_reads_that_version(scenario: Scenario) -> None:
    args = ("--from", "2024-06-01T00:25", "--to", "2024-06-01T00:35", "--format", "json")
    v0 = json.loads(_query(scenario, *args, "--as-of", "0"))
    v1 = json.loads(_query(scenario, *args, "--as-of", "1"))
    assert [(r["layer"], r["gmv"], r["day_gmv"]) for r in v0] == [
        ("realtime", "10.00", "60.00"),
        ("realtime", "10.00", "70.00"),
    ]
    assert [(r["layer"], r["gmv"], r["day_gmv"]) for r in v1] == [
        ("batch", "11.11", "66.66"),
        ("realtime", "10.00", "76.66"),
    ]


def test_as_of_a_time_reads_the_newest_version_committed_by_then(scenario: Scenario) -> None:
    from datetime import datetime, timezone

    at_v1 = datetime.fromtimestamp(scenario.committed_ms[1] / 1000 + 0.01, tz=timezone.utc)
    args = ("--from", "2024-06-01T00:25", "--to", "2024-06-01T00:35", "--format", "json")
    rows = json.loads(_query(scenario, *args, "--as-of", at_v1.isoformat()))
    assert [r["gmv"] for r in rows] == ["11.11", "10.00"]


def test_bad_times_name_the_flag_and_the_forms(scenario: Scenario) -> None:
    root = ("--lakehouse", _root(scenario))
    err = _fails(*root, "--from", "yesterday", "--to", "2024-06-02").stderr
    assert "--from 'yesterday': not an ISO 8601 date or time; use 2024-06-01" in err
    err = _fails(*root, "--from", "2024-06-02", "--to", "2024-06-01").stderr
    assert "--to '2024-06-01' must be after --from '2024-06-02'" in err
    err = _fails(*root, "--from", "2024-06-01", "--to", "2024-06-02", "--as-of", "last week").stderr
    assert "--as-of 'last week': expected a table version" in err
    err = _fails(*root, "--from", "2024-06-01", "--to", "2024-06-02", "--as-of", "99").stderr
    assert "--as-of 99: cannot load" in err and "versions go from the oldest retained commit to 2" in err
    err = _fails(*root, "--from", "2024-06-01", "--to", "2024-06-02", "--as-of", "2001-01-01").stderr
    assert "--as-of 2001-01-01T00:00:00Z" in err
    err = _fails(*root, "--from", "2024-06-01", "--to", "2024-06-02", "--format", "xml").stderr
    assert "--format: invalid choice: 'xml'" in err


def test_no_gold_table_says_where_it_looked(tmp_path: Path) -> None:
    err = _fails("--lakehouse", str(tmp_path), "--from", "2024-06-01", "--to", "2024-06-02").stderr
    assert f"no gold table at {tmp_path / 'gold' / 'order_metrics_5m'}" in err
