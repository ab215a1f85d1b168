"""How a change-feed run starts and ends: its checkpoint or its output's recorded position, then the run.

The steps are every job's (``flink_jobs.lifecycle``); what is the change feed's own is where it starts
without a checkpoint (the source position its output recorded with its last changes: the audit table's
commits or the positions topic) and which failures it reports as the Delta source's own message.
The change feed has one writer, whose recorded position is exact after any commit, so a run that ended
by itself is never completed or settled (DESIGN.md section 9).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from flink_jobs.changefeed import ChangefeedTarget, app_prefix, build_changefeed_job, resolve_table
from flink_jobs.lifecycle import JobFailedError, broker, job_folder, plan_run, run_lineage
from flink_jobs.positions_topic import default_positions_topic
from lakestream.config import Config
from sources.offsets import SourceOffset
from sources.source_errors import DeltaSourceError
from storage.read_errors import DeltaReadError

if TYPE_CHECKING:  # pragma: no cover
    from flink_jobs.resume import AnyJobFolder, Lineage, StartPlan


@dataclass(frozen=True)
class ChangefeedRun:
    """One run of the change feed of ``table`` to ``target``, as ``lakestream changefeed`` asks for it."""

    table: str
    target: ChangefeedTarget
    #: Start over: without the previous run's checkpoint or recorded position.
    fresh: bool = False
    #: First version of a first run (or with ``fresh``); None: the current table as inserts, then changes.
    from_version: int | Literal["latest"] | None = None
    #: Stop after this many polls (the run ends by itself); None: until cancelled.
    polls: int | None = None
    #: A retained checkpoint or savepoint to resume from instead of the previous run's.
    from_checkpoint: str | None = None
    #: kafka:TOPIC output: the topic its positions are recorded in (None: ``TOPIC.lakestream-positions``).
    positions_topic: str | None = None
    job_name: str | None = None
    #: The rest of ``build_changefeed_job``'s options: trigger limits, poll interval, data loss, schema
    #: changes, exactly once.
    options: Mapping[str, Any] = field(default_factory=dict)


def run_changefeed(cfg: Config, run: ChangefeedRun) -> int:
    """Run the change-feed job until it is cancelled (or for ``run.polls`` polls), from where the previous
    run ended (DESIGN.md section 9)."""
    from flink_jobs.positions_topic import ensure_positions_topic
    from runtime.flink_env import check_runtime

    check_runtime(cfg.flink)
    target = run.target
    bootstrap = broker(cfg) if target.kind == "kafka" else None
    positions_topic = (run.positions_topic or default_positions_topic(target.value)) if bootstrap else None
    folder = job_folder(cfg, f"changefeed/{run.table}/{target.kind}/{target.value}")
    if bootstrap and positions_topic:
        ensure_positions_topic(bootstrap, positions_topic)
    plan = changefeed_start_plan(cfg, run, folder)
    start = None if run.fresh else recorded_position(cfg, run.table, target, positions_topic, bootstrap)
    if plan.action == "restore":
        print(f"resuming from checkpoint {plan.checkpoint} ({plan.reason})", flush=True)
    else:
        print(describe_start(run, start, plan.reason, positions_topic), flush=True)
    if run.from_version is not None and not run.fresh and (start is not None or plan.action == "restore"):
        print(
            f"note: --from-version {run.from_version} applies to a first run or with --fresh only; this run "
            "continues where the previous one ended (add --fresh to start there again)",
            flush=True,
        )
    resume_from = plan.checkpoint

    def build(lineage: Lineage) -> Any:
        return build_changefeed_job(
            cfg,
            table=run.table,
            target=target,
            from_version=run.from_version,
            polls=run.polls,
            bootstrap_servers=bootstrap,
            restore_from=resume_from,
            checkpoint_dir=str(lineage.folder),
            start=start,
            positions_topic=positions_topic,
            run_id=lineage.run_id,
            **run.options,
        )

    run_lineage(
        cfg,
        folder,
        plan,
        job_name=run.job_name or f"lakestream-changefeed {run.table} -> {target.kind}:{target.value}",
        bounded=run.polls is not None,
        parallelism=1,
        start={"offset": start.to_json() if start is not None else None},
        build=build,
        failure=changefeed_failure,
    )
    return 0


def changefeed_start_plan(cfg: Config, run: ChangefeedRun, folder: AnyJobFolder) -> StartPlan:
    """Where the run starts: ``run.from_checkpoint``, else as ``flink_jobs.lifecycle.plan_run`` says, a
    lineage having ended when the audit table holds its end-of-input commit."""
    from flink_jobs.resume import StartPlan, location

    if run.from_checkpoint:
        path = location(run.from_checkpoint)
        owner = next((lin for lin in folder.lineages() if lin.folder in path.parents), None)
        return StartPlan("restore", owner, path, "--from-checkpoint")
    target = run.target
    audit = [(resolve_table(cfg, target.value), app_prefix(run.table))] if target.kind == "delta" else []
    return plan_run(folder, fresh=run.fresh, bounded=run.polls is not None, kafka=False, tables=audit)


def recorded_position(
    cfg: Config, table: str, target: ChangefeedTarget, positions_topic: str | None, bootstrap: str | None
) -> SourceOffset | None:
    """The source position the output recorded with its last changes (None: nothing recorded yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from flink_jobs.positions_topic import read_position
    from lakestream.progress import read_progress
    from sinks.change_events import parse_position
    from sources.offsets import PROGRESS_KEYS

    values: dict[str, int] = {}
    if target.kind == "delta":
        try:
            values = read_progress(
                DeltaTable(resolve_table(cfg, target.value)), app_prefix(table), PROGRESS_KEYS
            )
        except TableNotFoundError:
            return None
    elif bootstrap and positions_topic:
        text = read_position(bootstrap, positions_topic, app_prefix(table))
        values = parse_position(text) if text is not None else {}
    if not values:
        return None
    source_uri = resolve_table(cfg, table)
    return SourceOffset.from_progress(
        values, table_id=str(DeltaTable(source_uri).metadata().id), table_uri=source_uri
    )


def describe_start(
    run: ChangefeedRun, start: SourceOffset | None, why: str, positions_topic: str | None
) -> str:
    """The first line of a run that starts without a checkpoint: where, and on whose record."""
    where = f"{run.target.kind}:{run.target.value}" if positions_topic is None else positions_topic
    if start is not None:
        by = "the previous run's last changes" if positions_topic else "the previous run's last commit"
        return f"resuming changefeed of {run.table} at {start.describe()} (recorded by {by} in {where})"
    if run.from_version == "latest":
        first = "the first version after the current one"
    elif run.from_version is not None:
        first = f"version {run.from_version}"
    else:
        first = "the current table as inserts, then its changes"
    because = why if run.fresh else f"nothing recorded in {where} yet"
    return f"starting changefeed of {run.table} at {first} ({because})"


#: How a traceback names the Delta source's errors: ``<module>.<class>: <message>``, in these modules.
SOURCE_ERROR_MODULES = tuple(f"{cls.__module__}." for cls in (DeltaSourceError, DeltaReadError))


def source_failure(text: str) -> str | None:
    """The Delta source's exception line in a Flink job failure (Python traceback inside), if any,
    without its module: ``DataLossError: ...``."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        for module in SOURCE_ERROR_MODULES:
            if stripped.startswith(module):
                return stripped[len(module) :]
    return None


def changefeed_failure(exc: Exception) -> JobFailedError | None:
    """The job failed inside Flink: the Delta source's own message, when it is the source's error."""
    reason = source_failure(str(exc))
    return None if reason is None else JobFailedError(reason)
