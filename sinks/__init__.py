"""Exactly-once sinks: ``sinks.TwoPhaseDeltaWriter`` stages at PRECOMMIT and commits to Delta at COMMIT.

The protocol, its invariants and how the modules split it are in DESIGN.md section 3; the MERGE rule
they apply is a ``lakestream.merge_spec.MergeSpec`` (DESIGN.md section 2).
"""

from sinks.committer import CommitHooks
from sinks.errors import (
    CommitConflictError,
    DeltaSinkError,
    MarkerOrderError,
    RestoreBehindTableError,
    StagedFileMissingError,
)
from sinks.retry_policy import RetryPolicy
from sinks.writer import EOI_CHECKPOINT_ID, TwoPhaseDeltaWriter
from sinks.writer_metrics import CommitResult, WriterMetrics

__all__ = [
    "EOI_CHECKPOINT_ID",
    "CommitHooks",
    "CommitConflictError",
    "CommitResult",
    "DeltaSinkError",
    "MarkerOrderError",
    "RestoreBehindTableError",
    "RetryPolicy",
    "StagedFileMissingError",
    "TwoPhaseDeltaWriter",
    "WriterMetrics",
]
