"""How a job runs: where it starts, how it resumes or completes an earlier run, how it ends.

Every run takes the same steps (:func:`plan_run`, then :func:`run_lineage`): the start plan from
``flink_jobs.resume``, its lineage begun and the folder pruned, the graph built, executed with Flink's
failures put in the user's terms, and a run that ended by itself closing its lineage. Every Kafka job
(``ingest``, ``land``) and the demo run through :func:`run_kafka_job`, which adds where Kafka starts and
a bounded run's commit of its offsets to the consumer group; the change feed through
``flink_jobs.changefeed_run`` (DESIGN.md section 9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream.config import Config, ConfigError
from lakestream.errors import FAILED, LakestreamError
from sources.flink.kafka_input import EndOffsets, StartingOffsets, resolve_start_offsets, split_name

if TYPE_CHECKING:  # pragma: no cover
    from flink_jobs.resume import AnyJobFolder, Lineage, Location, StartPlan

#: How a job's failure is put in the user's terms: the error to raise instead, or None to raise it as is.
FailureTranslation = Callable[[Exception], Exception | None]


class JobFailedError(LakestreamError, RuntimeError):
    """The job ran and failed for a reason the message says (exit code 1)."""

    exit_code = FAILED
    preface = "job failed: "


def broker(cfg: Config) -> str:
    """The broker address; ``embedded`` means the background broker started by ``lakestream kafka start``."""
    if not cfg.kafka.embedded:
        return cfg.kafka.bootstrap_servers
    from devtools import kafka_broker

    status = kafka_broker.status_detached()
    if not status.running or not status.bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap_servers is 'embedded' but no local broker is running: start one with "
            "`lakestream kafka start`, or set kafka.bootstrap_servers (LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS)"
        )
    return status.bootstrap_servers


def job_folder(cfg: Config, job: str) -> AnyJobFolder:
    """The checkpoint folder of ``job`` (its lineages, ``flink_jobs.resume``).

    It is probed once here (on an object store listed, a local folder created and written), so that a
    missing bucket, wrong credentials, an unreachable endpoint or a folder that cannot be written stop
    the run with the fix before anything else is done.
    """
    from flink_jobs.resume import JobFolder, StoreJobFolder, StorePath
    from runtime.flink_env import on_object_store
    from storage.object_store import delta_options

    name = job.replace("/", "-")
    folder: AnyJobFolder
    if on_object_store(cfg.flink.checkpoint_dir):
        root = StorePath(cfg.flink.checkpoint_dir.rstrip("/"))
        folder = StoreJobFolder(root / name, delta_options(cfg.storage))
    else:
        folder = JobFolder(Path(cfg.flink.checkpoint_dir) / name)
    folder.probe()
    return folder


def detached(result: Any) -> bool:
    """Whether ``env.execute`` only submitted the job (``flink run -d``): it has not finished yet."""
    j_result = getattr(result, "_j_job_execution_result", None)
    return j_result is not None and j_result.getClass().getSimpleName() == "DetachedJobExecutionResult"


def plan_run(
    folder: AnyJobFolder, *, fresh: bool, bounded: bool, kafka: bool, tables: Iterable[tuple[str, str]]
) -> StartPlan:
    """Where a run of the job in ``folder`` starts (``flink_jobs.resume.plan_start``).

    ``tables``: (table uri, app prefix) of the outputs whose end-of-input commits say that the newest
    lineage ended; ``kafka``: the job reads Kafka (see ``plan_start``).
    """
    from flink_jobs import resume

    newest = None if fresh else folder.newest()
    checkpoint = folder.checkpoint(newest) if newest is not None else None
    ended = newest is not None and resume.lineage_ended(
        tables, newest.run_id, newest.widest, txn_version=resume.table_txn_version
    )
    return resume.plan_start(
        fresh=fresh,
        newest=newest,
        checkpoint=checkpoint,
        legacy=None if fresh else folder.legacy_checkpoint(),
        ended=ended,
        bounded=bounded,
        kafka=kafka,
    )


def run_lineage(
    cfg: Config,
    folder: AnyJobFolder,
    plan: StartPlan,
    *,
    job_name: str,
    bounded: bool,
    parallelism: int,
    start: dict[str, Any],
    build: Callable[[Lineage], Any],
    failure: FailureTranslation,
    end: dict[str, int] | None = None,
    at_end: Callable[[], None] | None = None,
) -> bool:
    """Run the job ``build`` assembles, as ``plan`` says; True when it ended by itself (``bounded``).

    Begins the lineage the run continues or starts (described by ``parallelism``, ``start``, ``end``),
    prunes what it supersedes, builds the graph for that lineage and executes it (``failure``: see
    :func:`execute`). A detached submission has not finished: its lineage stays open for the next run.
    A bounded run that finished does ``at_end`` and then closes its lineage, so the next run starts at
    the position its output recorded.
    """
    from flink_jobs import resume

    lineage = resume.lineage_for_run(
        folder, plan, bounded=bounded, parallelism=parallelism, start=start, end=end
    )
    folder.begin(lineage)
    folder.prune(lineage, keep_checkpoint=plan.checkpoint)
    result = execute(build(lineage), job_name, cfg, failure)
    if detached(result):
        print("submitted detached: the next run continues from this run's checkpoints", flush=True)
        return False
    if not bounded:
        return False
    if at_end is not None:
        at_end()
    folder.finish(lineage)
    return True


def execute(env: Any, name: str, cfg: Config, failure: FailureTranslation) -> Any:
    """Run the job built on ``env``; a failure ``failure`` translates is raised as its translation (with
    Flink's as the cause), anything else as it is."""
    from runtime.cluster_slots import execute_job

    try:
        return execute_job(env, name, cfg.flink)
    except Exception as exc:
        translated = failure(exc)
        if translated is None:
            raise
        raise translated from exc


def refused_checkpoint(
    checkpoint: Location | None, command: str, *, completing: str | None = None
) -> FailureTranslation:
    """Flink refusing ``checkpoint`` for state the graph has no place for, as the error with the way on
    (``flink_jobs.resume.unrestorable``); no other failure is translated."""

    def translate(exc: Exception) -> Exception | None:
        from flink_jobs.resume import unrestorable

        return None if checkpoint is None else unrestorable(exc, checkpoint, command, completing=completing)

    return translate


@dataclass(frozen=True)
class KafkaJob:
    """What :func:`run_kafka_job` needs besides the graph: where the job's position lives.

    ``build(cfg, **options)`` returns the job's environment given ``bootstrap_servers``, ``bounded``,
    ``end_offsets``, ``start_offsets``, ``checkpoint_dir``, ``resume_from`` and ``run_id`` (and
    ``watermark_seeds`` when ``watermarks``), as ``build_ingest_job`` and ``build_landing_job`` take them.
    """

    #: The job's folder under ``flink.checkpoint_dir`` (``land/<table>``, ``ingest``).
    name: str
    topics: Sequence[str]
    group_id: str
    #: (table uri, app prefix) of the table whose commits record the job's Kafka progress.
    progress_table: tuple[str, str]
    #: The sink of every table the job writes (``sinks.flink.delta_sink.DeltaSinkSpec``): an end-of-input
    #: commit of a run in any of them means that run ended (in part, if not in all); settling a run opens
    #: them.
    tables: Sequence[Any]
    #: Where partitions without recorded progress start (a first run, ``--fresh``).
    starting_offsets: StartingOffsets
    build: Callable[..., Any]
    job_name: str
    #: The job's event-time gate starts from the recorded newest VALID event times (ingest).
    watermarks: bool = False
    #: How the user sets ``starting_offsets``, for the run's first line.
    starting_setting: str = "--starting-offsets"


def run_kafka_job(cfg: Config, job: KafkaJob, *, bounded: bool, fresh: bool, command: str) -> int:
    """Run a Kafka job from where its previous run ended (DESIGN.md section 9); ``bounded``: up to the
    offsets present at start; ``fresh``: without regard to earlier runs.

    The start follows ``flink_jobs.resume.plan_start``: an unbounded run resumes a killed unbounded
    one from its checkpoint; a bounded run that did not finish is completed first with its own end
    offsets; a bounded run after a killed unbounded one settles that run's checkpoint into the tables
    first; otherwise a new lineage starts at the offsets the job's output recorded with its rows
    (partitions without any by ``job.starting_offsets``). Bounded runs stop at the end offsets
    snapshotted here; once the job has finished they commit those offsets to the group (for lag tools;
    the position of record is the output's), close their lineage and list the tables.
    """
    from flink_jobs import resume
    from runtime.flink_env import check_runtime
    from serving.table_summary import print_tables
    from sources.flink.kafka_input import commit_group_offsets, snapshot_end_offsets

    check_runtime(cfg.flink)
    bootstrap = broker(cfg)
    folder = job_folder(cfg, job.name)
    tables = [(t.table.table_uri, t.app_prefix) for t in job.tables]
    plan = plan_run(folder, fresh=fresh, bounded=bounded, kafka=True, tables=tables)
    if plan.action == "complete":
        _complete_bounded_run(cfg, job, folder, plan, bootstrap, command)
        plan = resume.StartPlan("new", reason="the previous bounded run is complete now")
    elif plan.action == "settle":
        assert plan.lineage is not None and plan.checkpoint is not None
        print(
            f"settling the previous run at checkpoint {plan.checkpoint} ({plan.reason}): its tables take "
            "what that checkpoint holds, and this run starts where it ends",
            flush=True,
        )
        resume.settle(job.tables, plan.lineage, plan.checkpoint)
        folder.finish(plan.lineage)
        plan = resume.StartPlan("new", reason="the previous run is settled")

    ends: EndOffsets = {}
    if bounded or plan.action == "new":
        ends = snapshot_end_offsets(bootstrap, job.topics, missing_ok=not bounded)
    start_offsets: EndOffsets | None = None
    seeds: dict[str, int] = {}
    start: dict[str, Any] = {}
    if plan.action == "new":
        recorded, seeds = ({}, {}) if fresh else recorded_kafka_progress(job, ends)
        if seeds:
            seeds = raise_quiet_seeds(cfg, job, seeds)
        start_offsets, notes = resolve_start_offsets(
            bootstrap, job.group_id, sorted(ends), recorded, job.starting_offsets
        )
        print(describe_kafka_start(job, start_offsets, recorded, plan.reason), flush=True)
        for note in notes:
            print(f"warning: {note}", flush=True)
        start = {
            "offsets": {split_name(t, p): o for (t, p), o in sorted(start_offsets.items())},
            "watermarks": seeds,
        }
    else:
        print(f"resuming from checkpoint {plan.checkpoint} ({plan.reason})", flush=True)
    options: dict[str, Any] = {"watermark_seeds": seeds} if job.watermarks else {}
    resume_from = plan.checkpoint

    def build(lineage: Lineage) -> Any:
        return job.build(
            cfg,
            bootstrap_servers=bootstrap,
            bounded=bounded,
            end_offsets=ends if bounded else None,
            start_offsets=start_offsets,
            checkpoint_dir=str(lineage.folder),
            resume_from=resume_from,
            run_id=lineage.run_id,
            **options,
        )

    finished = run_lineage(
        cfg,
        folder,
        plan,
        job_name=job.job_name,
        bounded=bounded,
        parallelism=cfg.flink.parallelism,
        start=start,
        end={split_name(t, p): o for (t, p), o in sorted(ends.items())} if bounded else None,
        build=build,
        failure=refused_checkpoint(plan.checkpoint, command),
        at_end=lambda: commit_group_offsets(bootstrap, job.group_id, ends),
    )
    if finished:
        print_tables(cfg.lakehouse.root)
    return 0


def _complete_bounded_run(
    cfg: Config, job: KafkaJob, folder: AnyJobFolder, plan: StartPlan, bootstrap: str, command: str
) -> None:
    """Finish an interrupted bounded run exactly as it was defined: same run id, parallelism, ends.

    Some writers committed their end of input and others did not. Restored from the run's newest
    checkpoint (or, without one, replayed from where the run started), every writer that committed its
    end stages nothing more (its input is in) and the others commit theirs: exact (DESIGN.md section 9).
    """
    from lakestream.progress import ResumeError
    from sources.flink.kafka_input import commit_group_offsets, parse_split

    lineage = plan.lineage
    assert lineage is not None
    if lineage.end is None or lineage.run_id is None or (plan.checkpoint is None and not lineage.start):
        raise ResumeError(
            f"the bounded run {lineage.run_id} in {lineage.folder} ended in part, and its record lacks what "
            "completing it needs (end offsets, run id, or a checkpoint or start offsets); start over with "
            "--fresh after checking its tables"
        )
    end = {parse_split(k): int(v) for k, v in lineage.end.items()}
    starts = lineage.start.get("offsets", {})
    start_offsets = None if plan.checkpoint else {parse_split(k): int(v) for k, v in starts.items()}
    where = f"checkpoint {plan.checkpoint}" if plan.checkpoint else "where it started"
    print(
        f"completing the interrupted bounded run {lineage.run_id} up to its end offsets, from {where} "
        f"({plan.reason})",
        flush=True,
    )
    folder.prune(lineage, keep_checkpoint=plan.checkpoint)
    seeds = lineage.start.get("watermarks", {})
    options: dict[str, Any] = {"watermark_seeds": seeds} if job.watermarks else {}
    run_cfg = cfg.replace("flink", parallelism=lineage.parallelism)
    env = job.build(
        run_cfg,
        bootstrap_servers=bootstrap,
        bounded=True,
        end_offsets=end,
        start_offsets=start_offsets,
        checkpoint_dir=str(lineage.folder),
        resume_from=plan.checkpoint,
        run_id=lineage.run_id,
        **options,
    )
    name = f"{job.job_name} (completing run {lineage.run_id})"
    execute(env, name, run_cfg, refused_checkpoint(plan.checkpoint, command, completing=lineage.run_id))
    commit_group_offsets(bootstrap, job.group_id, end)
    folder.finish(lineage)


def recorded_kafka_progress(
    job: KafkaJob, partitions: Iterable[tuple[str, int]]
) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
    """The offsets (per partition) and watermark seeds (per split id) the job's output recorded."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakestream.progress import kafka_key, read_progress, watermark_key

    uri, prefix = job.progress_table
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return {}, {}
    parts = sorted(partitions)
    offsets = read_progress(table, prefix, [kafka_key(t, p) for t, p in parts])
    recorded = {(t, p): offsets[kafka_key(t, p)] for t, p in parts if kafka_key(t, p) in offsets}
    seeds: dict[str, int] = {}
    if job.watermarks:
        maxima = read_progress(table, prefix, [watermark_key(t, p) for t, p in parts])
        seeds = {
            split_name(t, p): maxima[watermark_key(t, p)] for t, p in parts if watermark_key(t, p) in maxima
        }
    return recorded, seeds


def raise_quiet_seeds(cfg: Config, job: KafkaJob, seeds: Mapping[str, int]) -> dict[str, int]:
    """``seeds`` (split id -> recorded newest VALID event time) with the quiet partitions raised to the
    horizon of the progress table (``lakestream.horizon``), saying so when it raises any: the same
    horizon ``backfill`` and ``reconcile`` close windows behind, so their old events are late here."""
    from lakestream.horizon import horizon_of
    from lakestream.progress import recorded_watermarks
    from lakestream.time import iso_utc_ms
    from sources.flink.kafka_input import parse_split
    from storage.delta_log import DeltaLog

    et = cfg.event_time
    log = DeltaLog(job.progress_table[0], cache_size=0)
    horizon = horizon_of(recorded_watermarks(log.app_versions()), et.max_out_of_orderness, et.quiet_after)
    if horizon is None:
        return dict(seeds)
    by_partition = {"/".join(map(str, parse_split(split))): split for split in seeds}
    raised = horizon.seeds({p: seeds[split] for p, split in by_partition.items()})
    out = {by_partition[p]: ms for p, ms in raised.items()}
    lifted = sorted(split for split in out if out[split] != seeds[split])
    if lifted:
        shown = ", ".join(f"{s} (newest {iso_utc_ms(seeds[s])})" for s in lifted[:4])
        more = f" and {len(lifted) - 4} more" if len(lifted) > 4 else ""
        print(
            f"quiet partitions {shown}{more} trail the newest by more than event_time.quiet_after: they "
            f"start at the horizon {iso_utc_ms(horizon.watermark_ms)}, so their events older than it are "
            "late (windows behind it belong to backfill and reconcile)",
            flush=True,
        )
    return out


def describe_kafka_start(
    job: KafkaJob, offsets: Mapping[tuple[str, int], int], recorded: Mapping[tuple[str, int], int], why: str
) -> str:
    """The run's first line: where each partition starts and on whose record."""
    shown = ", ".join(f"{split_name(t, p)} at {o}" for (t, p), o in sorted(offsets.items())[:6])
    more = f" and {len(offsets) - 6} more" if len(offsets) > 6 else ""
    if recorded:
        source = f"the offsets {job.progress_table[0]} recorded with its rows"
        others = len(offsets) - len(recorded)
        if others:
            source += f" ({others} partition(s) without one by {job.starting_setting} {job.starting_offsets})"
    else:
        source = f"{job.starting_setting} {job.starting_offsets} (nothing recorded yet)"
    return f"starting {job.name} from {source}: {shown}{more} ({why})"
