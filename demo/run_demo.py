"""``lakestream demo``: the main job end to end on the embedded default, in one command, showing its work.

Starts a local Kafka broker (unless ``kafka.bootstrap_servers`` names one), runs the ingest job bounded
in a child process (a local MiniCluster, or ``flink run`` when ``flink.jobmanager`` is set) and feeds it
a seeded sample of messy events: a share at once, the rest at a steady pace while the job runs. Live
progress (events produced, rows committed per table, late, duplicates, quarantined, checkpoints) comes
from the producer and the tables' Delta logs; at the end it prints each table's path, rows and version,
how to query them, and writes an HTML report with plots. Ctrl-C stops the job, the producer and the
broker, leaving no process behind, and exits 130.

The lakehouse root may be an object store (``s3://...``, reached with ``[storage]`` and the AWS
variables); ``--object-store`` starts the local S3 server (``lakestream s3 start``'s) and puts the
demo's tables and checkpoints on it (:func:`local_object_store`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from demo.job_process import JobProcess
from demo.live_view import LiveView, ProgressMode, Snapshot, Watcher
from devtools.sample_events import SampleSettings, generate
from flink_jobs.lifecycle import JobFailedError
from lakestream import paths
from lakestream.config import Config, ConfigError
from lakestream.table_names import TABLES
from runtime.flink_env import on_object_store
from storage.delta_log import location
from storage.local_files import check_writable_folder
from storage.object_store import export_settings, is_object_store

if TYPE_CHECKING:
    from devtools.s3_server import S3Status

#: The demo's own consumer group: its runs never move the committed offsets of a real ingest job.
DEMO_GROUP = "lakestream-demo"
#: Longest wait for the job's tables to appear before the paced events are sent anyway.
JOB_START_TIMEOUT_S = 180.0
#: Seconds between polls of the tables (the live view's redraw rate).
POLL_S = 0.5


class DemoInterrupted(Exception):
    """Ctrl-C (SIGINT) or SIGTERM reached the demo; carries the signal number.

    Not a ``LakestreamError``: the demo catches it to stop its processes and exit 128 + the signal number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupts:
    """Turns the first SIGINT/SIGTERM into :class:`DemoInterrupted`; ignores further ones meanwhile.

    So a second Ctrl-C cannot cut the clean-up of the first short and leave a JVM behind. Inside
    :meth:`held` (a redraw of the live view) the interruption waits until the block is done, so the
    terminal is never left with a half-drawn frame.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._holding = 0
        self._raised = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler."""
        if self.signum is not None:
            return
        self.signum = signum
        if not self._holding:
            self._raise()

    def _raise(self) -> None:
        assert self.signum is not None
        self._raised = True
        raise DemoInterrupted(self.signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Run the block whole; an interruption that came meanwhile is raised at its end."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        if not self._holding and self.signum is not None and not self._raised:
            self._raise()


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[Interrupts]:
    """Install :class:`Interrupts` for SIGINT and SIGTERM for the block; the previous handlers after."""
    interrupts = Interrupts()
    previous = {s: signal.signal(s, interrupts.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupts
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _broker(cfg: Config, view: LiveView) -> Iterator[str]:
    if not cfg.kafka.embedded:
        yield cfg.kafka.bootstrap_servers
        return
    from devtools.kafka_broker import LocalKafka

    data_dir = paths.STATE_DIR / "demo-kafka"
    shutil.rmtree(data_dir, ignore_errors=True)
    view.note("starting the embedded Kafka broker ...")
    with LocalKafka.start(data_dir=data_dir) as broker:
        view.note(f"kafka at {broker.bootstrap_servers}")
        yield broker.bootstrap_servers


def _submit(cfg: Config, entry_args: list[str]) -> list[str]:
    """The ``flink run -py`` command that runs the demo's job on the cluster at ``flink.jobmanager``."""
    from runtime.flink_env import flink_home

    entry = Path(__file__).resolve().parent / "demo_job.py"
    cmd = [
        "bash",
        str(flink_home() / "bin" / "flink"),
        "run",
        "-m",
        cfg.flink.jobmanager,
        "-pyexec",
        sys.executable,
    ]
    return cmd + ["-pyclientexec", sys.executable, "-py", str(entry), *entry_args]


def check_demo_slots(cfg: Config) -> None:
    """Fail in seconds, before any work, when the cluster at ``flink.jobmanager`` lacks the slots.

    The ingest graph needs ``flink.parallelism`` slots: every stage runs at that parallelism and the
    silver committer at 1, all in one slot-sharing group (tests/integration/test_job_slots.py).
    """
    from runtime.cluster_slots import REST_ERRORS, require_slots
    from runtime.flink_env import FlinkRuntimeError

    address = cfg.flink.jobmanager
    try:
        require_slots(address, cfg.flink.parallelism, cfg.flink.parallelism)
    except REST_ERRORS as exc:
        raise FlinkRuntimeError(
            f"cannot read the Flink REST API at http://{address}/overview ({exc}): set flink.jobmanager "
            "(LAKESTREAM__FLINK__JOBMANAGER) to a running JobManager's REST host:port"
        ) from exc


def _env(cfg: Config, bootstrap: str) -> dict[str, str]:
    """The job process's environment: this one (with the AWS variables of an object store) plus the
    settings the demo chose, as overrides."""

    def toml(value: str) -> str:
        return json.dumps(value)  # a TOML basic string

    return {
        **os.environ,
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LAKESTREAM__LAKEHOUSE__ROOT": cfg.lakehouse.root,
        "LAKESTREAM__KAFKA__GROUP_ID": toml(cfg.kafka.group_id),
        "LAKESTREAM__KAFKA__STARTING_OFFSETS": toml("committed"),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": toml(cfg.flink.checkpoint_dir),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": toml(
            f"{int(cfg.flink.checkpoint_interval.total_seconds() * 1000)}ms"
        ),
        "LAKESTREAM__STORAGE__ENDPOINT": toml(cfg.storage.endpoint),
        "LAKESTREAM__STORAGE__REGION": toml(cfg.storage.region),
        "LAKESTREAM__STORAGE__PATH_STYLE": str(cfg.storage.path_style).lower(),
        "LAKESTREAM__STORAGE__ALLOW_HTTP": str(cfg.storage.allow_http).lower(),
    }


_JOB_ID = re.compile(r"JobID ([0-9a-f]{32})")


def _cancel_cluster_job(jobmanager: str, log_text: str) -> str:
    """Cancel the job that ``flink run`` submitted (its id from the client's output); what happened."""
    ids = _JOB_ID.findall(log_text)
    if not ids:
        return "the job was not submitted yet"
    url = f"http://{jobmanager}/jobs/{ids[-1]}?mode=cancel"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="PATCH"), timeout=10).close()
    except OSError as exc:
        return f"cancelling job {ids[-1]} failed ({exc}): run `flink cancel -m {jobmanager} {ids[-1]}`"
    return f"job {ids[-1]} cancelled on {jobmanager}"


def local_object_store(cfg: Config, view: LiveView) -> tuple[Config, S3Status]:
    """``--object-store``: the local S3 server and the configuration that puts the demo on it.

    The server is ``lakestream s3 start``'s (started unless it runs, data in ``STATE_DIR/s3``) and keeps
    running after the demo, so the commands the summary prints work. Tables go under
    ``s3://lakestream`` (or ``lakehouse.root`` when that is on S3), checkpoints under
    ``s3://<bucket>/checkpoints`` (or ``flink.checkpoint_dir`` when on S3). Its key pair reaches the
    job and the demo's own reads as the AWS variables of this process, nowhere else.
    """
    from devtools.s3_server import DEFAULT_BUCKET, S3ServerError, start_detached

    if cfg.flink.jobmanager:
        raise ConfigError(
            "--object-store: the local S3 server serves the demo's own MiniCluster; for the cluster at "
            "flink.jobmanager set lakehouse.root and flink.checkpoint_dir to s3:// URIs and [storage] to "
            "a store its TaskManagers reach (docs/object-storage.md)"
        )
    root = cfg.lakehouse.root if is_object_store(cfg.lakehouse.root) else f"s3://{DEFAULT_BUCKET}"
    bucket = urlparse(root).netloc
    checkpoints = cfg.flink.checkpoint_dir
    if not on_object_store(checkpoints):
        checkpoints = f"s3://{bucket}/checkpoints"
    view.note("starting the local S3 server ...")
    status = start_detached(buckets=sorted({bucket, urlparse(checkpoints).netloc}))
    if status.endpoint is None:
        raise S3ServerError(f"the local S3 server started, but {status.state_file} names no endpoint")
    endpoint = status.endpoint
    os.environ["AWS_ACCESS_KEY_ID"] = endpoint.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = endpoint.secret_key
    os.environ.pop("AWS_SESSION_TOKEN", None)
    cfg = cfg.replace(
        "storage", endpoint=endpoint.url, region=endpoint.region, path_style=True, allow_http=True
    )
    export_settings(cfg.storage)
    view.note(f"S3 server at {endpoint.url} (`lakestream s3 status`)")
    cfg = cfg.replace("lakehouse", root=root)
    return cfg.replace("flink", checkpoint_dir=checkpoints), status


def _empty_on_store(uri: str) -> None:
    """Delete everything under ``uri`` on its object store.

    Its first request is the writers' conditional-write probe, so a wrong endpoint, key pair or bucket,
    or a store without conditional writes, fails here with the fix.
    """
    import obstore

    from storage.object_store import store_error
    from storage.table_files import table_files

    files = table_files(uri)
    files.check_conditional_writes()
    try:
        files.delete_all()
    except (obstore.exceptions.BaseError, OSError) as exc:
        raise store_error(exc, uri) from None


def _prepare(cfg: Config) -> tuple[Config, Path]:
    """The demo's configuration (its own lakehouse folder, checkpoints, group) and its report path.

    The demo owns ``<root>/demo`` and ``<checkpoint_dir>/demo`` (folders, or prefixes on an object
    store) and starts them empty, so running it twice gives the same tables. The report goes beside the
    tables of a local lakehouse, else to ``STATE_DIR/demo`` (a browser opens a local file). Local
    folders are checked to be writable first (``storage.local_files.check_writable_folder``), so an
    unwritable one stops the demo before it empties anything or starts a broker.
    """
    if not is_object_store(cfg.lakehouse.root):
        check_writable_folder(Path(cfg.lakehouse.root) / "demo", setting="lakehouse.root")
    if not on_object_store(cfg.flink.checkpoint_dir) and not cfg.flink.jobmanager:
        check_writable_folder(Path(cfg.flink.checkpoint_dir) / "demo", setting="flink.checkpoint_dir")
    if is_object_store(cfg.lakehouse.root):
        demo_root = location(cfg.lakehouse.root, "demo")
        _empty_on_store(demo_root)
        report = paths.STATE_DIR / "demo" / "report.html"
    else:
        demo_path = Path(cfg.lakehouse.root) / "demo"
        shutil.rmtree(demo_path, ignore_errors=True)
        demo_root, report = str(demo_path), demo_path / "report.html"
    # A cluster's checkpoint folder is the cluster's to clean.
    if on_object_store(cfg.flink.checkpoint_dir):
        checkpoints = location(cfg.flink.checkpoint_dir, "demo")
        if not cfg.flink.jobmanager:
            _empty_on_store(checkpoints)
    else:
        checkpoints = str(Path(cfg.flink.checkpoint_dir) / "demo")
        if not cfg.flink.jobmanager:
            shutil.rmtree(checkpoints, ignore_errors=True)
    cfg = cfg.replace("lakehouse", root=demo_root)
    cfg = cfg.replace("flink", checkpoint_dir=checkpoints)
    cfg = cfg.replace("kafka", group_id=DEMO_GROUP, starting_offsets="committed")
    return cfg, report


def run_demo(
    cfg: Config,
    *,
    events: int,
    produce_seconds: float = 10.0,
    upfront: float = 0.25,
    checkpoint_interval: timedelta = timedelta(seconds=2),
    progress: ProgressMode = "auto",
    config_path: Path | None = None,
    object_store: bool = False,
) -> int:
    """Produce sample events while the ingest job runs bounded, show progress, summarise; the exit code.

    ``object_store``: on the local S3 server (:func:`local_object_store`).
    """
    started = time.monotonic()
    view = LiveView(progress)
    jobs: list[JobProcess] = []
    server: S3Status | None = None
    try:
        with _signals_interrupt() as interrupts:
            paths.require_jvm_build()
            cfg = cfg.replace("flink", checkpoint_interval=checkpoint_interval)
            if object_store:
                cfg, server = local_object_store(cfg, view)
            cfg, report = _prepare(cfg)
            if cfg.flink.jobmanager:
                check_demo_slots(cfg)
            with view:
                snap = _run(
                    cfg, view, interrupts, jobs, events, produce_seconds, upfront, config_path, started
                )
            _finish(cfg, snap, report, started, server)
    except DemoInterrupted as exc:
        view.close()
        left = [pid for job in jobs for pid in job.leftovers()]
        where = f"; still running: pids {left}" if left else ", no process left behind"
        kept = "; the local S3 server keeps running (`lakestream s3 stop`)" if server is not None else ""
        print(
            f"lakestream demo: interrupted ({exc}); job, producer and broker stopped{where}{kept}",
            file=sys.stderr,
            flush=True,
        )
        return 128 + exc.signum
    return 0


def _run(
    cfg: Config,
    view: LiveView,
    interrupts: Interrupts,
    jobs: list[JobProcess],
    events: int,
    produce_seconds: float,
    upfront: float,
    config_path: Path | None,
    started: float,
) -> Snapshot:
    """Broker, feed and job; polls the tables until the job ends. Started jobs are added to ``jobs``."""
    from demo import event_feed as demo_feed
    from devtools.kafka_broker import create_topic
    from sources.flink.kafka_input import commit_group_offsets, snapshot_end_offsets

    sample = generate(SampleSettings(orders=max(1, events // 6), source_zone=cfg.event_time.source_zone))
    watcher = Watcher(cfg.lakehouse.root, (*TABLES, cfg.gold.table) if cfg.gold.enabled else TABLES)
    expected_bronze = sum(1 for ev in sample if not ev.malformed)
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(_broker(cfg, view))
        cfg = cfg.replace("kafka", bootstrap_servers=bootstrap)
        topics = dict(cfg.kafka.topics)
        for topic in topics.values():
            create_topic(bootstrap, topic, partitions=2)
        # Where each partition ends now: this run's records start there, and end where planned.
        start = snapshot_end_offsets(bootstrap, sorted(set(topics.values())))
        partitions = {t: sum(1 for (tt, _) in start if tt == t) for t in topics.values()}
        records = demo_feed.plan(sample, topics, partitions)
        end = demo_feed.end_offsets(start, records)
        commit_group_offsets(bootstrap, cfg.kafka.group_id, start)
        offsets_file = paths.STATE_DIR / "demo" / "end-offsets.json"
        demo_feed.write_offsets(offsets_file, end)

        feed = demo_feed.Feed(bootstrap, records, upfront=upfront, seconds=produce_seconds).start()
        stack.callback(feed.stop)
        entry_args = ["--end-offsets", str(offsets_file.resolve())]
        if config_path is not None:
            entry_args += ["--config", str(Path(config_path).resolve())]
        log = paths.STATE_DIR / "logs" / "demo-flink.log"
        if cfg.flink.jobmanager:
            command = _submit(cfg, entry_args)
            where = f"the cluster at {cfg.flink.jobmanager} (flink run output: {log})"
        else:
            command = [sys.executable, "-m", "demo.demo_job", *entry_args]
            where = f"a local MiniCluster (Flink output: {log})"
        log.unlink(missing_ok=True)
        job = JobProcess(command, env=_env(cfg, bootstrap), log_file=log)
        jobs.append(job.start())
        stack.callback(_stop_job, job, cfg, view)
        view.note(
            f"{len(records)} sample events: {len(records) - feed.upfront_count} of them over "
            f"{produce_seconds:g}s once the job runs; ingest job bounded on {where}"
        )

        def snapshot(phase: str) -> Snapshot:
            return watcher.snapshot(
                elapsed_s=time.monotonic() - started,
                phase=phase,
                produced=feed.sent(),
                planned=feed.planned,
                expected_bronze=expected_bronze,
            )

        job_started = time.monotonic()
        released = False
        while (code := job.poll()) is None:
            if feed.error is not None:
                raise JobFailedError(
                    f"producing the sample to Kafka at {bootstrap} failed: {feed.error}; the job was stopped"
                )
            if not released and (watcher.all_exist() or time.monotonic() - job_started > JOB_START_TIMEOUT_S):
                feed.release()
                released = True
            if not released:
                phase = "starting the job"
            elif not feed.done:
                phase = "producing"
            else:
                phase = "finishing"
            current = snapshot(phase)
            with interrupts.held():
                view.show(current)
            time.sleep(POLL_S)
        if code != 0:
            raise JobFailedError(
                f"the ingest job exited with code {code}; from its output ({log}):\n{job.failure()}"
            )
        snap = snapshot("done")
        with interrupts.held():
            view.show(snap)
        return snap
    raise AssertionError("unreachable")


def _stop_job(job: JobProcess, cfg: Config, view: LiveView) -> None:
    """End the job process and everything it started; on a cluster also cancel a job still running."""
    running = job.poll() is None
    if running and cfg.flink.jobmanager:
        view.note(f"stopping: {_cancel_cluster_job(cfg.flink.jobmanager, job.log_tail(200))}")
    left = job.stop()
    if left:
        view.note(f"lakestream demo: processes of the job still running after SIGKILL: {left}")


def _finish(cfg: Config, snap: Snapshot, report: Path, started: float, server: S3Status | None) -> None:
    """Write the report and print the end summary (on an object store, how to reach it first)."""
    from rich.console import Console

    from demo.html_report import write_report
    from demo.summary import render_summary

    root = cfg.lakehouse.root
    setup: list[str] = []
    notes: list[str] = []
    if server is not None:
        setup.append(server.export_line())
        notes.append("The local S3 server keeps running for these; `lakestream s3 stop` stops it.")
    elif is_object_store(root):
        notes.append("(Run them with the [storage] settings and AWS variables the demo had.)")
    error = None
    try:
        write_report(root, report, max_out_of_orderness=cfg.event_time.max_out_of_orderness)
    except (OSError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    console = Console(highlight=False)
    if not console.is_terminal:  # a log: no terminal width to fit, keep the paths whole
        longest = max((len(location(root, t.name)) for t in snap.tables), default=0)
        console = Console(highlight=False, width=max(120, longest + 60))
    for part in render_summary(
        snap,
        root=root,
        report=None if error else report,
        report_error=error,
        elapsed_s=time.monotonic() - started,
        setup=setup,
        notes=notes,
    ):
        # Commands stay on one line (to copy them whole); prose and the table fit the width.
        console.print(part, soft_wrap=str(part).startswith("  "))
