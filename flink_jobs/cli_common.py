"""What every ``lakestream`` sub-command shares: its flags, configuration, broker, checkpoints and run.

Job modules (``land``, ``ingest``, ``changefeed``, ``demo``) build their graphs and register their
sub-commands with these helpers; ``flink_jobs.cli`` puts the parser together and turns errors into
exit codes. This module imports no job module and not the CLI, so there is no import circle.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream.config import Config, ConfigError, load_config

if TYPE_CHECKING:  # pragma: no cover
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


def checkpoints(cfg: Config, job: str, *, resume: bool) -> tuple[str, Path | None]:
    """Per-job checkpoint folder, and the retained checkpoint to resume from (unbounded runs).

    Like Spark's checkpointLocation: a restarted unbounded job continues from its last completed
    checkpoint (Kafka positions, keyed state, the sink's run id), which keeps it exactly once across
    process restarts. ``--fresh`` starts over from the consumer group's committed offsets instead.
    """
    from lakestream.flink_runtime import latest_checkpoint

    folder = Path(cfg.flink.checkpoint_dir) / job.replace("/", "-")
    resume_from = latest_checkpoint(folder) if resume else None
    if resume_from is not None:
        print(f"resuming from checkpoint {resume_from}", flush=True)
    return str(folder), resume_from


def run_kafka_job(
    cfg: Config,
    args: argparse.Namespace,
    *,
    job: str,
    topics: Sequence[str],
    group_id: str,
    build: Callable[..., Any],
    job_name: str,
) -> int:
    """Run a job that reads ``topics`` as consumer group ``group_id`` (``--bounded``, ``--fresh``).

    ``build`` returns the job's environment given ``bootstrap_servers``, ``bounded``, ``end_offsets``,
    ``checkpoint_dir`` and ``resume_from`` (as ``build_ingest_job`` and ``build_landing_job`` take them).
    Bounded runs stop at the end offsets snapshotted here; once the job has finished they commit
    those offsets to the group (so the next run starts where this one ended) and list the tables.
    Unbounded runs resume from the job's newest retained checkpoint unless ``--fresh``.
    """
    from flink_jobs.kafka_input import commit_group_offsets, snapshot_end_offsets
    from flink_jobs.tables import print_tables
    from lakestream.cluster_slots import execute_job

    bootstrap = broker(cfg)
    end_offsets = snapshot_end_offsets(bootstrap, topics) if args.bounded else None
    checkpoint_dir, resume_from = checkpoints(cfg, job, resume=not (args.bounded or args.fresh))
    env = build(
        bootstrap_servers=bootstrap,
        bounded=args.bounded,
        end_offsets=end_offsets,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
    )
    execute_job(env, job_name, cfg.flink)
    if end_offsets is not None:
        commit_group_offsets(bootstrap, group_id, end_offsets)
        print_tables(cfg.lakehouse.root)
    return 0
