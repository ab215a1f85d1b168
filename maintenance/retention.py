"""What the streaming jobs and readers of a table still need, and whether a VACUUM or log cleanup is safe.

Pure functions of facts gathered elsewhere (``maintenance.facts``), so each rule is unit-tested on its
own: the table's own retention, two checkpoint intervals for the jobs, each Delta-source reader's
oldest needed version, and a full VACUUM never deleting staged, uncommitted files (not even with
``--force``). The rules and why they are enough: DESIGN.md section 10.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from lakestream.errors import LakestreamError
from lakestream.time import format_duration, plain_utc

#: Delta's defaults when the table property is not set.
DEFAULT_DELETED_FILE_RETENTION = timedelta(days=7)
DEFAULT_LOG_RETENTION = timedelta(days=30)
DELETED_FILE_RETENTION_KEY = "delta.deletedFileRetentionDuration"
LOG_RETENTION_KEY = "delta.logRetentionDuration"

_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_INTERVAL_UNITS = {
    "nanosecond": timedelta(microseconds=0.001),
    "microsecond": timedelta(microseconds=1),
    "millisecond": timedelta(milliseconds=1),
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}


class IntervalError(LakestreamError, ValueError):
    """A Delta interval property is not of the form ``interval <n> <unit>``."""


def parse_delta_interval(text: str, *, key: str) -> timedelta:
    """A Delta interval property (``interval 7 days``; delta-rs also takes ``7 days``) as a duration."""
    m = _INTERVAL.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _INTERVAL_UNITS:
        raise IntervalError(
            f"{key} = {text!r}: expected 'interval <n> <unit>' with unit one of "
            f"{', '.join(u + 's' for u in _INTERVAL_UNITS)}, e.g. 'interval 7 days'"
        )
    return int(m.group(1)) * _INTERVAL_UNITS[unit]


def deleted_file_retention(configuration: Mapping[str, str]) -> timedelta:
    """The table's ``delta.deletedFileRetentionDuration`` (Delta's default when unset)."""
    text = configuration.get(DELETED_FILE_RETENTION_KEY)
    if text is None:
        return DEFAULT_DELETED_FILE_RETENTION
    return parse_delta_interval(text, key=DELETED_FILE_RETENTION_KEY)


def log_retention(configuration: Mapping[str, str]) -> timedelta:
    """The table's ``delta.logRetentionDuration`` (Delta's default when unset)."""
    text = configuration.get(LOG_RETENTION_KEY)
    if text is None:
        return DEFAULT_LOG_RETENTION
    return parse_delta_interval(text, key=LOG_RETENTION_KEY)


def whole_hours(duration: timedelta) -> int:
    """The smallest whole number of hours at least ``duration`` (delta-rs takes retention in hours)."""
    return max(0, math.ceil(duration.total_seconds() / 3600))


@dataclass(frozen=True, slots=True)
class ReaderNeed:
    """A Delta-source reader of the table and the oldest version it may still read."""

    reader: str
    version: int
    #: Commit time of ``version``; None when the version is not committed yet (the reader is caught up).
    version_time_ms: int | None
    last_seen_ms: int
    #: The commit of ``version`` is gone from the log already (the reader has lost data).
    commit_missing: bool = False


@dataclass(frozen=True, slots=True)
class RetentionFacts:
    """Everything the retention rules look at, gathered at ``now_ms``."""

    now_ms: int
    table_retention: timedelta
    checkpoint_interval: timedelta
    readers: tuple[ReaderNeed, ...] = ()
    #: Paths (relative to the table root) that sinks staged and have not committed.
    staged_files: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Requirement:
    """One rule's minimum retention, why, and what to do instead of going below it."""

    rule: str
    minimum: timedelta
    why: str
    fix: str


def reader_requirement(need: ReaderNeed, *, now_ms: int, margin: timedelta) -> timedelta:
    """Retention a reader needs: back past the commit time of the oldest version it may read, plus margin."""
    if need.version_time_ms is None:
        return timedelta(0)
    return timedelta(milliseconds=max(0, now_ms - need.version_time_ms)) + margin


def retention_requirements(facts: RetentionFacts) -> list[Requirement]:
    """Every rule's minimum retention for this table, the table's own first."""
    jobs = 2 * facts.checkpoint_interval
    out = [
        Requirement(
            "table",
            facts.table_retention,
            f"the table's {DELETED_FILE_RETENTION_KEY} is {format_duration(facts.table_retention)}",
            f"lower it first with `lakestream maintain properties TABLE --set "
            f"{DELETED_FILE_RETENTION_KEY}='interval N hours'` if that is really meant",
        ),
        Requirement(
            "jobs",
            jobs,
            f"streaming commits read the snapshot they planned on for up to a checkpoint interval "
            f"(2 x flink.checkpoint_interval = {format_duration(jobs)})",
            "keep the retention above it",
        ),
    ]
    for need in facts.readers:
        minimum = reader_requirement(need, now_ms=facts.now_ms, margin=jobs)
        if minimum <= timedelta(0):
            continue
        lost = (
            " (its commit is gone from the log already: that reader has lost data)"
            if need.commit_missing
            else ""
        )
        committed = "" if need.version_time_ms is None else f", committed {plain_utc(need.version_time_ms)}"
        out.append(
            Requirement(
                f"reader {need.reader}",
                minimum,
                f"Delta-source reader {need.reader!r} (last seen {plain_utc(need.last_seen_ms)}) may still "
                f"read from version {need.version}{committed}{lost}",
                f"let it catch up, or if that job is gone for good: `lakestream maintain readers TABLE "
                f"--forget '{need.reader}'`",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class VacuumVerdict:
    """Whether a VACUUM at ``retention_hours`` may run, and the reasons it may not."""

    retention_hours: int
    requirements: tuple[Requirement, ...]
    #: Rules the retention breaks (``--force`` runs it anyway).
    violated: tuple[Requirement, ...]
    #: Files the VACUUM would delete that a sink staged and has not committed (never allowed).
    staged_in_the_way: tuple[str, ...]
    forced: bool
    #: Full mode below the jobs rule: a file staged after the check could already be old enough to go.
    full_below_jobs: bool = False

    @property
    def allowed(self) -> bool:
        """True when the vacuum may run."""
        if self.staged_in_the_way or self.full_below_jobs:
            return False
        return self.forced or not self.violated

    @property
    def minimum_jobs_hours(self) -> int:
        """The jobs rule in whole hours."""
        return max((whole_hours(r.minimum) for r in self.requirements if r.rule == "jobs"), default=0)

    @property
    def minimum_hours(self) -> int:
        """The smallest retention (whole hours) every rule accepts."""
        return max((whole_hours(r.minimum) for r in self.requirements), default=0)

    def explain(self) -> str:
        """Why it is refused (or forced), one reason a line, each with what to do."""
        lines: list[str] = []
        for path in self.staged_in_the_way[:10]:
            lines.append(f"staged, not yet committed by a streaming sink: {path}")
        if self.staged_in_the_way:
            more = len(self.staged_in_the_way) - 10
            if more > 0:
                lines.append(f"... and {more} more staged files")
            lines.append(
                "a full vacuum would delete them and lose their completed checkpoint's rows; run it without "
                "--full (only removed files go), or once the job has committed them (restart a stopped job: "
                "its first checkpoint commits or aborts them)"
            )
        if self.full_below_jobs:
            lines.append(
                f"a full vacuum at {self.retention_hours}h could delete a file a sink stages while it runs "
                f"(untracked files younger than the retention are what protects them); full mode needs at "
                f"least {self.minimum_jobs_hours}h, with or without --force"
            )
        for r in self.violated:
            lines.append(
                f"retention {self.retention_hours}h is below {format_duration(r.minimum)} ({r.rule}): "
                f"{r.why}; {r.fix}"
            )
        return "\n".join(lines)


def vacuum_verdict(
    facts: RetentionFacts,
    retention_hours: int | None,
    *,
    force: bool = False,
    full: bool = False,
    candidates: Iterable[str] = (),
) -> VacuumVerdict:
    """Decide a VACUUM: at ``retention_hours`` (default: the table's retention), full or lite.

    ``candidates`` are the paths a dry run lists (relative to the table root): in full mode any of them
    that a sink has staged blocks the vacuum, whatever ``force`` says.
    """
    hours = whole_hours(facts.table_retention) if retention_hours is None else retention_hours
    if hours < 0:
        raise ValueError(f"retention must not be negative, got {hours}h")
    requirements = tuple(retention_requirements(facts))
    retention = timedelta(hours=hours)
    violated = tuple(r for r in requirements if retention < r.minimum)
    staged = tuple(sorted(set(candidates) & facts.staged_files)) if full else ()
    jobs = next(r for r in requirements if r.rule == "jobs")
    return VacuumVerdict(
        retention_hours=hours,
        requirements=requirements,
        violated=violated,
        staged_in_the_way=staged,
        forced=force,
        full_below_jobs=full and hours < whole_hours(jobs.minimum),
    )


@dataclass(frozen=True, slots=True)
class CleanupVerdict:
    """Whether deleting expired log files (older than ``delta.logRetentionDuration``) is safe."""

    log_retention: timedelta
    violated: tuple[Requirement, ...]
    forced: bool

    @property
    def allowed(self) -> bool:
        """True when the cleanup may run."""
        return self.forced or not self.violated

    def explain(self) -> str:
        """Why it is refused, one reason a line."""
        lines = [
            f"{LOG_RETENTION_KEY} ({format_duration(self.log_retention)}) is below "
            f"{format_duration(r.minimum)} ({r.rule}): {r.why}; {r.fix}, or raise {LOG_RETENTION_KEY}"
            for r in self.violated
        ]
        return "\n".join(lines)


def cleanup_verdict(
    *,
    now_ms: int,
    table_log_retention: timedelta,
    checkpoint_interval: timedelta,
    readers: Sequence[ReaderNeed],
    force: bool = False,
) -> CleanupVerdict:
    """Decide a log cleanup: it deletes commit files older than the log retention (below the newest
    checkpoint), and a Delta-source reader reads the commit file of every version from its own on."""
    margin = 2 * checkpoint_interval
    violated = []
    for need in readers:
        minimum = reader_requirement(need, now_ms=now_ms, margin=margin)
        if minimum > table_log_retention:
            violated.append(
                Requirement(
                    f"reader {need.reader}",
                    minimum,
                    f"Delta-source reader {need.reader!r} may still read from version {need.version}",
                    "let it catch up",
                )
            )
    return CleanupVerdict(
        log_retention=table_log_retention,
        violated=tuple(violated),
        forced=force,
    )


@dataclass(frozen=True, slots=True)
class StagedWork:
    """One manifest's claim on files (paths relative to the table root), as the retention rules see it."""

    files: tuple[str, ...]
    #: A pending manifest owns, besides its listed files, every file with its token in these folders.
    token: str = ""
    staging_dirs: tuple[str, ...] = ()
    pending: bool = False


def protected_files(work: Iterable[StagedWork], listing: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """Every path a sink staged and still owns: listed files, and a pending prepare's token files.

    ``listing`` maps a staging folder (relative, ``.`` for the root) to the names of the files in it.
    """
    out: set[str] = set()
    for w in work:
        out.update(w.files)
        if w.pending and w.token:
            for folder in w.staging_dirs:
                prefix = "" if folder in ("", ".") else folder.rstrip("/") + "/"
                out.update(prefix + name for name in listing.get(folder, ()) if w.token in name)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class RestoreVerdict:
    """Whether a RESTORE may run, and what the user is told either way."""

    allowed: bool
    warnings: tuple[str, ...] = field(default_factory=tuple)
    refusal: str = ""


def restore_verdict(
    *,
    target_version: int,
    current_version: int,
    written_by_sink: bool,
    staged_manifests: int,
    readers: Sequence[str],
    force: bool,
) -> RestoreVerdict:
    """Decide a RESTORE to ``target_version``.

    A table a lakestream sink writes needs ``--force``: the commits after the target leave the table but
    their txn versions stay, so the sink never writes those rows again, and their input (Kafka offsets)
    has moved on. Restoring the current version, or beyond it, is refused.
    """
    if target_version >= current_version:
        return RestoreVerdict(
            False,
            refusal=f"version {target_version} is not before the current version {current_version}: "
            "nothing to restore",
        )
    if target_version < 0:
        return RestoreVerdict(False, refusal=f"--version must be >= 0, got {target_version}")
    warnings = []
    if written_by_sink:
        warnings.append(
            f"a lakestream streaming sink writes this table: the rows of versions {target_version + 1}.."
            f"{current_version} leave it, and the sink will not write them again (its txn versions stay "
            "and its input has moved on); re-ingest them from their source if they are wanted"
        )
    if staged_manifests:
        warnings.append(
            f"{staged_manifests} staged checkpoint(s) are waiting to be committed: a job is running or was "
            "stopped mid-checkpoint; its next commit lands on top of the restored version"
        )
    if readers:
        warnings.append(
            f"Delta-source readers ({', '.join(readers)}) will see the restore as a commit that removes "
            "and re-adds files: a table-changes stream fails on it unless started with ignore_changes, a "
            "change data feed emits it as deletes and inserts"
        )
    if warnings and not force:
        return RestoreVerdict(
            False,
            warnings=tuple(warnings),
            refusal="stop the jobs that write this table, then run again with --force",
        )
    return RestoreVerdict(True, warnings=tuple(warnings))


#: Table properties whose value breaks a lakestream reader or writer, with why.
_BREAKING_PROPERTIES: dict[tuple[str, str], str] = {
    ("delta.enabledeletionvectors", "true"): (
        "the Delta source (changefeed) cannot apply deletion vectors written by other engines"
    ),
    ("delta.columnmapping.mode", "name"): "the Delta source refuses tables with column mapping",
    ("delta.columnmapping.mode", "id"): "the Delta source refuses tables with column mapping",
}


def property_problems(
    changes: Mapping[str, str], *, written_by_merge_sink: bool
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for setting ``changes`` on a table; refusals need ``--force``."""
    refusals: list[str] = []
    warnings: list[str] = []
    for key, value in changes.items():
        lowered = (key.lower(), value.strip().lower())
        if lowered in _BREAKING_PROPERTIES:
            refusals.append(f"{key}={value}: {_BREAKING_PROPERTIES[lowered]}")
        if lowered == ("delta.appendonly", "true") and written_by_merge_sink:
            refusals.append(
                f"{key}={value}: a streaming MERGE writes this table and would fail on every commit"
            )
        if key.lower() in (DELETED_FILE_RETENTION_KEY.lower(), LOG_RETENTION_KEY.lower()):
            try:
                parse_delta_interval(value, key=key)
            except IntervalError as exc:
                refusals.append(str(exc))
        if key.lower() == "delta.targetfilesize" and written_by_merge_sink:
            warnings.append(
                f"{key}: the streaming MERGE writer sets it from tables.merge_target_file_size_mb when it "
                "starts; change that setting to keep the new value"
            )
        if key.lower() == "delta.checkpointinterval":
            warnings.append(
                f"{key}: the writers' commits checkpoint the log every this many versions (delta-rs' "
                "post-commit hook); maintain auto checkpoints after maintenance.checkpoint_every"
            )
    return refusals, warnings
