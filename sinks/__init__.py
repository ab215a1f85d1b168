"""Exactly-once sinks: ``sinks.TwoPhaseDeltaWriter`` stages at PRECOMMIT and commits to Delta at COMMIT.

In global commit mode the writer subtasks only stage and hand ``Committable``s to one
``GlobalCommitter``, which commits each checkpoint of all of them in one Delta commit. The protocol,
its invariants and how the modules split it are in DESIGN.md section 3; the MERGE rule they apply is a
``lakestream.merge_spec.MergeSpec`` (DESIGN.md section 2).
"""

from sinks.committable import CommitMode, Committable
from sinks.committer import CommitHooks
from sinks.global_committer import GlobalCommitter
from sinks.sink_errors import (
    CommitConflictError,
    CommittableMissingError,
    DeltaSinkError,
    MarkerOrderError,
    RestoreBehindTableError,
    StagedFileMissingError,
)
from sinks.table_spec import TableSpec
from sinks.writer import EOI_CHECKPOINT_ID, TwoPhaseDeltaWriter
from sinks.writer_metrics import CommitResult, WriterMetrics
from storage.delta_log import COUNTERS_KEY
from storage.retry_policy import RetryPolicy

__all__ = [
    "COUNTERS_KEY",
    "EOI_CHECKPOINT_ID",
    "CommitHooks",
    "CommitConflictError",
    "CommitMode",
    "CommitResult",
    "Committable",
    "CommittableMissingError",
    "DeltaSinkError",
    "GlobalCommitter",
    "MarkerOrderError",
    "RestoreBehindTableError",
    "RetryPolicy",
    "StagedFileMissingError",
    "TableSpec",
    "TwoPhaseDeltaWriter",
    "WriterMetrics",
]
