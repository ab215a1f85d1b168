"""Running the ingest job as a user would, for integration tests: topics, an unbounded run, waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from devtools.kafka_broker import create_topic
from lakestream.config import load_config
from lakestream.table_names import SILVER_CHANGES_TABLE, SILVER_TABLE
from merge_on_read.table import read_current, silver_mor_table
from tests.support.delta_tables import lakehouse_env

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("orders_db", "payments", "logistics", "behaviour")


def table_rows(lakehouse: Path, table: str) -> int:
    """Rows committed to ``table`` so far; 0 before its first commit (its folder may not exist yet).

    ``silver/orders`` kept merge-on-read (it has a changes table) counts its current rows: the snapshot
    and the changes read as one, as readers see it.
    """
    if table == SILVER_TABLE and (lakehouse / SILVER_CHANGES_TABLE / "_delta_log").is_dir():
        cfg = load_config(None, environ={"LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse)})
        return read_current(silver_mor_table(cfg)).num_rows
    if not (lakehouse / table / "_delta_log").is_dir():
        return 0
    try:
        return int(DeltaTable(str(lakehouse / table)).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def setup_topics(
    kafka: str, tmp_path: Path, lakehouse: Path, *, partitions: int = 3
) -> tuple[dict[str, str], dict[str, str]]:
    """Fresh topics (``partitions`` each) and the job's environment overrides."""
    run = f"ingest{int(time.time() * 1000) % 10**8}"
    topics = {s: f"{run}.{s}" for s in SOURCES}
    for topic in topics.values():
        create_topic(kafka, topic, partitions=partitions)
    env = {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "LAKESTREAM__KAFKA__GROUP_ID": run,
        **{f"LAKESTREAM__KAFKA__TOPICS__{s.upper()}": t for s, t in topics.items()},
        **lakehouse_env(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"1s"',
        "LAKESTREAM__FLINK__PARALLELISM": "2",
        "LAKESTREAM__EVENT_TIME__MAX_OUT_OF_ORDERNESS": '"30m"',
    }
    return topics, env


def old_tree(commit: str, dest: Path) -> Path:
    """The source tree of ``commit`` (this repository's history) in ``dest``, its jar built like
    ``make jvm`` does: an earlier version to take a checkpoint that the current one must restore."""
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run(
        ["mvn", "-q", "-B", "-o", "-f", str(dest / "jvm" / "pom.xml"), "package", "-DskipTests"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return dest


def start_unbounded(env: dict[str, str], log: Path, *, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """``lakestream ingest`` (unbounded) of the source tree ``cwd`` (default: this one)."""
    return start_ingest(env, log, cwd=cwd)


def start_ingest(env: dict[str, str], log: Path, *flags: str, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """``lakestream ingest FLAGS`` of the source tree ``cwd`` in the background, output into ``log``."""
    # Trees from before the ``cli`` package ran the CLI as ``python -m flink_jobs``.
    entry = "cli" if (cwd / "cli" / "__main__.py").exists() else "flink_jobs"
    return subprocess.Popen(
        [sys.executable, "-m", entry, "ingest", *flags],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the MiniCluster JVM and Python workers die with it
    )


def wait_for(
    lakehouse: Path, counts: dict[str, int], proc: subprocess.Popen[bytes], log: Path, timeout: float = 150
) -> None:
    """Until every table has at least its count of committed rows (the job keeps running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(table_rows(lakehouse, t) >= n for t, n in counts.items()):
            return
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)
    got = {t: table_rows(lakehouse, t) for t in counts}
    raise AssertionError(f"tables {got}, expected {counts}\n{log.read_text()[-4000:]}")


def completed_checkpoint(checkpoint_dir: Path) -> int:
    """The highest id of a checkpoint whose ``_metadata`` Flink wrote under ``checkpoint_dir`` (at any
    depth: lineage / job id / ``chk-N`` today), 0 when there is none. Ids go on across restores."""
    ids = [int(p.parent.name.removeprefix("chk-")) for p in checkpoint_dir.rglob("chk-*/_metadata")]
    return max(ids, default=0)


def wait_for_checkpoints(
    checkpoint_dir: Path, more: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60
) -> int:
    """Until ``more`` checkpoints completed after the newest one now (the evidence that the job went on
    committing, e.g. that nothing was added twice), while the job runs; the id reached."""
    target = completed_checkpoint(checkpoint_dir) + more
    deadline = time.monotonic() + timeout
    while (reached := completed_checkpoint(checkpoint_dir)) < target:
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        if time.monotonic() > deadline:
            there = sorted(str(p.relative_to(checkpoint_dir)) for p in checkpoint_dir.rglob("*"))
            raise AssertionError(
                f"checkpoint {target} did not complete within {timeout:.0f}s (newest: {reached}; under "
                f"{checkpoint_dir}: {there[:30]})\n{log.read_text()[-4000:]}"
            )
        time.sleep(0.2)
    return reached
