"""Where the next run of a job starts: its newest lineage's checkpoint, or the position its output recorded.

A *lineage* is a line of runs sharing one sink run id, kept under ``<flink.checkpoint_dir>/<job>/<run id>/``
(``lineage.json`` and its Flink checkpoints); the CLI picks the run id of a fresh start. A run that
ends by itself leaves no checkpoint, so its output's committed position (``lakestream.progress``) is
the record. :func:`plan_start` chooses between restoring the newest lineage's checkpoint, completing an
unfinished bounded lineage, settling a killed unbounded one into the tables, and a new lineage at the
recorded position. The rules and their order: DESIGN.md section 9.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from lakestream.progress import ResumeError
from runtime.flink_env import latest_checkpoint
from sinks.ownership import EOI_CHECKPOINT_ID
from sinks.staging import app_id_for
from storage.local_files import atomic_write_text

log = logging.getLogger(__name__)

LINEAGE_FILE = "lineage.json"
LINEAGE_FORMAT = 1
#: Name prefix of a folder renamed aside to be removed.
_TRASH = ".removing-"


def new_run_id() -> str:
    """A fresh lineage's run id (hex, like the Flink job ids earlier versions used)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lineage:
    """One lineage of a job: ``lineage.json`` in its folder."""

    folder: Path
    #: The sinks' run id; None for a lineage continued from a checkpoint of an earlier version's layout
    #: (its run id is only in the checkpoint's state).
    run_id: str | None
    #: Whether its current run ends by itself (``--bounded``, ``--polls``).
    bounded: bool
    #: The current run's parallelism (a completion runs at it: the same subtasks read the same input).
    parallelism: int
    #: Where its fresh start began (job specific: Kafka offsets per partition, watermark seeds, a Delta
    #: source offset): what a completion without a checkpoint replays from.
    start: dict[str, Any] = field(default_factory=dict)
    #: Bounded Kafka runs: the end offsets (``topic#partition`` -> offset) the current run stops at.
    end: dict[str, int] | None = None
    #: A checkpoint outside the folder this lineage continues from (an earlier version's layout, or
    #: ``--from-checkpoint``), restored again while the lineage has none of its own.
    restored_from: str | None = None
    created_ms: int = 0
    #: The most subtasks any run of the lineage had: whose end-of-input commits to look for.
    widest: int = 1

    def to_json(self) -> str:
        """The file's text (the folder is where it is, not in it)."""
        doc = {k: v for k, v in asdict(self).items() if k != "folder"}
        return json.dumps({"format": LINEAGE_FORMAT, **doc}, indent=1, sort_keys=True)

    @classmethod
    def read(cls, folder: Path) -> Lineage | None:
        """The lineage of ``folder``, None when it has no (readable) ``lineage.json``."""
        path = folder / LINEAGE_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != LINEAGE_FORMAT:
            return None
        return cls(
            folder=folder,
            run_id=doc.get("run_id"),
            bounded=bool(doc.get("bounded")),
            parallelism=int(doc.get("parallelism", 1)),
            start=dict(doc.get("start") or {}),
            end={str(k): int(v) for k, v in doc["end"].items()} if doc.get("end") is not None else None,
            restored_from=doc.get("restored_from"),
            created_ms=int(doc.get("created_ms", 0)),
            widest=int(doc.get("widest") or doc.get("parallelism") or 1),
        )


class JobFolder:
    """The checkpoint folder of one job: its lineages, their checkpoints, and older-layout checkpoints."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def lineages(self) -> list[Lineage]:
        """Every lineage, oldest first."""
        if not self.root.is_dir():
            return []
        found = [lin for d in self._folders() if (lin := Lineage.read(d)) is not None]
        return sorted(found, key=lambda lin: (lin.created_ms, lin.folder.name))

    def _folders(self) -> list[Path]:
        """The job folder's sub-folders, without those being removed (a crash during removal leaves
        them renamed aside; they are removed now)."""
        out = []
        for d in self.root.iterdir():
            if not d.is_dir():
                continue
            if d.name.startswith(_TRASH):
                shutil.rmtree(d, ignore_errors=True)
            else:
                out.append(d)
        return out

    def newest(self) -> Lineage | None:
        """The lineage of the latest run (the others are superseded by it)."""
        lineages = self.lineages()
        return lineages[-1] if lineages else None

    def legacy_checkpoint(self) -> Path | None:
        """The newest checkpoint of an earlier version's layout (``<job>/<flink job id>/chk-N``)."""
        if not self.root.is_dir():
            return None
        found = [c for d in self._legacy_folders() if (c := latest_checkpoint(d)) is not None]
        return max(found, key=_checkpoint_order, default=None)

    def _legacy_folders(self) -> list[Path]:
        return [d for d in self._folders() if not (d / LINEAGE_FILE).exists() and any(d.glob("chk-*"))]

    def checkpoint(self, lineage: Lineage) -> Path | None:
        """The newest completed checkpoint of ``lineage`` (its own, else the one it continues from)."""
        own = latest_checkpoint(lineage.folder)
        if own is not None:
            return own
        if lineage.restored_from and (Path(lineage.restored_from) / "_metadata").is_file():
            return Path(lineage.restored_from)
        return None

    def begin(self, lineage: Lineage) -> None:
        """Record ``lineage`` (its current run) before the job is submitted."""
        lineage.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(lineage.folder / LINEAGE_FILE, lineage.to_json())

    def finish(self, lineage: Lineage) -> None:
        """The lineage's run ended by itself and everything it wrote is committed: its folder goes, and
        so does an earlier version's checkpoint folder it continued from."""
        if lineage.restored_from:
            origin = Path(lineage.restored_from)
            for d in self._legacy_folders():
                if d in origin.parents:
                    _remove(d)
        _remove(lineage.folder)

    def prune(self, keep: Lineage, *, keep_checkpoint: Path | None = None) -> None:
        """Remove what ``keep`` supersedes: other lineages, older-layout checkpoints, and the Flink job
        folders of ``keep`` other than the one holding ``keep_checkpoint`` (a restore in Flink's default
        NO_CLAIM mode never depends on an older job's files once its own first checkpoint exists)."""
        if not self.root.is_dir():
            return
        for lin in self.lineages():
            if lin.folder != keep.folder:
                _remove(lin.folder)
        for d in self._legacy_folders():
            if keep_checkpoint is None or d not in keep_checkpoint.parents:
                _remove(d)
        if keep_checkpoint is not None and keep.folder in keep_checkpoint.parents:
            for d in keep.folder.iterdir():
                if d.is_dir() and d not in keep_checkpoint.parents:
                    _remove(d)


def _checkpoint_order(path: Path) -> tuple[float, int]:
    return (path.stat().st_mtime, int(path.name.split("-")[1]))


def _remove(path: Path) -> None:
    """Remove a folder: first renamed aside (atomic), so a crash halfway leaves nothing that looks live."""
    if not path.exists():
        return
    trash = path.with_name(f"{_TRASH}{path.name}-{uuid.uuid4().hex[:8]}")
    path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


Action = Literal["restore", "complete", "settle", "new"]


@dataclass(frozen=True)
class StartPlan:
    """What a run does first (:func:`plan_start`)."""

    action: Action
    #: restore/complete/settle: the lineage continued or closed; new: None.
    lineage: Lineage | None = None
    #: restore (always), settle (always), complete (when it has one): the checkpoint used.
    checkpoint: Path | None = None
    #: Why, in words, for the run's first line of output.
    reason: str = ""


def plan_start(
    *,
    fresh: bool,
    newest: Lineage | None,
    checkpoint: Path | None,
    legacy: Path | None,
    ended: bool,
    bounded: bool,
    kafka: bool,
) -> StartPlan:
    """Where a run starts, from what the job folder and the output say (DESIGN.md section 9).

    ``checkpoint``: the newest checkpoint of ``newest``; ``legacy``: the newest one of an earlier
    version's layout; ``ended``: some writer of ``newest`` committed its end of input; ``bounded``: this
    run ends by itself. ``kafka``: the job reads Kafka, whose checkpointed splits keep the stopping
    offsets of the run that took them (none for an unbounded run), so a checkpoint only restores into a
    run of the same kind and extent, and the job writes several tables (ingest), which only a consistent
    cut makes a position of. Then:

    - ``complete``: a bounded lineage that did not finish is finished first as it was defined (its
      checkpoint with its end offsets, or, if a writer committed its end before any checkpoint, a
      replay from its start): writers that committed their end stage nothing more, the others commit.
    - ``settle``: an unbounded lineage followed by a bounded run: its writers' recovery of checkpoint r
      (commit what r holds, abort the rest) is done here, so every table is at the cut r and records
      its position; the bounded run starts a new lineage there.
    - ``restore``: an unbounded Kafka lineage followed by an unbounded run, or any live change-feed
      lineage (its only state is the source offset; the tick source's uid differs by kind).
    - ``new``: at the position the output recorded (``--fresh``: at the start flags).
    """
    if fresh:
        return StartPlan("new", reason="--fresh: starting over, without checkpoint or recorded position")
    if newest is None:
        if legacy is not None and not (kafka and bounded):
            return StartPlan("restore", None, legacy, "the newest checkpoint of an earlier version's layout")
        return StartPlan("new", reason="the previous run ended by itself, or there was none")
    if kafka:
        if newest.bounded:
            if checkpoint is None and not ended:  # it committed nothing: no checkpoint, no end
                return StartPlan("new", reason="the previous bounded run stopped before committing anything")
            return StartPlan("complete", newest, checkpoint, "the previous bounded run did not finish")
        if checkpoint is None:
            return StartPlan("new", reason="the previous run stopped before its first checkpoint")
        if bounded:
            return StartPlan("settle", newest, checkpoint, "the previous run did not end by itself")
        return StartPlan("restore", newest, checkpoint, "the previous run did not end by itself")
    if ended:
        return StartPlan("new", reason="the previous run ended by itself and committed its end")
    if checkpoint is not None:
        return StartPlan("restore", newest, checkpoint, "the previous run did not end by itself")
    return StartPlan("new", reason="the previous run stopped before its first checkpoint")


#: What Flink says when a checkpoint holds state of an operator uid the submitted graph does not have.
_UNMAPPED_STATE = re.compile(r"Cannot map checkpoint/savepoint state for operator (\w+) to the new program")


def unrestorable(
    exc: BaseException, checkpoint: Path, command: str, *, completing: str | None = None
) -> ResumeError | None:
    """The error to show when ``exc`` is Flink refusing ``checkpoint`` for state this graph cannot take.

    That happens after an upgrade that changed the job graph (an operator gone: README, "Limitations")
    and after a change of a setting that shapes the gold aggregate's state (``gold.window``).
    The way on needs no checkpoint restore: a bounded run settles the checkpoint into the tables and
    starts a new lineage where they stand (DESIGN.md section 9). ``completing``: the run id of an
    interrupted bounded run that ``checkpoint`` was to complete; some of its writers may have committed
    their end already, so settling is not exact for it: it has to be completed by the graph it ran with.
    None: ``exc`` is something else.
    """
    found = _UNMAPPED_STATE.search(str(exc))
    if found is None:
        return None
    held = (
        f"checkpoint {checkpoint} holds state of operator {found.group(1)}, which this version of the job "
        "graph does not have (an upgrade changed the graph, or a setting that shapes the gold state, "
        "gold.window, changed); nothing was written."
    )
    if completing is not None:
        return ResumeError(
            f"the interrupted bounded run {completing} cannot be completed by this job graph: {held} "
            f"Complete it as it was defined first: run the same `lakestream {command} --bounded` command "
            "once with the settings and the lakestream version that run started with; then run this version "
            "as before"
        )
    gold = (
        "; then backfill the gold windows the previous run had begun (`lakestream backfill`)"
        if command == "ingest"
        else ""
    )
    return ResumeError(
        f"{held} Run the same `lakestream {command}` command once with --bounded "
        f"added: it commits what that checkpoint holds and reads on to the current end{gold}; then start "
        "the job as before"
    )


def checkpoint_id(checkpoint: Path) -> int:
    """The id of a checkpoint folder ``chk-N``."""
    return int(checkpoint.name.split("-")[1])


def settle(specs: Iterable[Any], lineage: Lineage, checkpoint: Path) -> None:
    """Do what a restore of ``checkpoint`` would do first in every writer of ``lineage``, here.

    Each table's writers get OPEN(r) for r = the checkpoint's id, at the lineage's widest parallelism
    (so every slot has its owner): the same run's prepared work up to r is committed (with its
    progress), later and pending work is aborted. Every table then holds exactly the cut r, and the
    tables' recorded position is where the checkpoint's sources stood. ``specs`` are the job's
    ``sinks.flink.delta_sink.DeltaSinkSpec``; idempotent, so a crash halfway is settled again next time.
    """

    specs = list(specs)
    run_id = lineage.run_id
    if run_id is None:  # continued from an earlier version's checkpoint: its staged work names it
        found = staged_run_ids(specs)
        if not found:
            return  # nothing staged: every table committed all it prepared, the cut is in the tables
        if len(found) > 1:
            raise ResumeError(
                f"cannot settle {checkpoint}: its run id is only in the checkpoint's state, and the tables "
                f"hold staged work of several runs ({', '.join(sorted(found))}); run once without "
                "--bounded (it resumes the checkpoint), then bounded runs continue from there"
            )
        (run_id,) = found
    r = checkpoint_id(checkpoint)
    parallelism = max(lineage.widest, lineage.parallelism)
    for spec in specs:
        for subtask in range(parallelism):
            writer = spec.new_writer()
            writer.open(restored_checkpoint_id=r, run_id=run_id, subtask=subtask, parallelism=parallelism)
            writer.close()


def staged_run_ids(specs: Iterable[Any]) -> set[str]:
    """The run ids of the work staged (not committed) in the tables of ``specs``."""
    from sinks.staging import StagingArea

    return {
        m.run_id
        for spec in specs
        for m in StagingArea.of_table(
            spec.table.table_uri, spec.app_prefix, spec.table.storage_options
        ).list_all()
    }


def lineage_ended(
    tables: Iterable[tuple[str, str]],
    run_id: str | None,
    parallelism: int,
    *,
    txn_version: Callable[[str, str], int | None],
) -> bool:
    """Whether any writer of lineage ``run_id`` committed its end of input in one of ``tables``.

    ``tables`` are (table uri, app prefix) pairs, ``parallelism`` the most subtasks the lineage ran
    with, ``txn_version(uri, app_id)`` the table's txn version of an app id (None: none, or no table).
    """
    if run_id is None:
        return False
    return any(
        txn_version(uri, app_id_for(prefix, run_id, subtask)) == EOI_CHECKPOINT_ID
        for uri, prefix in tables
        for subtask in range(parallelism)
    )


def table_txn_version(uri: str, app_id: str) -> int | None:
    """The txn version of ``app_id`` in the Delta table at ``uri`` (None when there is no table)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        version = DeltaTable(uri).transaction_version(app_id)
    except TableNotFoundError:
        return None
    return None if version is None else int(version)


def lineage_for_run(
    folder: JobFolder,
    plan: StartPlan,
    *,
    bounded: bool,
    parallelism: int,
    start: dict[str, Any],
    end: dict[str, int] | None = None,
) -> Lineage:
    """The lineage a run continues (restore) or begins (new), describing this run."""
    now = int(time.time() * 1000)
    if plan.action == "restore" and plan.lineage is not None:
        return replace(
            plan.lineage,
            bounded=bounded,
            parallelism=parallelism,
            widest=max(parallelism, plan.lineage.widest, plan.lineage.parallelism),
            end=end,
            created_ms=max(now, plan.lineage.created_ms),
        )
    if plan.action == "restore":  # an earlier version's checkpoint: the run id is only in its state
        run_id = None
        name = f"legacy-{uuid.uuid4().hex}"
        restored = str(plan.checkpoint) if plan.checkpoint else None
    else:
        run_id = new_run_id()
        name = run_id
        restored = None
    return Lineage(
        folder=folder.root / name,
        run_id=run_id,
        bounded=bounded,
        parallelism=parallelism,
        start=start,
        end=end,
        restored_from=restored,
        created_ms=now,
        widest=parallelism,
    )


def job_folder_of(lineage: Lineage) -> JobFolder:
    """The job folder ``lineage`` lives in."""
    return JobFolder(lineage.folder.parent)


__all__ = [
    "JobFolder",
    "Lineage",
    "StartPlan",
    "lineage_ended",
    "job_folder_of",
    "lineage_for_run",
    "new_run_id",
    "plan_start",
    "settle",
    "table_txn_version",
]
