"""The Flink environment a lakestream job runs in: a local MiniCluster, or the cluster under ``flink run``.

Two facts shape this module: PyFlink's Python workers die with ``No module named
'pyflink'`` unless the Python executable is set explicitly, and with checkpointing on Flink's default
restart strategy retries forever, so a failing job looks hung. Every environment built here therefore
sets the executable, a bounded restart strategy and retained checkpoints.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream import paths
from lakestream.config import FlinkConfig, StorageConfig
from lakestream.errors import LakestreamError
from lakestream.time import parse_size
from runtime import class_archive, jvm_scratch

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import StreamExecutionEnvironment


class FlinkRuntimeError(LakestreamError, RuntimeError):
    """The Flink runtime could not be set up; the message says what to do."""

    names_command = False


class JavaNotFoundError(FlinkRuntimeError):
    """No usable ``java`` (17+): Flink 2 and the Kafka 4 broker need one."""


MIN_JAVA = 17
#: Global job parameter with the sinks' run id of a fresh start (``CheckpointEpochOperator``'s).
RUN_ID_PARAMETER = "lakestream.run-id"
#: glibc arenas per process for the local JVM and its Python workers (``MALLOC_ARENA_MAX``).
MALLOC_ARENAS = 2
#: RocksDB table options for keyed state that is mostly looked up for keys it does not hold: the de-dup
#: asks "seen?" for every event id and almost every answer is no, and so do the gold aggregate's
#: distinct-value maps. Bloom filters answer such a miss without reading a data block; partitioned
#: index and filter blocks let a lookup load only the small partitions it needs into the shared block
#: cache of managed memory, instead of a file's whole index and filter. Without them the cache missed
#: about as often as it hit once the state outgrew it, and the job fell behind 10,000 events/s after
#: about five minutes (DESIGN.md section 2, benchmarks/RESULTS.md). Table options only: a checkpoint
#: written without them restores; its files are read as they are, files written later get them.
ROCKSDB_LOOKUP_SETTINGS = {
    "state.backend.rocksdb.use-bloom-filter": "true",
    "state.backend.rocksdb.memory.partitioned-index-filters": "true",
}
#: Flink's key of RocksDB's compaction style (``flink.rocksdb_compaction``, upper case).
ROCKSDB_COMPACTION_STYLE = "state.backend.rocksdb.compaction.style"
#: True: one Python worker per task slot (``flink.python_workers = "slot"``), False: one per operator.
PYTHON_WORKER_PER_SLOT = "python.fn-execution.memory.managed"
#: Flink's Prometheus reporter, shipped by the pyflink wheel as the plugin ``plugins/metrics-prometheus``.
PROMETHEUS_FACTORY = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
PROMETHEUS_PLUGIN = "metrics-prometheus"


def require_java() -> str:
    """The ``java`` to run, as PyFlink's launcher picks it ($JAVA_HOME/bin/java, else PATH), if 17+.

    Fails with the fix when there is none or it is older than Java 17.
    """
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    java = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if java is None:
        raise JavaNotFoundError(
            "`java` not found (neither $JAVA_HOME/bin/java nor on PATH): install a JDK 17+ "
            "(e.g. `apt-get install openjdk-17-jdk-headless`)"
        )
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        raise JavaNotFoundError(f"cannot run {java}: {exc}; install a JDK 17+") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        raise JavaNotFoundError(f"cannot tell the version of {java}: {result.stderr.strip()!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style: Java 8
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"{java} is Java {major}, Flink 2 and Kafka 4 need Java {MIN_JAVA}+: install a JDK 17+ "
            "and put it first on PATH or set JAVA_HOME"
        )
    return java


def flink_home() -> Path:
    """The installed ``pyflink`` package folder, which is a complete Flink distribution."""
    import pyflink

    return Path(pyflink.__file__).resolve().parent


def prometheus_reporter_jar() -> Path:
    """The Prometheus reporter jar of the installed Flink (the wheel's plugin, same Flink version)."""
    folder = flink_home() / "plugins" / PROMETHEUS_PLUGIN
    jars = sorted(folder.glob("flink-metrics-prometheus-*.jar"))
    if not jars:
        raise FlinkRuntimeError(
            f"flink.prometheus_port is set but {folder} has no flink-metrics-prometheus jar; reinstall "
            'apache-flink (`make venv`) or set flink.prometheus_port = ""'
        )
    return jars[-1]


def prometheus_settings(port: str) -> dict[str, str]:
    """Flink configuration of the Prometheus reporter on ``port`` (a port or ``low-high``); none if empty."""
    if not port:
        return {}
    return {"metrics.reporter.prom.factory.class": PROMETHEUS_FACTORY, "metrics.reporter.prom.port": port}


#: How a checkpoint folder on an object store begins; Flink's S3 plugin serves the scheme.
S3_SCHEME = "s3://"


def on_object_store(location: str | Path) -> bool:
    """Whether a checkpoint folder (or a checkpoint to restore) is on an object store (``s3://``)."""
    return isinstance(location, str) and location.startswith(S3_SCHEME)


def checkpoint_uri(location: str | Path) -> str:
    """``location`` as Flink takes a checkpoint folder: ``s3://...`` as it is, a local path as a file URI."""
    if on_object_store(location):
        return str(location).rstrip("/")
    return Path(location).resolve().as_uri()


def s3_plugin_settings(storage: StorageConfig) -> dict[str, str]:
    """The S3 plugin's Flink options for ``[storage]``: where the store is and how to address it.

    Never credentials: the plugin's AWS default chain reads ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` (or a profile, or the host's role) itself, so no secret is ever part of a
    Flink configuration, its log or a checkpoint. The plugin has no region option: with an endpoint the
    AWS SDK signs for the region it reads from the endpoint's host name, without one it finds the
    bucket's region itself. An empty ``storage.endpoint`` takes ``AWS_ENDPOINT_URL``, as delta-rs does.
    """
    out: dict[str, str] = {}
    endpoint = storage.endpoint.strip() or os.environ.get("AWS_ENDPOINT_URL", "").strip()
    if endpoint:
        out["s3.endpoint"] = endpoint
    if storage.path_style:
        out["s3.path.style.access"] = "true"
    return out


def load_s3_plugin(j_conf: Any) -> None:
    """Make Flink's S3 plugin serve ``s3://`` in this process's JVM (the local MiniCluster's).

    A cluster's JobManagers and TaskManagers load ``$FLINK_HOME/plugins`` at start; a MiniCluster
    never does (it initialises no file system with plugins). So, as a TaskManager does at start, the
    file systems are initialised here with a plugin manager over ``paths.PLUGINS_DIR`` (each plugin in a
    class loader of its own) and with ``j_conf`` (a Java ``Configuration``), which carries the plugin's
    ``s3.*`` options.
    """
    from pyflink.java_gateway import get_gateway

    paths.require_s3_plugin()
    gateway = get_gateway()
    jvm = gateway.jvm
    root = jvm.java.nio.file.Paths.get(str(paths.PLUGINS_DIR), gateway.new_array(jvm.String, 0))
    plugins = jvm.org.apache.flink.core.plugin.DirectoryBasedPluginFinder(root).findPlugins()
    parent_first = jvm.org.apache.flink.configuration.CoreOptions.getPluginParentFirstLoaderPatterns(j_conf)
    manager = jvm.org.apache.flink.core.plugin.DefaultPluginManager(plugins, parent_first)
    jvm.org.apache.flink.core.fs.FileSystem.initialize(j_conf, manager)


def execution_target(env: StreamExecutionEnvironment) -> str:
    """``execution.target`` of ``env``: ``local`` for a MiniCluster, ``remote`` under ``flink run -m``."""
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    return str(conf.get("execution.target") or "local")


def _ms(td: Any) -> str:
    return f"{int(td.total_seconds() * 1000)} ms"


#: Network buffers per pair of subtasks a local job may need: an all-to-all exchange has p channels at
#: each of its p subtasks. The ingest job at parallelism 8 ran with 256 buffers (64m of 256k ones) and
#: failed with 64 (of 1m).
BUFFERS_PER_SUBTASK_PAIR = 4
#: Flink's network memory of a local MiniCluster.
LOCAL_NETWORK_MEMORY = 64 << 20


def local_network_memory(cfg: FlinkConfig) -> str:
    """The local MiniCluster's network memory: Flink's 64m, or enough for ``BUFFERS_PER_SUBTASK_PAIR``
    buffers of ``flink.network_buffer_size`` per pair of subtasks at ``flink.parallelism``."""
    buffer = parse_size(cfg.network_buffer_size, key="flink.network_buffer_size")
    need = BUFFERS_PER_SUBTASK_PAIR * cfg.parallelism**2 * buffer
    return f"{-(-max(LOCAL_NETWORK_MEMORY, need) // (1 << 20))}m"


def flink_settings(
    cfg: FlinkConfig, *, checkpoint_dir: str | None = None, state_backend: str = "hashmap"
) -> dict[str, str]:
    """Flink configuration keys for a lakestream job (shared by MiniCluster and cluster runs).

    ``state_backend`` is the job's choice when ``flink.state_backend`` is ``default``.
    """
    backend = state_backend if cfg.state_backend == "default" else cfg.state_backend
    network_memory = local_network_memory(cfg)
    settings = {
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "python.execution-mode": cfg.python_execution_mode,
        "python.fn-execution.bundle.size": str(cfg.bundle_size),
        "python.fn-execution.bundle.time": str(int(cfg.bundle_time.total_seconds() * 1000)),
        "parallelism.default": str(cfg.parallelism),
        "pipeline.max-parallelism": str(cfg.max_parallelism),
        **restart_settings(cfg),
        "state.backend.type": backend,
        # RocksDB: upload only the new SST files at each checkpoint, so a checkpoint costs what changed
        # since the last one, not the whole state.
        "execution.checkpointing.incremental": str(backend == "rocksdb").lower(),
        "execution.checkpointing.dir": checkpoint_uri(checkpoint_dir or cfg.checkpoint_dir),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        # Keep checkpointing while some sources have finished, and take a final checkpoint at the end of
        # a bounded run (the sink's last commit rides on it).
        "execution.checkpointing.checkpoints-after-tasks-finish": "true",
        # A local MiniCluster takes fixed sizes (Flink's local defaults: 128m managed, 64m network, 32k
        # buffers; a fraction has no effect there); a cluster's TaskManagers size them in their own
        # configuration.
        "taskmanager.memory.managed.size": cfg.managed_memory,
        "taskmanager.memory.segment-size": cfg.network_buffer_size,
        "taskmanager.memory.network.min": network_memory,
        "taskmanager.memory.network.max": network_memory,
        # ``flink.python_workers``: PyFlink runs all Python operators of a slot in one worker process
        # when their memory is managed by Flink, one worker per operator subtask otherwise.
        PYTHON_WORKER_PER_SLOT: str(cfg.python_workers == "slot").lower(),
        # Chained operators hand records over without a deep copy. Safe here: no lakestream Java operator
        # keeps an input record after processElement (the batch operator copies the bytes it keeps, the
        # gate and marker operators emit new or replaced rows), and the Python operators and sinks
        # serialise what they get at once. Saved the copy of every Kafka record's Row (its byte arrays).
        "pipeline.object-reuse": "true",
    }
    if backend == "rocksdb":
        settings.update(ROCKSDB_LOOKUP_SETTINGS)
        settings[ROCKSDB_COMPACTION_STYLE] = cfg.rocksdb_compaction.upper()
    if cfg.checkpoint_interval.total_seconds() > 0:
        settings["execution.checkpointing.interval"] = _ms(cfg.checkpoint_interval)
    # A MiniCluster's reporters come from this configuration; a cluster's from its own (README, metrics).
    settings.update(prometheus_settings(cfg.prometheus_port))
    return settings


def restart_settings(cfg: FlinkConfig) -> dict[str, str]:
    """Flink's restart strategy for ``flink.restart_*``: exponential delay with a bounded budget.

    Waits of ``restart_delay`` doubling up to ``restart_max_delay``, at most ``restart_attempts``
    restarts: a failure that persists (a bug, bad input) still ends the job, while an outage of a
    service the job needs (the object store, the broker) shorter than the waits add up to is ridden
    out, each restart from the newest completed checkpoint. Failures of several tasks before a restart
    count once. ``restart_reset_after`` without a failure gives back the whole budget. No restarts
    at all for 0 attempts.
    """
    if cfg.restart_attempts == 0:
        return {"restart-strategy.type": "none"}
    prefix = "restart-strategy.exponential-delay"
    return {
        "restart-strategy.type": "exponential-delay",
        f"{prefix}.initial-backoff": _ms(cfg.restart_delay),
        f"{prefix}.max-backoff": _ms(cfg.restart_max_delay),
        f"{prefix}.backoff-multiplier": "2.0",
        f"{prefix}.jitter-factor": "0.1",
        f"{prefix}.attempts-before-reset-backoff": str(cfg.restart_attempts),
        f"{prefix}.reset-backoff-threshold": _ms(cfg.restart_reset_after),
    }


def restart_budget(cfg: FlinkConfig) -> float:
    """Seconds of waiting the restart strategy allows in all before the job fails (jitter aside): how
    long an outage of a needed service may last, the failing attempts' own time coming on top."""
    total, delay, cap = 0.0, cfg.restart_delay.total_seconds(), cfg.restart_max_delay.total_seconds()
    for _ in range(cfg.restart_attempts):
        total += delay
        delay = min(2 * delay, cap)
    return total


def latest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest completed checkpoint (``<job id>/chk-N`` with ``_metadata``) under ``checkpoint_dir``.

    Flink writes ``_metadata`` last, so a folder without it is a checkpoint that never completed.
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return None
    done = [m.parent for m in root.rglob("chk-*/_metadata")]
    if not done:
        return None
    return max(done, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1])))


def check_runtime(cfg: FlinkConfig) -> None:
    """Refuse what would fail only once the job runs: no Java 17, thread mode, checkpoints on S3 without
    Flink's S3 plugin. ``build_env`` calls it; the CLI calls it first too, before it contacts the broker."""
    require_java()
    if on_object_store(cfg.checkpoint_dir):
        paths.require_s3_plugin()
    if cfg.python_execution_mode == "thread":
        raise FlinkRuntimeError(
            "flink.python_execution_mode = 'thread' is not supported yet: PyFlink's embedded interpreter "
            "(pemja) does not see the virtualenv's packages, and with them on its path the Delta sink's "
            "pyarrow calls deadlock on the GIL. Use 'process' (the default)."
        )


def build_env(
    cfg: FlinkConfig,
    *,
    jars: Sequence[Path] | None = None,
    checkpoint_dir: str | None = None,
    resume_from: str | Path | None = None,
    extra: dict[str, str] | None = None,
    state_backend: str = "hashmap",
    run_id: str | None = None,
    kind: str = "job",
    storage: StorageConfig | None = None,
) -> StreamExecutionEnvironment:
    """A StreamExecutionEnvironment with lakestream's settings and jars.

    Under ``flink run`` this attaches to the cluster's environment; run from plain Python it starts a
    local MiniCluster. ``resume_from`` (a retained checkpoint or a savepoint) restores the job's state,
    which is how a restarted process stays exactly once (see :func:`latest_checkpoint`). ``run_id``
    names the sinks' lineage on a fresh start (job parameter ``lakestream.run-id``; a restore keeps the
    lineage's own); without it a fresh start takes the Flink job id. ``kind`` names the kind of job for
    the local JVM's class-data archive (``local_class_archive``). With the checkpoint folder or
    ``resume_from`` on S3 the S3 plugin gets ``storage``'s settings (:func:`s3_plugin_settings`), and a
    local MiniCluster loads it (:func:`load_s3_plugin`).
    """
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    check_runtime(cfg)
    # On a local MiniCluster PyFlink would otherwise run every Python operator in "loopback" mode: as
    # threads of this client process, all behind one GIL (no parallelism on 2 cores), printing gRPC
    # tear-down tracebacks into the caller's terminal. Separate worker processes, as on a cluster, ran
    # the demo's ingest in 12 s instead of 20 s here. An explicit setting of the variable wins.
    os.environ.setdefault("_python_worker_execution_mode", "process")
    if os.environ["_python_worker_execution_mode"] == "process":
        import_fn_execution_without_beam()
    launch_gateway(cfg.jvm_options, archive_kind=kind if cfg.class_archive else None)
    conf = Configuration()
    settings = flink_settings(cfg, checkpoint_dir=checkpoint_dir, state_backend=state_backend)
    scratch = _launched_scratch[-1] if _launched_scratch else None
    if scratch is not None:
        # RocksDB's working copies directly in the scratch folder, not three levels under the
        # MiniCluster's: RocksDB names its log file in Flink's log folder after the instance's whole
        # path and cuts that name at 255 characters (a restore at another parallelism then failed).
        # A working folder chosen by the caller (``extra``, a patched ``flink_settings``) wins.
        settings.setdefault(ROCKSDB_LOCALDIR, str(scratch))
    if resume_from is not None:
        settings["execution.state-recovery.path"] = checkpoint_uri(resume_from)
    on_store = [d for d in (checkpoint_dir or cfg.checkpoint_dir, resume_from) if d and on_object_store(d)]
    if on_store:
        settings.update(s3_plugin_settings(storage or StorageConfig()))
    for key, value in {**settings, **(extra or {})}.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    if on_store and execution_target(env) == "local":
        load_s3_plugin(conf._j_configuration)
    if run_id:
        env.get_config().set_global_job_parameters({RUN_ID_PARAMETER: run_id})
    if cfg.prometheus_port and execution_target(env) == "local":
        # The MiniCluster loads reporter factories from the context class loader only (no plugin
        # folder), so the wheel's plugin jar goes there, not onto the job's classpath.
        from pyflink.util.java_utils import add_jars_to_context_class_loader

        add_jars_to_context_class_loader([prometheus_reporter_jar().as_uri()])
    env.set_python_executable(sys.executable)
    env.set_parallelism(cfg.parallelism)
    jar_list = list(jars) if jars is not None else paths.flink_jars()
    if jar_list:
        env.add_jars(*(p.resolve().as_uri() for p in jar_list))
    return env


#: The package of PyFlink's Python worker runtime, whose protobuf module the client needs.
FN_EXECUTION = "pyflink.fn_execution"


def import_fn_execution_without_beam() -> None:
    """Make ``pyflink.fn_execution`` importable in this client without importing Apache Beam.

    Building a Python operator imports ``pyflink.fn_execution.flink_fn_execution_pb2`` (a protobuf
    module), and the package's ``__init__`` imports Apache Beam (and with it pandas) only to find out
    whether Beam's compiled coders are there, which only the Python workers use: ~85 MiB of the
    client's resident memory for as long as the job runs. Here the package is registered without
    running its ``__init__`` (its submodules load from its folder as usual) and with the flag
    ``PYFLINK_CYTHON_ENABLED`` off, which selects the pure-Python coders should a worker module ever be
    imported in this process. Only for process-mode workers (their own processes import the package
    whole); nothing is done when the package is imported already.
    """
    import importlib.util

    if FN_EXECUTION in sys.modules:
        return
    spec = importlib.util.find_spec(FN_EXECUTION)
    if spec is None or spec.submodule_search_locations is None:
        return  # not the package this expects: let the normal import say what is wrong
    module = importlib.util.module_from_spec(spec)
    module.PYFLINK_CYTHON_ENABLED = False  # type: ignore[attr-defined]
    sys.modules[FN_EXECUTION] = module
    import pyflink

    pyflink.fn_execution = module


#: ``sitecustomize`` of the local JVM's Python workers: they run without pandas (see the module).
WORKER_SITE = Path(__file__).resolve().parent / "worker" / "site"
#: ``1`` in the environment gives the local Python workers pandas again (``WORKER_SITE`` left out).
WORKER_PANDAS_VARIABLE = "LAKESTREAM_WORKER_PANDAS"


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What the local JVM's environment ``env`` needs changed for its Python workers: ``WORKER_SITE``
    first on their ``PYTHONPATH``, unless ``LAKESTREAM_WORKER_PANDAS=1``."""
    if env.get(WORKER_PANDAS_VARIABLE) == "1":
        return {}
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(WORKER_SITE)]
    return {"PYTHONPATH": os.pathsep.join([str(WORKER_SITE), *rest])}


#: Folder of the local JVM's class-data archives (``runtime.class_archive``), under ``paths.CACHE_DIR``:
#: an archive holds for any project that runs the same ``java`` and Flink, and tests with a state
#: folder of their own do not each write one.
CLASS_ARCHIVE_DIR = "jvm-class-archives"
#: How long this process waits at its exit for its local JVM to end (and write its class-data archive).
LOCAL_JVM_WAIT_S = 60.0
#: Flink's setting of RocksDB's working folder; a local run puts it in the JVM's scratch folder.
ROCKSDB_LOCALDIR = "state.backend.rocksdb.localdir"
#: The scratch folder of the local JVM this process launched (``jvm_scratch``), once launched.
_launched_scratch: list[Path] = []


def local_class_archive(env: Mapping[str, str], kind: str = "job") -> class_archive.ArchivePlan | None:
    """The class-data archive of the local JVM that PyFlink's launcher starts with the environment
    ``env``, for jobs of ``kind`` (``runtime.class_archive``); None when its ``JVM_ARGS`` choose
    class sharing themselves or there is no ``java``. The key is taken from the ``java`` and the class
    path the launcher itself picks. Each kind of job (ingest, land, changefeed) gets an archive of its
    own: an archive holds the classes of the run that wrote it, and those of an ingest job (with its
    Kafka connector and operators) are not a land job's."""
    from pyflink import pyflink_gateway_server as launcher

    options = env.get("JVM_ARGS", "").split()
    if any(o.startswith(("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")) for o in options):
        return None
    java = shutil.which(launcher.find_java_executable())
    if java is None:
        return None
    resolved = dict(env)
    launcher.prepare_environment_variables(resolved)
    jars = [Path(p) for p in launcher.construct_flink_classpath(resolved).split(os.pathsep) if p]
    extra = f"{kind}\0{env.get('HADOOP_CLASSPATH', '')}"
    key = class_archive.archive_key(Path(java), jars, extra=extra)
    return class_archive.plan(paths.CACHE_DIR / CLASS_ARCHIVE_DIR, key)


def finish_local_jvm(
    process: subprocess.Popen[bytes], archive: class_archive.ArchivePlan | None, scratch: Path | None
) -> None:
    """At this process's exit: end the local JVM, publish the class-data archive it wrote (if it
    writes one), then remove its scratch folder (``jvm_scratch``).

    PyFlink's gateway JVM pings this process's callback server and exits once that is gone, as it
    would a moment after this process ended; here the process waits for it. The gateway is shut down
    first, so that Python objects freed after this do not try to reach the JVM. A JVM that has not
    ended within ``LOCAL_JVM_WAIT_S`` keeps its folder; the next local run removes it."""
    try:
        if process.poll() is None:
            from pyflink.java_gateway import get_gateway

            get_gateway().shutdown()
            process.wait(timeout=LOCAL_JVM_WAIT_S)
        if archive is not None:
            class_archive.publish(archive, process.returncode)
    except Exception:  # noqa: BLE001 - at exit: the archive is an optimisation, the run's outcome is not
        pass
    if scratch is not None and process.poll() is not None:
        jvm_scratch.remove(scratch)


def launch_gateway(jvm_options: Sequence[str], *, archive_kind: str | None = "job") -> None:
    """Start PyFlink's JVM (the local MiniCluster's) with ``jvm_options``, unless it already runs.

    ``build_env`` calls it; call it first only to time the JVM start on its own (the benchmarks do).

    PyFlink's launcher reads ``JVM_ARGS`` from the environment; it is set only around the launch, so
    other JVMs this process starts (a standalone cluster's ``bin/`` scripts read it too) keep theirs.
    Options given in ``JVM_ARGS`` by the caller come after ours and win. Under ``flink run`` the client
    JVM already runs and the cluster's own configuration (``env.java.opts.*``) applies.

    The JVM this starts gets its standard error read for as long as it runs (``jvm_stderr``), and its
    Python workers start without pandas (``worker_environment``). Unless ``archive_kind`` is None it
    maps the class-data archive of that kind of job, or writes one at its exit (``local_class_archive``).
    Its temporary files go to a folder of its own, removed at this process's exit (``jvm_scratch``,
    ``finish_local_jvm``).
    """
    import pyflink.java_gateway as java_gateway

    from runtime import jvm_stderr

    # The JVM (RocksDB's native memory included) and every Python worker it starts inherit this: glibc
    # would otherwise give each of their many threads an arena of its own (8 per core), each keeping the
    # pages its thread freed. An explicit setting of the variable wins.
    os.environ.setdefault("MALLOC_ARENA_MAX", str(MALLOC_ARENAS))
    before = os.environ.get("JVM_ARGS")
    os.environ["JVM_ARGS"] = " ".join([*jvm_options, before or ""]).strip()
    start = java_gateway.launch_gateway_server_process
    started: list[subprocess.Popen[bytes]] = []

    def start_and_keep(env: Any, args: Any) -> subprocess.Popen[bytes]:
        env.update(worker_environment(env))
        archive = None if archive_kind is None else local_class_archive(env, archive_kind)
        if archive is not None:
            env["JVM_ARGS"] = " ".join([*archive.options, env.get("JVM_ARGS", "")]).strip()
        scratch = jvm_scratch.create()
        if scratch is not None:
            env["JVM_ARGS"] = f"-Djava.io.tmpdir={scratch} {env.get('JVM_ARGS', '')}".strip()
            _launched_scratch.append(scratch)
        process: subprocess.Popen[bytes] = start(env, args)
        started.append(process)
        writes = archive is not None and archive.pending is not None
        atexit.register(finish_local_jvm, process, archive if writes else None, scratch)
        return process

    java_gateway.launch_gateway_server_process = start_and_keep
    try:
        java_gateway.get_gateway()
    finally:
        java_gateway.launch_gateway_server_process = start
        if before is None:
            del os.environ["JVM_ARGS"]
        else:
            os.environ["JVM_ARGS"] = before
    # Only once connected: until then PyFlink reads the pipe itself, for the error of a JVM that died.
    for process in started:
        if process.stderr is not None:
            jvm_stderr.forward(process.stderr)
    if started:
        quiet_environment_logging()


#: Beam's class that, closing a Python worker's environment, logs at INFO (and at WARN when that fails)
#: the whole environment the worker was started with: every variable of the JVM's, the AWS secret key
#: of an object store included.
BEAM_ENVIRONMENT_LOGGER = "org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory"


def quiet_environment_logging() -> None:
    """Keep only the errors of ``BEAM_ENVIRONMENT_LOGGER`` in the local JVM's log, so that no secret of
    its environment is written there (a cluster sets the same level in its log4j configuration:
    docs/object-storage.md)."""
    from pyflink.java_gateway import get_gateway

    log4j = get_gateway().jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(BEAM_ENVIRONMENT_LOGGER, log4j.Level.ERROR)
