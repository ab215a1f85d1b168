"""Who resolves which staged work at OPEN, and how: the recovery policy of the exactly-once sink.

Subtask i of parallelism p owns the manifests of every slot j (any run) with ``j % p == i``, so after
any rescale each manifest has exactly one owner. ``plan_open`` decides, without touching the table or
the disk, what becomes of each owned manifest; the writer carries the plan out and then sweeps the
owned slots with ``sweep_leftovers``. The rules and why they are exact: DESIGN.md section 3.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sinks.sink_errors import RestoreBehindTableError
from sinks.staging import Manifest, StagingArea, app_id_for

log = logging.getLogger(__name__)

#: Checkpoint id of the END_OF_INPUT commit (Flink's ``CommittableMessage.EOI`` is Long.MAX_VALUE too).
EOI_CHECKPOINT_ID = 2**63 - 1


@dataclass(frozen=True)
class Ownership:
    """One subtask of one run: its own app id, and the slots whose leftovers it resolves."""

    app_prefix: str
    run_id: str
    subtask: int
    parallelism: int

    @property
    def app_id(self) -> str:
        """Delta txn app id this subtask commits its own work under."""
        return app_id_for(self.app_prefix, self.run_id, self.subtask)

    def owns(self, slot: int) -> bool:
        """Whether manifests staged by subtask ``slot`` (of any run and parallelism) are ours to resolve."""
        return slot % self.parallelism == self.subtask


@dataclass(frozen=True)
class OpenPlan:
    """What OPEN does with the owned manifests, in this order: commit, clean up, abort."""

    #: Same run, prepared, checkpoint <= the restored one: part of a completed checkpoint.
    commit: tuple[Manifest, ...] = ()
    #: Already in the table (txn version >= checkpoint): only the staging leftovers go.
    clean_up: tuple[Manifest, ...] = ()
    #: Pending, newer than the restored checkpoint, or of another run: delete the staged files.
    abort: tuple[Manifest, ...] = ()
    #: This run's end-of-input commit is in the table already: the replayed input must not be staged.
    input_already_committed: bool = False


def plan_open(
    ownership: Ownership,
    restored_checkpoint_id: int | None,
    manifests: Iterable[Manifest],
    txn_version: Callable[[str], int | None],
) -> OpenPlan:
    """Decide OPEN(r) for every owned manifest; ``txn_version`` is the table's txn version of an app id.

    Raises ``RestoreBehindTableError`` when the table holds commits of this subtask's app id beyond r
    (or any, on a fresh start), except for the run's own end-of-input commit.
    """
    r = restored_checkpoint_id
    input_already_committed = False
    own_version = txn_version(ownership.app_id)
    if own_version is not None and (r is None or own_version > r):
        if own_version != EOI_CHECKPOINT_ID:
            raise RestoreBehindTableError(
                app_id=ownership.app_id, restored_checkpoint_id=r, committed_version=own_version
            )
        input_already_committed = True
    commit: list[Manifest] = []
    clean_up: list[Manifest] = []
    abort: list[Manifest] = []
    for m in manifests:
        if not ownership.owns(m.subtask):
            continue
        if m.state == "pending":
            abort.append(m)
        elif m.committed_in(txn_version(m.app_id)):
            clean_up.append(m)
        elif r is not None and m.run_id == ownership.run_id and m.checkpoint_id <= r:
            commit.append(m)
        else:
            abort.append(m)
    return OpenPlan(tuple(commit), tuple(clean_up), tuple(abort), input_already_committed)


def sweep_leftovers(staging: StagingArea, ownership: Ownership) -> None:
    """Delete what owned slots left without a manifest (merge sources, torn manifest temps).

    Only valid once every owned manifest is resolved, i.e. after the OPEN plan ran.
    """
    for root in (staging.manifest_root, staging.staging_root):
        for f in staging.files.list(root):
            parts = f.path[len(root) + 1 :].split("/")  # <run>/<subtask>/<file>
            if len(parts) != 3 or not parts[1].isdigit() or not ownership.owns(int(parts[1])):
                continue
            if root == staging.staging_root or parts[2].endswith(".tmp"):
                log.info("%s: removing leftover %s", ownership.app_id, f.path)
                staging.files.delete(f.path)
    staging.remove_empty_run_dirs(keep_run_id=ownership.run_id)
