"""``lakestream demo``: the main job end to end on the embedded default, in one command.

Starts a local Kafka broker (unless ``kafka.bootstrap_servers`` names one), produces a seeded sample of
messy events for the four sources, runs the ingest job bounded on a local MiniCluster (or submits it
with ``flink run`` when ``flink.jobmanager`` is set), and prints where the tables are and their row counts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from devtools.sample_events import SampleSettings, by_source, generate, produce
from flink_jobs.cli_common import JobFailedError, SubParsers, add_command, load
from lakestream import paths
from lakestream.config import Config


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send file descriptors 1 and 2 to ``path`` while the MiniCluster starts and runs.

    The MiniCluster JVM and its Python workers inherit stdout when they start, and PyFlink's workers
    print harmless gRPC tear-down tracebacks when a bounded job ends (even at interpreter exit). The
    JVM keeps the log file as its output for its whole life; the demo keeps the terminal for its own
    report. A failure still surfaces as the exception of ``execute``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with path.open("ab") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


@contextlib.contextmanager
def _broker(cfg: Config) -> Iterator[str]:
    if not cfg.kafka.embedded:
        yield cfg.kafka.bootstrap_servers
        return
    from devtools.kafka_broker import LocalKafka

    data_dir = paths.STATE_DIR / "demo-kafka"
    shutil.rmtree(data_dir, ignore_errors=True)
    print("starting the embedded Kafka broker ...", flush=True)
    with LocalKafka.start(data_dir=data_dir) as broker:
        print(f"kafka at {broker.bootstrap_servers}", flush=True)
        yield broker.bootstrap_servers


def _submit(cfg: Config, bootstrap: str, args: list[str]) -> None:
    """Run the job on the cluster at ``flink.jobmanager`` with ``flink run -py``."""
    from lakestream.flink_runtime import flink_home

    entry = Path(__file__).resolve().parent / "__main__.py"
    cmd = [
        "bash",
        str(flink_home() / "bin" / "flink"),
        "run",
        "-m",
        cfg.flink.jobmanager,
        "-pyexec",
        sys.executable,
    ]
    cmd += ["-pyclientexec", sys.executable, "-py", str(entry), *args]
    done = subprocess.run(cmd, check=False, env={**_env(cfg, bootstrap)})
    if done.returncode != 0:
        raise JobFailedError(
            f"`flink run` to {cfg.flink.jobmanager} exited with {done.returncode} (output above)"
        )


def check_demo_slots(cfg: Config) -> None:
    """Fail in seconds, before any work, when the cluster at ``flink.jobmanager`` lacks the slots.

    The ingest graph needs ``flink.parallelism`` slots: every stage runs at that parallelism and the
    silver committer at 1, all in one slot-sharing group (tests/integration/test_job_slots.py).
    """
    from lakestream.cluster_slots import REST_ERRORS, require_slots
    from lakestream.flink_runtime import FlinkRuntimeError

    address = cfg.flink.jobmanager
    try:
        require_slots(address, cfg.flink.parallelism, cfg.flink.parallelism)
    except REST_ERRORS as exc:
        raise FlinkRuntimeError(
            f"cannot read the Flink REST API at http://{address}/overview ({exc}): set flink.jobmanager "
            "(LAKESTREAM__FLINK__JOBMANAGER) to a running JobManager's REST host:port"
        ) from exc


def _env(cfg: Config, bootstrap: str) -> dict[str, str]:
    return {
        **os.environ,
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LAKESTREAM__LAKEHOUSE__ROOT": cfg.lakehouse.root,
    }


def run_demo(cfg: Config, *, events: int) -> int:
    """Produce sample events, ingest them bounded, print the tables; returns the exit code."""
    from devtools.kafka_broker import create_topic
    from flink_jobs.tables import print_tables

    if cfg.flink.jobmanager:
        check_demo_slots(cfg)
    # The demo owns <root>/demo and starts it empty, so running it twice gives the same tables.
    demo_root = Path(cfg.lakehouse.root) / "demo"
    if "://" not in cfg.lakehouse.root:
        shutil.rmtree(demo_root, ignore_errors=True)
    cfg = cfg.replace("lakehouse", root=str(demo_root))
    orders = max(1, events // 6)
    sample = generate(SampleSettings(orders=orders, source_zone=cfg.event_time.source_zone))
    with _broker(cfg) as bootstrap:
        cfg = cfg.replace("kafka", bootstrap_servers=bootstrap)
        for topic in cfg.kafka.topics.values():
            create_topic(bootstrap, topic, partitions=2)
        counts = produce(bootstrap, dict(cfg.kafka.topics), sample)
        per_source = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"produced {len(sample)} sample events ({per_source})", flush=True)
        started = time.monotonic()
        if cfg.flink.jobmanager:
            _submit(cfg, bootstrap, ["ingest", "--bounded"])
        else:
            from flink_jobs.ingest import build_ingest_job

            log = paths.STATE_DIR / "logs" / "demo-flink.log"
            print(f"running the ingest job on a local MiniCluster (Flink log: {log}) ...", flush=True)
            with _output_to(log):
                env = build_ingest_job(cfg, bootstrap_servers=bootstrap, bounded=True)
                env.execute("lakestream-demo-ingest")
        print(f"ingest finished in {time.monotonic() - started:.1f}s", flush=True)
    print_tables(cfg.lakehouse.root)
    by = by_source(sample)
    print(
        f"(sample: {len(by['orders_db'])} order changes, {len(by['payments'])} payments, "
        f"{len(by['logistics'])} logistics pushes, {len(by['behaviour'])} behaviour logs)"
    )
    return 0


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream demo`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "demo",
        func=cmd_demo,
        flags=("lakehouse", "bootstrap_servers"),
        help="embedded broker + sample events + the main job, bounded",
    )
    p.add_argument("--events", type=int, default=2000, help="sample events to produce")
    return p


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the main job end to end on the embedded default and show the tables it wrote."""
    return run_demo(load(args), events=args.events)
