"""``lakestream demo`` on an object store: what it prints and refuses, without a server."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from demo.live_view import LiveView
from demo.run_demo import local_object_store
from demo.summary import query_hints, shown
from devtools.s3_server import S3Endpoint, S3Status
from lakestream.config import ConfigError, load_config


def test_query_hints_name_the_uris_and_leave_duckdb_out_on_a_store() -> None:
    hints = query_hints("s3://lakestream/demo/")
    assert hints[0].endswith(" tables --lakehouse s3://lakestream/demo")
    assert "DeltaTable('s3://lakestream/demo/silver/orders')" in hints[1]
    assert len(hints) == 2  # DuckDB would need an S3 secret of its own
    assert shown("s3://lakestream/demo", "bronze/order_events") == "s3://lakestream/demo/bronze/order_events"
    assert any("duckdb" in h for h in query_hints("lakehouse/demo"))


def test_the_export_line_holds_no_secret_and_reads_it_from_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "s3.json"
    state.write_text(json.dumps({"secret_key": "the secret"}))
    endpoint = S3Endpoint("http://127.0.0.1:9", "AK", "the secret")
    line = S3Status(running=True, pid=1, endpoint=endpoint, state_file=state).export_line()
    assert "the secret" not in line and "AWS_ACCESS_KEY_ID=AK" in line
    shell = subprocess.run(
        ["bash", "-c", f'{line} && printf %s "$AWS_SECRET_ACCESS_KEY|$AWS_ENDPOINT_URL"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout == "the secret|http://127.0.0.1:9"
    assert shlex.split(line)[0] == "export"


def test_object_store_is_refused_for_a_cluster_before_anything_starts() -> None:
    cfg = load_config(environ={"LAKESTREAM__FLINK__JOBMANAGER": "localhost:8081"})
    with pytest.raises(ConfigError, match="--object-store: .* set lakehouse.root and flink.checkpoint_dir"):
        local_object_store(cfg, LiveView("plain"))
