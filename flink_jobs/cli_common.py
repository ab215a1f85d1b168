"""What every ``lakestream`` sub-command shares: its flags, configuration, broker, checkpoints and run.

Job modules (``land``, ``ingest``, ``changefeed``, ``demo``) build their graphs and register their
sub-commands with these helpers; ``flink_jobs.cli`` puts the parser together and turns errors into
exit codes. This module imports no job module and not the CLI, so there is no import circle.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flink_jobs.kafka_input import EndOffsets, StartingOffsets, resolve_start_offsets, split_name
from lakestream.config import Config, ConfigError, load_config

if TYPE_CHECKING:  # pragma: no cover
    from flink_jobs.resume import JobFolder, StartPlan

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    SubParsers = Any


class JobFailedError(RuntimeError):
    """The job ran and failed for a reason the message says (exit code 1)."""


#: The flags several sub-commands take, each declared once: name -> (option strings, add_argument options).
SHARED_FLAGS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "config": (("--config",), {"type": Path, "help": "TOML config file (see config/)"}),
    "lakehouse": (("--lakehouse",), {"help": "override lakehouse.root (where Delta tables live)"}),
    "bootstrap_servers": (("--bootstrap-servers",), {"help": "override kafka.bootstrap_servers"}),
    "bounded": (
        ("--bounded",),
        {
            "action": "store_true",
            "help": "read up to the offsets present at start, commit everything, then stop",
        },
    ),
    "fresh": (
        ("--fresh",),
        {"action": "store_true", "help": "do not resume from the job's last retained checkpoint"},
    ),
    "job_name": (("--job-name",), {"default": None, "help": "Flink job name"}),
}


def add_flags(parser: argparse.ArgumentParser, *names: str, **overrides: Any) -> None:
    """Add the shared flags ``names`` (keys of :data:`SHARED_FLAGS`) to ``parser``."""
    for name in names:
        option_strings, options = SHARED_FLAGS[name]
        parser.add_argument(*option_strings, **{**options, **overrides})


def add_command(
    subparsers: SubParsers,
    name: str,
    *,
    func: Callable[[argparse.Namespace], int],
    flags: Sequence[str] = (),
    **parser_options: Any,
) -> argparse.ArgumentParser:
    """Register sub-command ``name`` running ``func(args)``, with ``--config`` and the shared ``flags``.

    ``--config`` is accepted before or after the sub-command (``lakestream --config F ingest`` and
    ``lakestream ingest --config F``); given after, it wins.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(name, **parser_options)
    add_flags(parser, "config", default=argparse.SUPPRESS)
    add_flags(parser, *flags)
    parser.set_defaults(func=func)
    return parser


def load(args: argparse.Namespace) -> Config:
    """The validated configuration, with ``--lakehouse`` / ``--bootstrap-servers`` applied over it."""
    cfg = load_config(getattr(args, "config", None))
    if getattr(args, "lakehouse", None):
        cfg = cfg.replace("lakehouse", root=args.lakehouse)
    if getattr(args, "bootstrap_servers", None):
        cfg = cfg.replace("kafka", bootstrap_servers=args.bootstrap_servers)
    return cfg


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


def job_folder(cfg: Config, job: str) -> JobFolder:
    """The checkpoint folder of ``job`` (its lineages, ``flink_jobs.resume``)."""
    from flink_jobs.resume import JobFolder

    return JobFolder(Path(cfg.flink.checkpoint_dir) / job.replace("/", "-"))


def detached(result: Any) -> bool:
    """Whether ``env.execute`` only submitted the job (``flink run -d``): it has not finished yet."""
    j_result = getattr(result, "_j_job_execution_result", None)
    return j_result is not None and j_result.getClass().getSimpleName() == "DetachedJobExecutionResult"


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
    #: The sink of every table the job writes (``udfs.delta_sink.DeltaSinkSpec``): an end-of-input commit
    #: of a run in any of them means that run ended (in part, if not in all); settling a run opens them.
    tables: Sequence[Any]
    #: Where partitions without recorded progress start (a first run, ``--fresh``).
    starting_offsets: StartingOffsets
    build: Callable[..., Any]
    job_name: str
    #: The job's event-time gate starts from the recorded newest VALID event times (ingest).
    watermarks: bool = False
    #: How the user sets ``starting_offsets``, for the run's first line.
    starting_setting: str = "--starting-offsets"


def run_kafka_job(cfg: Config, args: argparse.Namespace, job: KafkaJob) -> int:
    """Run a Kafka job (``--bounded``, ``--fresh``) from where its previous run ended (DESIGN.md section 9).

    The start follows ``flink_jobs.resume.plan_start``: an unbounded run resumes a killed unbounded
    one from its checkpoint; a bounded run that did not finish is completed first with its own end
    offsets; a bounded run after a killed unbounded one settles that run's checkpoint into the tables
    first; otherwise a new lineage starts at the offsets the job's output recorded with its rows
    (partitions without any by ``job.starting_offsets``). Bounded runs stop at the end offsets
    snapshotted here; once the job has finished they commit those offsets to the group (for lag tools;
    the position of record is the output's), close their lineage and list the tables.
    """
    from flink_jobs import resume
    from flink_jobs.kafka_input import commit_group_offsets, snapshot_end_offsets
    from flink_jobs.tables import print_tables
    from lakestream.flink_runtime import check_runtime

    check_runtime(cfg.flink)
    bootstrap = broker(cfg)
    folder = job_folder(cfg, job.name)
    newest = None if args.fresh else folder.newest()
    checkpoint = folder.checkpoint(newest) if newest is not None else None
    ended = newest is not None and resume.lineage_ended(
        [(t.table_uri, t.app_prefix) for t in job.tables],
        newest.run_id,
        newest.widest,
        txn_version=resume.table_txn_version,
    )
    plan = resume.plan_start(
        fresh=args.fresh,
        newest=newest,
        checkpoint=checkpoint,
        legacy=None if args.fresh else folder.legacy_checkpoint(),
        ended=ended,
        bounded=args.bounded,
        kafka=True,
    )
    if plan.action == "complete":
        _complete_bounded_run(cfg, job, plan, bootstrap, args.command)
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
    if args.bounded or plan.action == "new":
        ends = snapshot_end_offsets(bootstrap, job.topics, missing_ok=not args.bounded)
    start_offsets: EndOffsets | None = None
    seeds: dict[str, int] = {}
    start: dict[str, Any] = {}
    if plan.action == "new":
        recorded, seeds = ({}, {}) if args.fresh else recorded_kafka_progress(job, ends)
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
    lineage = resume.lineage_for_run(
        folder,
        plan,
        bounded=args.bounded,
        parallelism=cfg.flink.parallelism,
        start=start,
        end={split_name(t, p): o for (t, p), o in sorted(ends.items())} if args.bounded else None,
    )
    folder.begin(lineage)
    folder.prune(lineage, keep_checkpoint=plan.checkpoint)
    options: dict[str, Any] = {"watermark_seeds": seeds} if job.watermarks else {}
    env = job.build(
        cfg,
        bootstrap_servers=bootstrap,
        bounded=args.bounded,
        end_offsets=ends if args.bounded else None,
        start_offsets=start_offsets,
        checkpoint_dir=str(lineage.folder),
        resume_from=plan.checkpoint,
        run_id=lineage.run_id,
        **options,
    )
    result = _execute(env, job.job_name, cfg, plan.checkpoint, args.command)
    if detached(result):
        print("submitted detached: the next run continues from this run's checkpoints", flush=True)
        return 0
    if args.bounded:
        commit_group_offsets(bootstrap, job.group_id, ends)
        folder.finish(lineage)
        print_tables(cfg.lakehouse.root)
    return 0


def _execute(
    env: Any, name: str, cfg: Config, checkpoint: Path | None, command: str, *, completing: str | None = None
) -> Any:
    """Run the job built on ``env``; Flink refusing ``checkpoint`` for state this graph has no place
    for becomes the error with the way on (``resume.unrestorable``), anything else is raised as it is."""
    from flink_jobs.resume import unrestorable
    from lakestream.cluster_slots import execute_job

    try:
        return execute_job(env, name, cfg.flink)
    except Exception as exc:
        refused = (
            None if checkpoint is None else unrestorable(exc, checkpoint, command, completing=completing)
        )
        if refused is not None:
            raise refused from exc
        raise


def _complete_bounded_run(cfg: Config, job: KafkaJob, plan: StartPlan, bootstrap: str, command: str) -> None:
    """Finish an interrupted bounded run exactly as it was defined: same run id, parallelism, ends.

    Some writers committed their end of input and others did not. Restored from the run's newest
    checkpoint (or, without one, replayed from where the run started), every writer that committed its
    end stages nothing more (its input is in) and the others commit theirs: exact (DESIGN.md section 9).
    """
    from flink_jobs.kafka_input import commit_group_offsets, parse_split
    from flink_jobs.resume import ResumeError, job_folder_of

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
    folder = job_folder_of(lineage)
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
    _execute(env, name, run_cfg, plan.checkpoint, command, completing=lineage.run_id)
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
