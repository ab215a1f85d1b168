"""Typed failures of the exactly-once Delta writer.

Each one names what went wrong and what to do about it, because they surface as Flink task failures in a
log far away from this code: the operator reading them needs the fix, not a stack trace.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakestream.errors import BAD_INPUT, FAILED, LakestreamError


class DeltaSinkError(LakestreamError, RuntimeError):
    """Base class, so the Flink wrapper can tell sink failures from bugs elsewhere."""

    exit_code = FAILED


class MarkerOrderError(DeltaSinkError):
    """A marker arrived that the protocol does not allow at this point (e.g. write before OPEN).

    The Java operator emits markers in a fixed order per subtask, so this means a wiring bug, not bad luck.
    """


class BatchSchemaError(DeltaSinkError):
    """A record batch does not match the writer's schema and cannot be safely cast to it."""


class TableSchemaError(DeltaSinkError):
    """The Delta table exists with a schema or partitioning the writer was not configured for."""

    exit_code = BAD_INPUT


class KeyNullError(DeltaSinkError):
    """A merge/upsert key column holds nulls: such rows can never match and would be inserted each time."""


class CommitConflictError(DeltaSinkError):
    """A Delta commit kept conflicting with concurrent writers and the retry budget is spent.

    Nothing is lost: the staged files and manifests stay on disk, and the next COMMIT or the OPEN after a
    restore commits them (the txn markers make that idempotent).
    """

    def __init__(self, *, app_ids: Sequence[str], checkpoint_id: int, attempts: int, cause: str) -> None:
        self.app_ids = tuple(app_ids)
        self.checkpoint_id = checkpoint_id
        self.attempts = attempts
        super().__init__(
            f"Delta commit for checkpoint {checkpoint_id} (app ids {', '.join(self.app_ids)}) still "
            f"conflicts after {attempts} attempts; last conflict: {cause}. The staged work is kept and will "
            "be committed by the next COMMIT or restore. Fix: when other writers rewrite the table, reduce "
            "concurrent rewrites (OPTIMIZE, other MERGE jobs) of the same partitions; when none do, the log "
            "refused the commit for the reason above (for example a file or folder where the next commit "
            "file of _delta_log goes, or missing write permission): remove that cause."
        )


class StagedFileMissingError(DeltaSinkError):
    """A file this writer staged is gone before it could be committed; committing would corrupt the table."""

    def __init__(self, *, path: str, app_id: str, checkpoint_id: int) -> None:
        self.path = path
        self.app_id = app_id
        self.checkpoint_id = checkpoint_id
        super().__init__(
            f"staged file {path} (app id {app_id}, checkpoint {checkpoint_id}) is missing, so checkpoint "
            f"{checkpoint_id} cannot be committed. Likely cause: a VACUUM (full mode, or a retention shorter "
            "than the checkpoint interval) deleted it as unreferenced, or someone cleaned the table folder. "
            "Fix: keep vacuum retention well above the checkpoint interval; to recover, restart the job from "
            "a checkpoint before the lost data (or from the source) so it is re-staged."
        )


class RestoreBehindTableError(DeltaSinkError):
    """The run already committed checkpoints the restored state does not know about."""

    def __init__(self, *, app_id: str, restored_checkpoint_id: int | None, committed_version: int) -> None:
        self.app_id = app_id
        self.restored_checkpoint_id = restored_checkpoint_id
        self.committed_version = committed_version
        restored = (
            "no checkpoint (fresh start)"
            if restored_checkpoint_id is None
            else (f"checkpoint {restored_checkpoint_id}")
        )
        super().__init__(
            f"restored from {restored}, but the table already holds commits of {app_id} up to checkpoint "
            f"{committed_version}. Replaying would reuse checkpoint ids for different data and commit "
            "some rows twice or skip others (delta-io/connectors#467). Fix: restore from checkpoint "
            f"{committed_version} or later; a fresh start must use a new run id."
        )


class CommittableMissingError(DeltaSinkError):
    """The global committer got a committable whose manifest is gone while the table does not hold it."""

    def __init__(self, *, manifest_path: str, app_id: str, checkpoint_id: int) -> None:
        self.manifest_path = manifest_path
        self.app_id = app_id
        self.checkpoint_id = checkpoint_id
        super().__init__(
            f"committable of {app_id}, checkpoint {checkpoint_id}: its manifest {manifest_path} is gone and "
            "the table has no commit of it. Only the subtask that staged it or its OPEN recovery removes a "
            "manifest, so another job is probably running with the same app prefix (each needs its own), "
            "or someone cleaned the table's _lakestream folder. A committable arrives before its checkpoint "
            "completes, so the restore after this failure starts before it and stages the work again."
        )
