"""Bad input to the CLI fails fast, before any record moves, with the key and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "LAKESTREAM_STATE_DIR": str(tmp_path / "state"), **env}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_unknown_partition_column_names_the_setting(tmp_path):
    env = {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "LAKESTREAM__LAKEHOUSE__ROOT": str(tmp_path / "lake"),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__TABLES__BRONZE_PARTITION_BY": '["event_date"]',
    }
    proc = run(["ingest"], env, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "tables.bronze_partition_by: event_date not a column of bronze/order_events" in proc.stderr
    assert not (tmp_path / "lake").exists(), "nothing may be written before the configuration is valid"


def test_embedded_broker_not_running_names_the_command(tmp_path):
    proc = run(["land", "--topic", "t", "--table", "raw/t"], {}, tmp_path)
    assert proc.returncode == 2
    assert "lakestream kafka start" in proc.stderr


def test_config_typo_names_the_key(tmp_path):
    proc = run(["tables"], {"LAKESTREAM__FLINK__PARALELISM": "2"}, tmp_path)
    assert proc.returncode == 2
    assert "paralelism" in proc.stderr and "known keys" in proc.stderr


def test_thread_mode_is_refused_before_anything_runs(tmp_path):
    env = {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "LAKESTREAM__LAKEHOUSE__ROOT": str(tmp_path / "lake"),
        "LAKESTREAM__FLINK__PYTHON_EXECUTION_MODE": "thread",
    }
    proc = run(["ingest"], env, tmp_path)
    assert proc.returncode == 2
    assert "python_execution_mode = 'thread' is not supported yet" in proc.stderr
