"""Counters the Flink wrapper exports as task metrics, and what one commit did."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WriterMetrics:
    """Cumulative per writer (one subtask, one table); the wrapper copies them into Flink metrics."""

    rows_committed: int = 0
    files_committed: int = 0
    bytes_committed: int = 0
    commits: int = 0
    #: Commit attempts that conflicted and were re-planned (delta-rs's own silent retries not included).
    commit_retries: int = 0
    #: Manifests found already in the log (txn version >= checkpoint) and only cleaned up.
    already_committed: int = 0
    aborted_manifests: int = 0
    last_commit_latency_s: float = 0.0
    max_commit_latency_s: float = 0.0
    #: Rows written since the last PRECOMMIT (still in memory).
    buffered_rows: int = 0
    #: Staged at PRECOMMIT, waiting for COMMIT.
    staged_rows: int = 0
    staged_files: int = 0
    staged_bytes: int = 0


@dataclass(frozen=True)
class CommitResult:
    """What one Delta commit of this writer contained."""

    committed: bool
    checkpoint_id: int
    rows: int = 0
    files: int = 0
    bytes: int = 0
    retries: int = 0
    latency_s: float = 0.0
    table_version: int | None = None
    #: app id -> checkpoint id recorded as its txn version by this commit.
    app_versions: dict[str, int] = field(default_factory=dict)
    #: The committed manifests' counters, summed (what the commit's ``lakestream.counters`` says).
    counters: dict[str, int] = field(default_factory=dict)
    #: The progress values the commit recorded (``lakestream.progress``), the later checkpoint's winning.
    progress: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.committed:
            return f"checkpoint {self.checkpoint_id}: nothing to commit"
        return (
            f"checkpoint {self.checkpoint_id}: table version {self.table_version}, {self.rows} rows in "
            f"{self.files} files ({self.bytes} bytes), {self.retries} retries, {self.latency_s:.3f}s"
        )
