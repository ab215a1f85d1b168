"""``lakestream maintain`` and ``lakestream tables --version/--as-of`` through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import cli.main as cli
from tests.support.delta_tables import open_writer

SCHEMA = pa.schema([("source", pa.string()), ("id", pa.int64())])


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """bronze/e written by the real sink: 4 checkpoints of 2 rows."""
    w = open_writer(tmp_path / "bronze" / "e", restored=None, schema=SCHEMA, partition_by=["source"])
    for n in range(1, 5):
        w.write(pa.table({"source": ["a", "b"], "id": [2 * n, 2 * n + 1]}, schema=SCHEMA))
        w.prepare(n)
        w.commit(n)
    return tmp_path


def run(lake: Path, *argv: str) -> int:
    return cli.main([*argv, "--lakehouse", str(lake)])


def test_every_operation_takes_the_table_and_the_lakehouse(
    lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(lake, "maintain", "optimize", "bronze/e", "--where", "source = 'a'") == 0
    assert "4 files -> 1 in 1 partition(s)" in capsys.readouterr().out
    assert run(lake, "maintain", "vacuum", "bronze/e") == 0
    out = capsys.readouterr().out
    assert "retention 168h, lite mode" in out and "dry run: 0 file(s)" in out and "allowed" in out
    assert run(lake, "maintain", "checkpoint", "bronze/e") == 0
    assert "written at version 5" in capsys.readouterr().out
    assert run(lake, "maintain", "history", "bronze/e", "--limit", "2") == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert (
        run(lake, "maintain", "properties", "bronze/e", "--set", "delta.logRetentionDuration=interval 9 days")
        == 0
    )
    assert "delta.logRetentionDuration = interval 9 days" in capsys.readouterr().out
    assert run(lake, "maintain", "readers", "bronze/e") == 0
    assert "no Delta-source reader" in capsys.readouterr().out
    assert run(lake, "maintain", "cleanup", "bronze/e") == 0


def test_refusals_exit_2_with_the_reason_and_nothing_changes(
    lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    version = DeltaTable(str(lake / "bronze" / "e")).version()
    assert run(lake, "maintain", "vacuum", "bronze/e", "--retain-hours", "1", "--delete") == 2
    err = capsys.readouterr().err
    assert "vacuum of bronze/e refused" in err and "--force" in err
    assert run(lake, "maintain", "restore", "bronze/e", "--version", "1") == 2
    assert "lakestream maintain: restore of bronze/e to version 1 refused" in capsys.readouterr().err
    assert run(lake, "maintain", "optimize", "bronze/e", "--where", "id = 3") == 2
    assert "'id' is not a partition column" in capsys.readouterr().err
    assert run(lake, "maintain", "history", "silver/none") == 2
    assert "no Delta table at" in capsys.readouterr().err
    assert DeltaTable(str(lake / "bronze" / "e")).version() == version


def test_tables_reads_old_versions(lake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(lake, "tables", "bronze/e", "--version", "2", "--rows", "10") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("bronze/e at version 2 (committed ") and out[0].endswith(": 4 rows")
    assert sorted(out[1:]) == [f"  source={s!r}, id={i}" for s, i in (("a", 2), ("a", 4), ("b", 3), ("b", 5))]
    assert run(lake, "tables", "--as-of", "2000-01-01T00:00:00Z") == 0
    assert "no version at or before 2000-01-01T00:00:00Z" in capsys.readouterr().out
    assert run(lake, "tables", "--as-of", "2999-01-01T00:00:00Z") == 0
    assert "8 rows   version 4" in capsys.readouterr().out
    assert run(lake, "tables", "bronze/e", "--version", "9") == 2
    assert "--version 9: cannot load" in capsys.readouterr().err
    assert run(lake, "tables", "--version", "1") == 2
    assert "versions differ per table" in capsys.readouterr().err
