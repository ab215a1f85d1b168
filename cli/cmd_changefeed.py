"""``lakestream changefeed``: a Delta table's change data feed to an audit table or Kafka, exactly once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cli.common import SubParsers, add_command, load
from flink_jobs import changefeed
from flink_jobs.changefeed import ChangefeedTarget, app_prefix, build_changefeed_job, resolve_table
from flink_jobs.lifecycle import JobFailedError, broker, detached, job_folder
from flink_jobs.positions_topic import default_positions_topic
from lakestream.config import Config, parse_duration
from sources.offsets import SourceOffset

if TYPE_CHECKING:  # pragma: no cover
    from flink_jobs.resume import JobFolder, StartPlan


def _from_version(text: str) -> int | Literal["latest"]:
    if text == "latest":
        return "latest"
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a version number or 'latest', got {text!r}")
    return int(text)


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream changefeed`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "changefeed",
        func=cmd_changefeed,
        flags=("lakehouse", "bootstrap_servers", "fresh", "job_name"),
        help="stream a Delta table's change data feed to an audit Delta table or a Kafka topic, exactly once",
        description=changefeed.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--table", required=True, help="source table under the lakehouse root, e.g. silver/orders")
    p.add_argument("--to", required=True, type=ChangefeedTarget.parse, help="delta:PATH or kafka:TOPIC")
    p.add_argument(
        "--from-version",
        type=_from_version,
        default=None,
        help="first version to emit, or 'latest', for a first run or with --fresh (a later run continues "
        "where the previous one ended); default: the current table as inserts, then its changes",
    )
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--max-bytes-per-trigger", type=int, default=None)
    p.add_argument("--poll-interval", default="1s", help="time between polls of the Delta log (e.g. 500ms)")
    p.add_argument(
        "--polls", type=int, default=None, help="stop after this many polls (default: run forever)"
    )
    p.add_argument(
        "--no-fail-on-data-loss",
        dest="fail_on_data_loss",
        action="store_false",
        help="skip versions/files removed by retention or VACUUM (counted in metrics) instead of failing",
    )
    p.add_argument("--schema-changes", choices=["fail", "additive"], default="fail")
    p.add_argument(
        "--at-least-once",
        dest="exactly_once",
        action="store_false",
        help="Kafka output without transactions (duplicates possible after failures)",
    )
    p.add_argument(
        "--from-checkpoint",
        default=None,
        help="resume from this retained checkpoint or savepoint (default: the previous run's newest one, "
        "else the position its output recorded)",
    )
    p.add_argument(
        "--positions-topic",
        default=None,
        help="kafka:TOPIC output: the compacted topic its positions are recorded in, in the same "
        "transactions as the changes (default: TOPIC.lakestream-positions, created when missing)",
    )
    return p


def cmd_changefeed(args: argparse.Namespace) -> int:
    """Run the change-feed job until it is cancelled (or for ``--polls`` polls), from where the previous
    run ended (DESIGN.md section 9)."""
    from flink_jobs.positions_topic import ensure_positions_topic
    from flink_jobs.resume import lineage_for_run
    from runtime.flink_env import check_runtime

    cfg = load(args)
    check_runtime(cfg.flink)
    target: ChangefeedTarget = args.to
    bootstrap = broker(cfg) if target.kind == "kafka" else None
    positions_topic = (args.positions_topic or default_positions_topic(target.value)) if bootstrap else None
    folder = job_folder(cfg, f"changefeed/{args.table}/{target.kind}/{target.value}")
    if bootstrap and positions_topic:
        ensure_positions_topic(bootstrap, positions_topic)
    plan = changefeed_start_plan(cfg, args, folder)
    start = None if args.fresh else recorded_position(cfg, args.table, target, positions_topic, bootstrap)
    if plan.action == "restore":
        print(f"resuming from checkpoint {plan.checkpoint} ({plan.reason})", flush=True)
    else:
        print(describe_start(args, start, plan.reason, positions_topic), flush=True)
    if args.from_version is not None and not args.fresh and (start is not None or plan.action == "restore"):
        print(
            f"note: --from-version {args.from_version} applies to a first run or with --fresh only; this run "
            "continues where the previous one ended (add --fresh to start there again)",
            flush=True,
        )
    lineage = lineage_for_run(
        folder,
        plan,
        bounded=args.polls is not None,
        parallelism=1,
        start={"offset": start.to_json() if start is not None else None},
    )
    folder.begin(lineage)
    folder.prune(lineage, keep_checkpoint=plan.checkpoint)
    env = build_changefeed_job(
        cfg,
        table=args.table,
        target=target,
        from_version=args.from_version,
        max_files_per_trigger=args.max_files_per_trigger,
        max_bytes_per_trigger=args.max_bytes_per_trigger,
        poll_interval=parse_duration(args.poll_interval, key="--poll-interval"),
        polls=args.polls,
        fail_on_data_loss=args.fail_on_data_loss,
        schema_changes=args.schema_changes,
        bootstrap_servers=bootstrap,
        exactly_once=args.exactly_once,
        restore_from=plan.checkpoint,
        checkpoint_dir=str(lineage.folder),
        start=start,
        positions_topic=positions_topic,
        run_id=lineage.run_id,
    )
    from runtime.cluster_slots import execute_job

    job_name = args.job_name or f"lakestream-changefeed {args.table} -> {args.to.kind}:{args.to.value}"
    try:
        result = execute_job(env, job_name, cfg.flink)
    except Exception as exc:  # the job failed inside Flink: surface the source's own message
        reason = source_failure(str(exc))
        if reason is None:
            raise
        raise JobFailedError(reason) from exc
    if detached(result):
        print("submitted detached: the next run continues from this run's checkpoints", flush=True)
    elif args.polls is not None:
        folder.finish(lineage)
    return 0


def changefeed_start_plan(cfg: Config, args: argparse.Namespace, folder: JobFolder) -> StartPlan:
    """Where the run starts (``flink_jobs.resume.plan_start``). The change feed has one writer, whose
    recorded position is exact after any commit: a run that ended by itself is never completed."""
    from flink_jobs.resume import StartPlan, lineage_ended, plan_start, table_txn_version

    if args.from_checkpoint:
        path = Path(args.from_checkpoint).resolve()
        owner = next((lin for lin in folder.lineages() if lin.folder in path.parents), None)
        return StartPlan("restore", owner, path, "--from-checkpoint")
    newest = None if args.fresh else folder.newest()
    ended = False
    if newest is not None and args.to.kind == "delta":
        audit = (resolve_table(cfg, args.to.value), app_prefix(args.table))
        ended = lineage_ended([audit], newest.run_id, newest.widest, txn_version=table_txn_version)
    return plan_start(
        fresh=args.fresh,
        newest=newest,
        checkpoint=folder.checkpoint(newest) if newest is not None else None,
        legacy=None if args.fresh else folder.legacy_checkpoint(),
        ended=ended,
        bounded=args.polls is not None,
        kafka=False,
    )


def recorded_position(
    cfg: Config, table: str, target: ChangefeedTarget, positions_topic: str | None, bootstrap: str | None
) -> SourceOffset | None:
    """The source position the output recorded with its last changes (None: nothing recorded yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from flink_jobs.positions_topic import parse_position, read_position
    from lakestream.progress import read_progress
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
    args: argparse.Namespace, start: SourceOffset | None, why: str, positions_topic: str | None
) -> str:
    """The first line of a run that starts without a checkpoint: where, and on whose record."""
    where = f"{args.to.kind}:{args.to.value}" if positions_topic is None else positions_topic
    if start is not None:
        by = "the previous run's last changes" if positions_topic else "the previous run's last commit"
        return f"resuming changefeed of {args.table} at {start.describe()} (recorded by {by} in {where})"
    if args.from_version == "latest":
        first = "the first version after the current one"
    elif args.from_version is not None:
        first = f"version {args.from_version}"
    else:
        first = "the current table as inserts, then its changes"
    because = why if args.fresh else f"nothing recorded in {where} yet"
    return f"starting changefeed of {args.table} at {first} ({because})"


def source_failure(text: str) -> str | None:
    """The ``sources.errors`` exception line in a Flink job failure (Python traceback inside), if any."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith("sources.errors."):
            return stripped[len("sources.errors.") :]
    return None
