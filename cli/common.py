"""What every ``lakestream`` sub-command shares: its flags, its registration and its configuration.

Each ``cli.cmd_*`` module registers one sub-command with these helpers; ``cli.main`` puts the parser
together and turns errors into exit codes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream.config import CONFIG_FLAG, Config, load_config
from storage.delta_log import is_local_uri, local_path
from storage.local_files import check_writable_folder
from storage.object_store import check_conditional_writes, export_settings, open_store

if TYPE_CHECKING:  # pragma: no cover
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    SubParsers = Any


#: The flags several sub-commands take, each declared once: name -> (option strings, add_argument options).
SHARED_FLAGS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "config": CONFIG_FLAG,
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


def add_group(
    subparsers: SubParsers, name: str, *, dest: str, **parser_options: Any
) -> tuple[argparse.ArgumentParser, SubParsers]:
    """Register command group ``name`` (``lakestream maintain``, ``lakestream query``) and return it with
    the parsers of its operations, one of which is required (its name lands in ``args.<dest>``).

    ``parser_options`` are those of :func:`add_command`; the description is shown as written.
    """
    parent = add_command(
        subparsers,
        name,
        func=lambda _args: 2,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **parser_options,
    )
    return parent, parent.add_subparsers(dest=dest, required=True)


def load(args: argparse.Namespace, *, writes: bool = False) -> Config:
    """The validated configuration, with ``--lakehouse`` / ``--bootstrap-servers`` applied over it.

    ``writes``: the command writes under ``lakehouse.root``, so a local root must be a folder it can
    create and write, and a root on an object store must take a conditional create (which also proves
    the bucket, the credentials and the endpoint); that is checked here, before anything starts (the
    checkpoint folder is checked where a job opens it, ``flink_jobs.lifecycle.job_folder``).
    """
    cfg = load_config(getattr(args, "config", None))
    if getattr(args, "lakehouse", None):
        cfg = cfg.replace("lakehouse", root=args.lakehouse)
    if getattr(args, "bootstrap_servers", None):
        cfg = cfg.replace("kafka", bootstrap_servers=args.bootstrap_servers)
    export_settings(cfg.storage)
    root = cfg.lakehouse.root
    if writes and is_local_uri(root):
        check_writable_folder(Path(local_path(root)), setting="lakehouse.root")
    elif writes:
        check_conditional_writes(open_store(root), root)
    return cfg


def under_root(*tables: str) -> bool:
    """Whether any of ``tables`` (TABLE arguments) names a table under ``lakehouse.root`` rather than a
    path or URI of its own, as ``maintenance.facts.resolve_table`` reads them."""
    return any("://" not in name and not Path(name).is_absolute() for name in tables)
