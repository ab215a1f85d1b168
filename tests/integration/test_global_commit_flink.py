"""Global commit mode in a real MiniCluster: two writer subtasks, one committer, a failure mid-stream."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.integration

JOB = Path(__file__).resolve().parent / "jobs" / "global_commit_job.py"
ROOT = Path(__file__).resolve().parents[2]
EOI = 2**63 - 1


def test_two_writers_one_committer_through_a_failure(tmp_path: Path) -> None:
    rows = 3000
    uri = str(tmp_path / "t")
    marker = tmp_path / "failed.marker"
    logs = tmp_path / "flink-log"  # its own: PyFlink's default log file is overwritten by every local JVM
    proc = subprocess.run(
        [sys.executable, str(JOB), uri, str(tmp_path / "ckpt"), str(rows), "600", str(marker)],
        cwd=ROOT,
        env={**os.environ, "FLINK_LOG_DIR": str(logs)},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    if proc.returncode != 0:
        jvm = "".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
        pytest.fail(f"{proc.stderr[-6000:]}\n--- the JVM's log, last part ---\n{jvm[-20000:]}")
    assert marker.exists(), "the injected failure never happened; the test proved nothing"

    dt = DeltaTable(uri)
    ids = dt.to_pyarrow_table()["id"].to_pylist()
    assert sorted(ids) == list(range(rows)), "rows lost or written twice"
    history = [h for h in reversed(dt.history()) if h["operation"] != "CREATE TABLE"]  # oldest first
    # The rows staged per checkpoint, counted by the writers and summed by the commits: exactly once,
    # although the failed attempt counted (and staged) some of them before the restore replayed them.
    counted: Counter[str] = Counter()
    for h in history:
        counted.update(h.get("lakestream.counters") or {})
    assert counted == {"rows": rows}
    # One commit per checkpoint, carrying the txn action of every subtask that staged in it (both, unless
    # one had nothing that checkpoint on a loaded machine, or a subtask's OPEN recovery committed alone).
    versions = [h["lakestream.appVersions"] for h in history]
    both = [v for v in versions if len(v) == 2]
    assert len(both) >= 3, versions
    assert all(len(set(v.values())) == 1 for v in both), versions
    assert set(versions[-1].values()) == {EOI}  # the end-of-input commit
