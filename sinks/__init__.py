"""Exactly-once sinks: ``sinks.TwoPhaseDeltaWriter`` stages at PRECOMMIT and commits to Delta at COMMIT.

The protocol, its invariants and how the modules split it are in DESIGN.md section 3; ``sinks.merge_spec``
defines how MERGE folds out-of-order changes with per-column event-time guards.
"""

from sinks.committer import CommitHooks
from sinks.errors import (
    CommitConflictError,
    DeltaSinkError,
    MarkerOrderError,
    RestoreBehindTableError,
    StagedFileMissingError,
)
from sinks.merge_spec import MergeSpec
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
    "MergeSpec",
    "RestoreBehindTableError",
    "RetryPolicy",
    "StagedFileMissingError",
    "TwoPhaseDeltaWriter",
    "WriterMetrics",
]
