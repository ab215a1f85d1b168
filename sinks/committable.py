"""What a writer subtask in global-commit mode hands downstream: where to find one prepared manifest.

In global-commit mode (``TwoPhaseDeltaWriter(commit_mode="global")``) a subtask stages at PRECOMMIT(n)
as usual but does not commit; it emits a ``Committable`` naming the manifest, and one
``sinks.global_committer.GlobalCommitter`` (parallelism 1) commits every subtask's work of a checkpoint
in one Delta commit. The committable is only a pointer: the manifest on disk stays the record, which is
what lets the subtasks' OPEN recovery commit or abort it when the committer's attempt is gone
(DESIGN.md section 3).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from sinks.staging import Manifest, StagingArea

#: Who commits a table's staged work: each subtask at COMMIT(n), or one global committer.
CommitMode = Literal["subtask", "global"]
COMMIT_MODES: tuple[CommitMode, ...] = ("subtask", "global")


class Committable(NamedTuple):
    """One prepared manifest of one subtask and checkpoint (field order = the Flink row's)."""

    table_uri: str
    app_prefix: str
    run_id: str
    subtask: int
    checkpoint_id: int
    #: The manifest's path relative to the table root.
    manifest_path: str

    @classmethod
    def of(cls, manifest: Manifest, *, table_uri: str, staging: StagingArea) -> Committable:
        """The committable of a prepared ``manifest`` staged in ``staging``."""
        if manifest.state != "prepared":
            raise ValueError(f"only a prepared manifest is a committable, got a {manifest.state} one")
        return cls(
            table_uri=table_uri,
            app_prefix=manifest.app_prefix,
            run_id=manifest.run_id,
            subtask=manifest.subtask,
            checkpoint_id=manifest.checkpoint_id,
            manifest_path=staging.manifest_path(manifest.run_id, manifest.subtask, manifest.checkpoint_id),
        )

    @property
    def key(self) -> tuple[str, int, int]:
        """(run id, subtask, checkpoint): one manifest slot of the app prefix."""
        return (self.run_id, self.subtask, self.checkpoint_id)

    def matches(self, manifest: Manifest) -> bool:
        """Whether ``manifest`` is the one this committable names."""
        return (manifest.app_prefix, manifest.run_id, manifest.subtask, manifest.checkpoint_id) == (
            self.app_prefix,
            self.run_id,
            self.subtask,
            self.checkpoint_id,
        )
