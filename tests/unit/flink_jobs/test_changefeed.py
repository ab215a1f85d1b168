"""The changefeed job's pure parts: arguments, targets, JSON change events, failure summaries."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from cli.main import build_parser
from flink_jobs.changefeed import ChangefeedTarget, resolve_table
from flink_jobs.changefeed_run import source_failure
from lakestream.config import Config, ConfigError, LakehouseConfig
from sinks.change_events import change_event_json


def test_targets() -> None:
    assert ChangefeedTarget.parse("delta:audit/orders") == ChangefeedTarget("delta", "audit/orders")
    assert ChangefeedTarget.parse("kafka:orders.changes") == ChangefeedTarget("kafka", "orders.changes")
    assert ChangefeedTarget.parse("delta:s3://bucket/t") == ChangefeedTarget("delta", "s3://bucket/t")
    for bad in ("audit/orders", "kafka:", "jdbc:x"):
        with pytest.raises(ConfigError, match="--to: expected delta:PATH"):
            ChangefeedTarget.parse(bad)


def test_tables_resolve_under_the_lakehouse_unless_absolute(tmp_path: Path) -> None:
    cfg = Config(lakehouse=LakehouseConfig(root=str(tmp_path)))
    assert resolve_table(cfg, "silver/orders") == str(tmp_path / "silver" / "orders")
    assert resolve_table(cfg, "/data/t") == "/data/t"
    assert resolve_table(cfg, "s3://b/t") == "s3://b/t"


def test_changefeed_arguments_on_the_cli() -> None:
    parser = build_parser()
    args = parser.parse_args(
        [
            "--config",
            "c.toml",
            "changefeed",
            "--table",
            "silver/orders",
            "--to",
            "kafka:t",
            "--from-version",
            "3",
            "--no-fail-on-data-loss",
            "--polls",
            "5",
        ]
    )
    assert (args.config, args.table, args.to.kind, args.from_version) == (
        Path("c.toml"),
        "silver/orders",
        "kafka",
        3,
    )
    assert (args.fail_on_data_loss, args.polls, args.exactly_once) == (False, 5, True)
    assert (
        parser.parse_args(
            ["changefeed", "--table", "t", "--to", "delta:x", "--from-version", "latest"]
        ).from_version
        == "latest"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["changefeed", "--table", "t", "--to", "delta:x", "--from-version", "soon"])


def test_change_events_are_flat_json_with_the_metadata_fields() -> None:
    ts = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    text = change_event_json(
        ["id", "amount", "day", "raw", "_change_type", "_commit_version", "_commit_timestamp"],
        (7, Decimal("12.30"), dt.date(2024, 5, 1), b"\x00\xff", "update_postimage", 12, ts),
    )
    assert json.loads(text) == {
        "id": 7,
        "amount": "12.30",
        "day": "2024-05-01",
        "raw": "AP8=",
        "_change_type": "update_postimage",
        "_commit_version": 12,
        "_commit_timestamp": "2024-05-01T12:00:00+00:00",
    }


def test_source_failures_are_found_in_a_flink_traceback() -> None:
    text = (
        "py4j...\nCaused by: ...\n  File x\n"
        "sources.source_errors.DataLossError: cannot continue: version 3\n\tat org..."
    )
    assert source_failure(text) == "DataLossError: cannot continue: version 3"
    unsupported = "storage.read_errors.UnsupportedTableError: data file 'x' lies outside the table root"
    assert source_failure(unsupported) == "UnsupportedTableError: data file 'x' lies outside the table root"
    assert source_failure("java.lang.RuntimeException: boom") is None
