"""Where the next run of a job starts: its newest lineage's checkpoint, or the position its output recorded.

A *lineage* is a line of runs sharing one sink run id, kept under ``<flink.checkpoint_dir>/<job>/<run id>/``
(``lineage.json`` and its Flink checkpoints); the CLI picks the run id of a fresh start. A run that
ends by itself leaves no checkpoint, so its output's committed position (``lakestream.progress``) is
the record. :func:`plan_start` chooses between restoring the newest lineage's checkpoint, completing an
unfinished bounded lineage, settling a killed unbounded one into the tables, and a new lineage at the
recorded position. The rules and their order: DESIGN.md section 9.

The job folder is a local folder (:class:`JobFolder`) or a prefix on an object store
(:class:`StoreJobFolder`, ``flink.checkpoint_dir = "s3://..."``); both hold the same layout.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import obstore

from lakestream.progress import ResumeError
from runtime.flink_env import latest_checkpoint, on_object_store
from sinks.ownership import EOI_CHECKPOINT_ID
from sinks.staging import app_id_for
from storage.local_files import atomic_write_text, check_writable_folder
from storage.object_store import store_error
from storage.table_files import FileInfo, table_files

log = logging.getLogger(__name__)

LINEAGE_FILE = "lineage.json"
LINEAGE_FORMAT = 1
#: Name prefix of a folder renamed aside to be removed.
_TRASH = ".removing-"
#: The object that marks a folder on an object store as being removed (a store cannot rename).
REMOVING_MARKER = ".removing"

_T = TypeVar("_T")


class StorePath(str):
    """A folder on an object store, spelled as its URI (``s3://bucket/prefix``, no trailing slash), with the
    few path operations a job folder uses. A ``str``, so it goes wherever Flink takes a checkpoint path."""

    __slots__ = ()

    def __truediv__(self, name: str) -> StorePath:
        return StorePath(f"{self}/{name}")

    @property
    def name(self) -> str:
        """The last part."""
        return self.rsplit("/", 1)[1]

    @property
    def parent(self) -> StorePath:
        """The folder above (the bucket ``s3://bucket`` is the top)."""
        return StorePath(self.rsplit("/", 1)[0])

    @property
    def parents(self) -> list[StorePath]:
        """Every folder above, nearest first, down to the bucket."""
        out: list[StorePath] = []
        at = self
        while at.count("/") > 2:
            at = at.parent
            out.append(at)
        return out


#: A job folder, a lineage's folder or a checkpoint: local, or on an object store.
Location = Path | StorePath


def location(text: str) -> Location:
    """The folder ``text`` names: a :class:`StorePath` for ``s3://...``, else a local path made absolute."""
    return StorePath(text.rstrip("/")) if on_object_store(text) else Path(text).resolve()


def new_run_id() -> str:
    """A fresh lineage's run id (hex, like the Flink job ids earlier versions used)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lineage:
    """One lineage of a job: ``lineage.json`` in its folder."""

    folder: Location
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
            return cls.parse(folder, path.read_text(encoding="utf-8"))
        except OSError:
            return None

    @classmethod
    def parse(cls, folder: Location, text: str) -> Lineage | None:
        """The lineage of ``folder`` whose ``lineage.json`` says ``text``; None when it is not one."""
        try:
            doc = json.loads(text)
        except ValueError:
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

    def probe(self) -> None:
        """Create and write the job folder once, leaving it as it was: a folder that cannot be written
        (``flink.checkpoint_dir``) fails now, with the fix, as :meth:`StoreJobFolder.probe` does."""
        check_writable_folder(self.root, setting="flink.checkpoint_dir")

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

    def checkpoint(self, lineage: Lineage) -> Location | None:
        """The newest completed checkpoint of ``lineage`` (its own, else the one it continues from)."""
        own = latest_checkpoint(_local(lineage.folder))
        return own if own is not None else _continued_checkpoint(lineage.restored_from)

    def begin(self, lineage: Lineage) -> None:
        """Record ``lineage`` (its current run) before the job is submitted."""
        folder = _local(lineage.folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / LINEAGE_FILE, lineage.to_json())

    def finish(self, lineage: Lineage) -> None:
        """The lineage's run ended by itself and everything it wrote is committed: its folder goes, and
        so does an earlier version's checkpoint folder it continued from."""
        if lineage.restored_from:
            origin = Path(lineage.restored_from)
            for d in self._legacy_folders():
                if d in origin.parents:
                    _remove(d)
        _remove(_local(lineage.folder))

    def prune(self, keep: Lineage, *, keep_checkpoint: Location | None = None) -> None:
        """Remove what ``keep`` supersedes: other lineages, older-layout checkpoints, and the Flink job
        folders of ``keep`` other than the one holding ``keep_checkpoint`` (a restore in Flink's default
        NO_CLAIM mode never depends on an older job's files once its own first checkpoint exists)."""
        if not self.root.is_dir():
            return
        for lin in self.lineages():
            if lin.folder != keep.folder:
                _remove(_local(lin.folder))
        for d in self._legacy_folders():
            if keep_checkpoint is None or d not in keep_checkpoint.parents:
                _remove(d)
        if keep_checkpoint is not None and keep.folder in keep_checkpoint.parents:
            for d in _local(keep.folder).iterdir():
                if d.is_dir() and d not in keep_checkpoint.parents:
                    _remove(d)


def _local(folder: Location) -> Path:
    """A folder of a :class:`JobFolder`, which are all local."""
    assert isinstance(folder, Path), folder
    return folder


def _checkpoint_order(path: Path) -> tuple[float, int]:
    return (path.stat().st_mtime, int(path.name.split("-")[1]))


def _remove(path: Path) -> None:
    """Remove a folder: first renamed aside (atomic), so a crash halfway leaves nothing that looks live."""
    if not path.exists():
        return
    trash = path.with_name(f"{_TRASH}{path.name}-{uuid.uuid4().hex[:8]}")
    path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


class StoreJobFolder:
    """The checkpoint folder of one job on an object store: the layout of :class:`JobFolder`, through obstore.

    A store cannot rename, so a folder is removed by marking it first (``REMOVING_MARKER``), then
    deleting its ``lineage.json``, its other objects and the mark last: from the mark on it is no
    lineage, and a removal a crash interrupted is finished at the next look. Checkpoints of an earlier
    version's layout are local only. Every request that fails raises the store's error with the fix
    (``storage.object_store.store_error``), so a missing bucket, wrong credentials or an unreachable
    endpoint stop the run before the job is submitted (:meth:`probe`).
    """

    def __init__(self, root: StorePath, options: Mapping[str, str] | None = None) -> None:
        self.root = root
        self._options = dict(options or {})
        self._files = table_files(root.parent, self._options)

    def _call(self, request: Callable[..., _T], *args: Any) -> _T:
        """``request(*args)``, a failure as the store's error with the fix."""
        try:
            return request(*args)
        except (obstore.exceptions.BaseError, OSError) as exc:
            raise store_error(exc, self.root) from None

    def _key(self, where: StorePath) -> str:
        """``where`` as a path of the store client (rooted at the job folder's parent)."""
        return where[len(self.root.parent) + 1 :]

    def _list(self, folder: StorePath) -> list[FileInfo]:
        """Every object under ``folder``, with paths relative to it."""
        key = self._key(folder)
        found = self._call(self._files.list, key)
        return [replace(f, path=f.path[len(key) + 1 :]) for f in found]

    def probe(self) -> None:
        """List the job folder once: a store that cannot be used fails now, with the fix."""
        self._list(self.root)

    def _folders(self) -> list[StorePath]:
        """The lineages' folders; a folder marked as being removed is removed now."""
        lineages, removing = set(), set()
        for f in self._list(self.root):
            name, _, rest = f.path.partition("/")
            if rest == LINEAGE_FILE:
                lineages.add(name)
            elif rest == REMOVING_MARKER:
                removing.add(name)
        for name in sorted(removing):
            self._remove(self.root / name)
        return [self.root / name for name in sorted(lineages - removing)]

    def lineages(self) -> list[Lineage]:
        """Every lineage, oldest first."""
        found = []
        for d in self._folders():
            text = self._call(self._files.read, f"{self._key(d)}/{LINEAGE_FILE}")
            lin = None if text is None else Lineage.parse(d, text.decode("utf-8"))
            if lin is not None:
                found.append(lin)
        return sorted(found, key=lambda lin: (lin.created_ms, lin.folder.name))

    def newest(self) -> Lineage | None:
        """The lineage of the latest run (the others are superseded by it)."""
        lineages = self.lineages()
        return lineages[-1] if lineages else None

    def legacy_checkpoint(self) -> None:
        """None: an earlier version's layout is local only."""
        return None

    def _latest_checkpoint(self, folder: StorePath) -> StorePath | None:
        """The newest completed checkpoint under ``folder`` (``chk-N`` with ``_metadata``, written last),
        in the order of :func:`runtime.flink_env.latest_checkpoint`: modification time, then N."""
        done = []
        for f in self._list(folder):
            parts = f.path.split("/")
            if len(parts) >= 2 and parts[-1] == "_metadata" and parts[-2].startswith("chk-"):
                where = StorePath("/".join([folder, *parts[:-1]]))
                done.append((f.modified_ms, int(parts[-2].split("-")[1]), where))
        return max(done, key=lambda c: c[:2])[2] if done else None

    def checkpoint(self, lineage: Lineage) -> Location | None:
        """The newest completed checkpoint of ``lineage`` (its own, else the one it continues from)."""
        assert isinstance(lineage.folder, StorePath), lineage.folder
        own = self._latest_checkpoint(lineage.folder)
        return own if own is not None else _continued_checkpoint(lineage.restored_from, self._options)

    def begin(self, lineage: Lineage) -> None:
        """Record ``lineage`` (its current run) before the job is submitted: one PUT, whole or not at all."""
        assert isinstance(lineage.folder, StorePath), lineage.folder
        key = f"{self._key(lineage.folder)}/{LINEAGE_FILE}"
        self._call(self._files.write_atomic, key, lineage.to_json().encode("utf-8"))

    def finish(self, lineage: Lineage) -> None:
        """The lineage's run ended by itself and everything it wrote is committed: its folder goes."""
        assert isinstance(lineage.folder, StorePath), lineage.folder
        self._remove(lineage.folder)

    def prune(self, keep: Lineage, *, keep_checkpoint: Location | None = None) -> None:
        """Remove what ``keep`` supersedes, as :meth:`JobFolder.prune` does: other lineages and the Flink
        job folders of ``keep`` other than the one holding ``keep_checkpoint``."""
        for d in self._folders():
            if d != keep.folder:
                self._remove(d)
        if isinstance(keep.folder, StorePath) and isinstance(keep_checkpoint, StorePath):
            if keep.folder in keep_checkpoint.parents:
                jobs = {f.path.split("/")[0] for f in self._list(keep.folder) if "/" in f.path}
                for name in sorted(jobs):
                    if keep.folder / name not in keep_checkpoint.parents:
                        self._remove(keep.folder / name)

    def _remove(self, folder: StorePath) -> None:
        """Remove every object under ``folder``: marked first, ``lineage.json`` next, the mark last."""
        key = self._key(folder)
        marker = f"{key}/{REMOVING_MARKER}"
        self._call(self._files.write_atomic, marker, b"")
        self._call(self._files.delete, f"{key}/{LINEAGE_FILE}")
        for f in self._list(folder):
            if f.path not in (REMOVING_MARKER, LINEAGE_FILE):
                self._call(self._files.delete, f"{key}/{f.path}")
        self._call(self._files.delete, marker)


def _continued_checkpoint(origin: str | None, options: Mapping[str, str] | None = None) -> Location | None:
    """The checkpoint a lineage continues from (``restored_from``: local or on an object store), if it
    completed (has ``_metadata``)."""
    if not origin:
        return None
    if not on_object_store(origin):
        return Path(origin) if (Path(origin) / "_metadata").is_file() else None
    where = StorePath(origin.rstrip("/"))
    try:
        found = table_files(where, options).info("_metadata")
    except (obstore.exceptions.BaseError, OSError) as exc:
        raise store_error(exc, where) from None
    return where if found is not None else None


#: The checkpoint folder of one job, local or on an object store.
AnyJobFolder = JobFolder | StoreJobFolder


Action = Literal["restore", "complete", "settle", "new"]


@dataclass(frozen=True)
class StartPlan:
    """What a run does first (:func:`plan_start`)."""

    action: Action
    #: restore/complete/settle: the lineage continued or closed; new: None.
    lineage: Lineage | None = None
    #: restore (always), settle (always), complete (when it has one): the checkpoint used.
    checkpoint: Location | None = None
    #: Why, in words, for the run's first line of output.
    reason: str = ""


def plan_start(
    *,
    fresh: bool,
    newest: Lineage | None,
    checkpoint: Location | None,
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
    exc: BaseException, checkpoint: Location, command: str, *, completing: str | None = None
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


def checkpoint_id(checkpoint: Location) -> int:
    """The id of a checkpoint folder ``chk-N``."""
    return int(checkpoint.name.split("-")[1])


def settle(specs: Iterable[Any], lineage: Lineage, checkpoint: Location) -> None:
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
    folder: AnyJobFolder,
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


__all__ = [
    "AnyJobFolder",
    "JobFolder",
    "Lineage",
    "Location",
    "StartPlan",
    "StoreJobFolder",
    "StorePath",
    "lineage_ended",
    "lineage_for_run",
    "location",
    "new_run_id",
    "plan_start",
    "settle",
    "table_txn_version",
]
