"""A lakehouse root or checkpoint folder that cannot be written stops every writing command at start.

Exit code 2 and one line that names the setting, its environment variable, the folder, the system's
reason and the fix, before any Kafka or Flink work: the broker address is a port nothing listens on,
which any Kafka request would wait on before a job could start, and nothing appears on disk. The folder
cannot be written because a file stands where a folder of its path should be, which stops root too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cli

pytestmark = pytest.mark.integration
#: No broker listens there: a command that reached Kafka would hang on it, then fail with its error.
CLOSED_BROKER = "127.0.0.1:9"
#: Far below how long a Kafka request to the closed port or a Flink job takes to fail.
TIMEOUT_S = 30

#: Commands that write under lakehouse.root.
ROOT_WRITERS = {
    "ingest": ["ingest", "--bounded"],
    "land": ["land", "--topic", "t", "--table", "raw/t", "--bounded"],
    "changefeed": ["changefeed", "--table", "silver/orders", "--to", "delta:audit/orders", "--polls", "1"],
    "demo": ["demo", "--events", "10", "--produce-seconds", "0", "--progress", "plain"],
    "backfill": ["backfill", "--from", "2024-06-01", "--to", "2024-06-02"],
    "reconcile": ["reconcile", "--from", "2024-06-01", "--to", "2024-06-02"],
    "maintain": ["maintain", "auto", "--once"],
}
#: Commands that keep checkpoints, with the folder each keeps under flink.checkpoint_dir.
CHECKPOINT_WRITERS = {
    "ingest": (ROOT_WRITERS["ingest"], "ingest"),
    "land": (ROOT_WRITERS["land"], "land-raw-t"),
    "changefeed": (ROOT_WRITERS["changefeed"], "changefeed-silver-orders-delta-audit-orders"),
    "demo": (ROOT_WRITERS["demo"], "demo"),
}


def tree(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run(args: list[str], tmp: Path, *, root: Path, checkpoints: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "LAKESTREAM_STATE_DIR": str(tmp / "state"),
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": CLOSED_BROKER,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(root),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(checkpoints),
    }
    return run_cli(*args, env=env, timeout=TIMEOUT_S, check=False)


def a_file(tmp: Path) -> Path:
    """A file where a folder of the path is expected."""
    (tmp / "state").mkdir()
    path = tmp / "afile"
    path.write_text("a file, not a folder")
    return path


def assert_stopped_at_start(
    proc: subprocess.CompletedProcess[str], command: str, setting: str, folder: Path, afile: Path
) -> None:
    """Exit 2, nothing on stdout (no start line, no job output), one line on stderr naming it all."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-4000:]
    variable = "LAKESTREAM__" + setting.upper().replace(".", "__")
    assert lines[0] == (
        f"lakestream {command}: {setting} ({variable}): cannot write to {folder}: Not a directory "
        f"({afile} is a file, not a folder). Fix: set {setting} to a folder this user can create and "
        f"write, or remove or move the file {afile}"
    )


@pytest.mark.parametrize("command", sorted(ROOT_WRITERS))
def test_an_unwritable_lakehouse_root_stops_a_writer_at_start(tmp_path: Path, command: str) -> None:
    tmp = tmp_path.resolve()
    afile = a_file(tmp)
    before = tree(tmp)
    root = afile / "lakehouse"
    proc = run(ROOT_WRITERS[command], tmp, root=root, checkpoints=tmp / "checkpoints")
    assert_stopped_at_start(
        proc, command, "lakehouse.root", root / "demo" if command == "demo" else root, afile
    )
    assert tree(tmp) == before, "nothing may be written: no checkpoint folder, no table, no state"


@pytest.mark.parametrize("command", sorted(CHECKPOINT_WRITERS))
def test_an_unwritable_checkpoint_folder_stops_a_job_at_start(tmp_path: Path, command: str) -> None:
    tmp = tmp_path.resolve()
    afile = a_file(tmp)
    before = tree(tmp)
    args, job = CHECKPOINT_WRITERS[command]
    checkpoints = afile / "checkpoints"
    proc = run(args, tmp, root=tmp / "lakehouse", checkpoints=checkpoints)
    assert_stopped_at_start(proc, command, "flink.checkpoint_dir", checkpoints / job, afile)
    assert tree(tmp) == before, "nothing may be written: no lakehouse folder, no table, no state"


def test_maintenance_checks_the_root_when_it_writes_a_table_there_only(tmp_path: Path) -> None:
    tmp = tmp_path.resolve()
    afile = a_file(tmp)
    before = tree(tmp)
    root = afile / "lakehouse"
    writes = run(["maintain", "optimize", "silver/orders"], tmp, root=root, checkpoints=tmp / "checkpoints")
    assert_stopped_at_start(writes, "maintain", "lakehouse.root", root, afile)
    # Reading is not refused: the table is missing, and that is what it says.
    reads = run(["maintain", "history", "silver/orders"], tmp, root=root, checkpoints=tmp / "checkpoints")
    assert reads.returncode == 2
    assert "no Delta table at" in reads.stderr and "cannot write" not in reads.stderr
    assert tree(tmp) == before
    # A table given as a path of its own is written there, not under the root.
    elsewhere = tmp / "elsewhere"
    outside = run(["maintain", "optimize", str(elsewhere)], tmp, root=root, checkpoints=tmp / "checkpoints")
    assert outside.returncode == 2
    assert "no Delta table at" in outside.stderr and "cannot write" not in outside.stderr
