"""A local single-node Kafka broker (KRaft, broker + controller in one JVM) for the demo and the tests.

A child JVM rather than a container: the machines have Java but no Docker engine, and the Maven build
already puts a Kafka 4 broker in ``jvm/target/lib/kafka``. :class:`LocalKafka` lives as long as the
thread that started it; :func:`start_detached` keeps one in the background for ``lakestream kafka``.
The process plumbing is ``devtools.local_service``'s, shared with the local S3 server. How both behave
is written down in DESIGN.md (Local services).
"""

from __future__ import annotations

import base64
import errno
import fcntl
import logging
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from devtools import local_service, processes
from devtools.local_service import AlreadyRunningError, LocalServiceError, ServiceStartError
from lakestream.paths import KAFKA_LIB_DIR, STATE_DIR, MissingBuildError
from runtime.flink_env import JavaNotFoundError, require_java

__all__ = [
    "BrokerAlreadyRunningError",
    "BrokerStartError",
    "BrokerStatus",
    "DataDirInUseError",
    "JavaNotFoundError",
    "KafkaBrokerError",
    "KafkaJarsMissingError",
    "LocalKafka",
    "PortInUseError",
    "DEFAULT_DATA_DIR",
    "DEFAULT_STATE_FILE",
    "create_topic",
    "start_detached",
    "status_detached",
    "stop_detached",
]

log = logging.getLogger(__name__)

#: Where the broker keeps its data when no ``data_dir`` is given (git-ignored).
DEFAULT_DATA_DIR: Path = STATE_DIR / "kafka"
#: Pid, address and data folder of the detached broker, shared by the CLI processes.
DEFAULT_STATE_FILE: Path = STATE_DIR / "kafka.json"

HOST = processes.HOST
_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_NODE_ID = 1


# --------------------------------------------------------------------------------------------- errors


class KafkaBrokerError(LocalServiceError):
    """Base class: anything that stops the local broker from starting, answering or stopping."""


class KafkaJarsMissingError(KafkaBrokerError, MissingBuildError):
    """``jvm/target/lib/kafka`` is missing: the Maven build has not been run."""


class PortInUseError(KafkaBrokerError, local_service.PortInUseError):
    """The explicitly requested broker port is taken by another process."""


class DataDirInUseError(KafkaBrokerError):
    """Another broker already holds the data folder's lock."""


class BrokerAlreadyRunningError(KafkaBrokerError, AlreadyRunningError):
    """A detached broker is running with a different data folder or port than requested."""


class BrokerStartError(KafkaBrokerError, ServiceStartError):
    """The broker JVM exited or did not answer in time; carries the tail of its log."""


# --------------------------------------------------------------------------------------------- status


@dataclass(frozen=True)
class BrokerStatus:
    """What a CLI needs to report about a broker; ``responding`` is None when it was not probed."""

    running: bool
    pid: int | None = None
    bootstrap_servers: str | None = None
    data_dir: Path | None = None
    log_file: Path | None = None
    responding: bool | None = None

    def describe(self) -> str:
        """One human-readable line, e.g. for ``lakestream kafka status``."""
        if not self.running:
            return "kafka: not running"
        answer = {True: "answering", False: "NOT answering", None: "not probed"}[self.responding]
        return (
            f"kafka: running (pid {self.pid}) at {self.bootstrap_servers}, {answer}; "
            f"data {self.data_dir}, log {self.log_file}"
        )


# ----------------------------------------------------------------------------------------- the broker


@dataclass(frozen=True)
class _Layout(local_service.ServiceLayout):
    """Files of one broker data folder, so every entry point agrees on where things live."""

    name: str = "broker"

    @property
    def kraft_dir(self) -> Path:
        return self.root / "kraft"

    @property
    def server_properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.root / "log4j2.properties"


class LocalKafka(local_service.RunningService[_Layout]):
    """A running local broker started by this process; stop it, or use it as a context manager."""

    def __init__(
        self,
        *,
        process: subprocess.Popen[bytes],
        port: int,
        controller_port: int,
        layout: _Layout,
    ) -> None:
        """Wrap a spawned broker process; use :meth:`start`, which also waits until it answers."""
        super().__init__(process=process, port=port, layout=layout)
        self._controller_port = controller_port

    @classmethod
    def start(
        cls,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
        timeout: float = 60,
        heap: str = "512m",
    ) -> LocalKafka:
        """Start a broker and return once it answers metadata requests.

        ``data_dir`` keeps the topics across restarts (default ``STATE_DIR/kafka``); ``port`` is the
        client port (default: a free one). On Linux the broker gets SIGTERM when the *thread* that
        started it exits (so a killed test run leaves no JVM behind): start it from a thread that
        outlives it, or use :func:`start_detached` for a broker that should outlive this process.
        Raises :class:`JavaNotFoundError` (a ``FlinkRuntimeError``), :class:`KafkaJarsMissingError`,
        :class:`PortInUseError`, :class:`DataDirInUseError` or :class:`BrokerStartError`.
        """
        return _launch(data_dir=data_dir, port=port, timeout=timeout, heap=heap, detached=False)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for Kafka clients (kafka-python, the Flink connector)."""
        return f"{HOST}:{self._port}"

    @property
    def controller_port(self) -> int:
        """The KRaft controller port (clients never need it)."""
        return self._controller_port

    def status(self, *, probe: bool = True) -> BrokerStatus:
        """Report liveness, and with ``probe`` whether the broker answers a metadata request."""
        running = self.running
        return BrokerStatus(
            running=running,
            pid=self.pid if running else None,
            bootstrap_servers=self.bootstrap_servers,
            data_dir=self.data_dir,
            log_file=self.log_file,
            responding=_responds(self.bootstrap_servers, timeout=5.0) if running and probe else None,
        )

    def stop(self, timeout: float = 30) -> int | None:
        """Shut down cleanly (SIGTERM), SIGKILL after ``timeout`` seconds; returns the exit code."""
        return _stop_broker(self._process.pid, timeout=timeout, popen=self._process)

    def __repr__(self) -> str:
        return f"LocalKafka(pid={self.pid}, bootstrap_servers={self.bootstrap_servers!r})"


# ------------------------------------------------------------------------------------ detached broker

_STATE_KEYS = ("pid", "bootstrap_servers", "data_dir")


def start_detached(
    *,
    data_dir: Path | None = None,
    port: int | None = None,
    timeout: float = 60,
    heap: str = "512m",
    state_file: Path | None = None,
) -> BrokerStatus:
    """Start a background broker that outlives this process and record it in ``state_file``.

    Idempotent: if the recorded broker is still running (with the same data folder and, if given,
    port) its status is returned. A broker recorded with other settings raises
    :class:`BrokerAlreadyRunningError`, naming ``lakestream kafka stop`` as the fix.
    """
    state_path = state_file or DEFAULT_STATE_FILE
    layout = _Layout((data_dir or DEFAULT_DATA_DIR).resolve())
    current = status_detached(state_file=state_path, probe=False)
    if current.running:
        same_dir = current.data_dir == layout.root
        same_port = port is None or current.bootstrap_servers == f"{HOST}:{port}"
        if same_dir and same_port:
            return status_detached(state_file=state_path)
        raise BrokerAlreadyRunningError(
            f"a detached broker is already running (pid {current.pid}, {current.bootstrap_servers}, "
            f"data {current.data_dir}); stop it first with `lakestream kafka stop`"
        )
    kafka = _launch(data_dir=layout.root, port=port, timeout=timeout, heap=heap, detached=True)
    local_service.remember_detached(kafka._process)
    local_service.write_state(
        state_path,
        {
            "pid": kafka.pid,
            "bootstrap_servers": kafka.bootstrap_servers,
            "port": kafka.port,
            "controller_port": kafka.controller_port,
            "data_dir": str(kafka.data_dir),
            "log_file": str(kafka.log_file),
            "started_at": time.time(),
        },
    )
    return kafka.status(probe=False)


def status_detached(*, state_file: Path | None = None, probe: bool = True) -> BrokerStatus:
    """Report on the broker recorded in ``state_file``; a stale record counts as not running."""
    record = local_service.read_state(state_file or DEFAULT_STATE_FILE, _STATE_KEYS, what="broker")
    if record is None:
        return BrokerStatus(running=False)
    pid = int(record["pid"])
    layout = _Layout(Path(record["data_dir"]))
    bootstrap = str(record["bootstrap_servers"])
    if not _is_our_broker(pid, layout):
        return BrokerStatus(running=False, bootstrap_servers=bootstrap, data_dir=layout.root)
    return BrokerStatus(
        running=True,
        pid=pid,
        bootstrap_servers=bootstrap,
        data_dir=layout.root,
        log_file=layout.log_file,
        responding=_responds(bootstrap, timeout=5.0) if probe else None,
    )


def stop_detached(*, timeout: float = 30, state_file: Path | None = None) -> BrokerStatus:
    """Stop the recorded background broker (SIGTERM, then SIGKILL) and forget it.

    Returns the status it had before stopping (``running=False`` if there was nothing to stop). Only
    the recorded pid is signalled, and only after checking it is still that broker's JVM.
    """
    state_path = state_file or DEFAULT_STATE_FILE
    before = status_detached(state_file=state_path, probe=False)
    if before.running and before.pid is not None:
        _stop_broker(before.pid, timeout=timeout, popen=local_service.forget_detached(before.pid))
    state_path.unlink(missing_ok=True)
    return before


# ----------------------------------------------------------------------------------------- topics


def create_topic(
    bootstrap_servers: str,
    name: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
    exist_ok: bool = True,
    timeout: float = 30,
) -> None:
    """Create a topic and wait until every partition has a leader, so producing right away works.

    Relying on auto-creation instead races the first producer against leader election and gives
    one partition; tests that count partitions or offsets want the topic to exist up front.
    """
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        client_id="lakestream-create-topic",
        request_timeout_ms=int(timeout * 1000),
    )
    try:
        spec = {"num_partitions": partitions, "replication_factor": replication_factor}
        try:
            admin.create_topics({name: {**spec, "configs": dict(configs or {})}})
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise
        admin.wait_for_topics([name], timeout_ms=int(timeout * 1000))
    finally:
        admin.close()


# ------------------------------------------------------------------------------------------ launching


def _launch(
    *, data_dir: Path | None, port: int | None, timeout: float, heap: str, detached: bool
) -> LocalKafka:
    java = require_java()
    classpath = _kafka_classpath()
    layout = _Layout((data_dir or DEFAULT_DATA_DIR).resolve())
    layout.root.mkdir(parents=True, exist_ok=True)
    _check_data_dir_free(layout)
    if port is not None and processes.port_in_use(port):
        raise PortInUseError(port)

    def attempt(broker_port: int) -> LocalKafka:
        controller_port = processes.free_port(exclude={broker_port})
        _write_config(layout, broker_port, controller_port)
        _format_storage(java, classpath, layout)
        process = _spawn(java, classpath, layout, heap=heap, detached=detached)
        kafka = LocalKafka(process=process, port=broker_port, controller_port=controller_port, layout=layout)
        try:
            _wait_ready(kafka, timeout=timeout)
        except BaseException:
            kafka.stop(timeout=10)
            raise
        return kafka

    kafka = local_service.start_on_port(port, attempt)
    log.info("kafka broker pid %d answering at %s", kafka.pid, kafka.bootstrap_servers)
    return kafka


def _kafka_classpath() -> str:
    if not any(KAFKA_LIB_DIR.glob("kafka_*.jar")):
        raise KafkaJarsMissingError(
            f"no Kafka broker jars in {KAFKA_LIB_DIR}: run `make jvm` (or `mvn -q -f jvm/pom.xml package`)"
        )
    return str(KAFKA_LIB_DIR / "*")


def _check_data_dir_free(layout: _Layout) -> None:
    """Fail fast with the fix instead of letting a second JVM die on Kafka's log-dir lock."""
    lock_file = layout.kraft_dir / ".lock"
    if not lock_file.exists():
        return
    with lock_file.open("a") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise DataDirInUseError(
                f"{layout.root} is in use by another running broker: pass another data_dir, or stop "
                "that broker (`lakestream kafka stop` for the detached one)"
            ) from exc
        fcntl.lockf(handle, fcntl.LOCK_UN)


def _write_config(layout: _Layout, port: int, controller_port: int) -> None:
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(_NODE_ID),
        "controller.quorum.voters": f"{_NODE_ID}@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(layout.kraft_dir),
        "auto.create.topics.enable": "true",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # 50 partitions by default: slow to create on a small machine, and pointless on one node.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        # Flink's exactly-once KafkaSink asks for 1 h transactions; the broker default cap is 15 min.
        "transaction.max.timeout.ms": "3600000",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    layout.server_properties.write_text(
        "# Written by devtools/kafka_broker.py at every start; edits are overwritten.\n"
        + "".join(f"{key}={value}\n" for key, value in settings.items())
    )
    log_file = str(layout.log_file)
    layout.log4j_properties.write_text(
        "# Written by devtools/kafka_broker.py: broker logs go to a size-capped file, not stderr.\n"
        "status = warn\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log_file}\n"
        f"appender.file.filePattern = {log_file}.%i\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        "appender.file.policies.size.size = 20MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        "appender.file.strategy.max = 2\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "logger.request.name = kafka.request.logger\n"
        "logger.request.level = WARN\n"
        "logger.state.name = state.change.logger\n"
        "logger.state.level = WARN\n"
    )


def _jvm_options(layout: _Layout, heap: str) -> list[str]:
    return [
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j_properties}",
        # Keep the file appender open until the JVM exits, so Kafka's own shutdown hook can still log.
        "-Dlog4j2.shutdownHookEnabled=false",
        f"-Dkafka.logs.dir={layout.root}",
    ]


def _format_storage(java: str, classpath: str, layout: _Layout) -> None:
    """Format the KRaft log dir once; an existing meta.properties keeps its cluster id and topics."""
    if (layout.kraft_dir / "meta.properties").exists():
        return
    cluster_id = _new_cluster_id()
    command = [
        java,
        *_jvm_options(layout, "256m"),
        "-cp",
        classpath,
        _STORAGE_TOOL,
        "format",
        "-t",
        cluster_id,
        "-c",
        str(layout.server_properties),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise BrokerStartError(
            f"formatting the KRaft storage in {layout.kraft_dir} failed (exit {result.returncode}); "
            "delete that folder if it holds a broken half-formatted state",
            log_file=layout.log_file,
            log_tail=local_service.tail_text(result.stdout + result.stderr),
        )


def _new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cluster_id.startswith("-"):
            return cluster_id


def _spawn(
    java: str, classpath: str, layout: _Layout, *, heap: str, detached: bool
) -> subprocess.Popen[bytes]:
    command = [
        java,
        *_jvm_options(layout, heap),
        "-cp",
        classpath,
        _MAIN_CLASS,
        str(layout.server_properties),
    ]
    return local_service.spawn_jvm(command, cwd=layout.root, output=layout.stdout_file, detached=detached)


def _wait_ready(kafka: LocalKafka, *, timeout: float) -> None:
    layout = kafka._layout

    def probe(remaining: float) -> bool:
        return processes.accepts_connections(kafka.port) and _responds(
            kafka.bootstrap_servers, timeout=min(10.0, max(remaining, 1.0))
        )

    def fail(message: str) -> BrokerStartError:
        return BrokerStartError(message, log_file=layout.log_file, log_tail=_log_tail(layout))

    local_service.wait_ready(
        kafka._process,
        probe,
        timeout=timeout,
        name="the Kafka broker",
        address=kafka.bootstrap_servers,
        where=f"port {kafka.port}, data {layout.root}",
        fail=fail,
    )


def _responds(bootstrap_servers: str, *, timeout: float) -> bool:
    """Whether the broker serves a metadata request with itself in it (it is up and unfenced)."""
    from kafka.admin import KafkaAdminClient

    timeout_ms = int(timeout * 1000)
    kafka_logger = logging.getLogger("kafka")
    previous_level = kafka_logger.level
    # While the broker boots, kafka-python logs every refused connection as an error: not news here.
    kafka_logger.setLevel(logging.CRITICAL)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            client_id="lakestream-broker-probe",
            bootstrap_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
        )
        try:
            cluster = admin.describe_cluster()
            admin.list_topics()
        finally:
            admin.close()
    except Exception as exc:  # any failure means "not (yet) answering"
        log.debug("broker at %s not answering yet: %s", bootstrap_servers, exc)
        return False
    finally:
        kafka_logger.setLevel(previous_level)
    return bool(cluster.get("brokers"))


# ------------------------------------------------------------------------------------------- stopping


def _stop_broker(pid: int, *, timeout: float, popen: subprocess.Popen[bytes] | None) -> int | None:
    """Stop the broker JVM; one that survives SIGKILL is a KafkaBrokerError."""
    return local_service.stop_process(
        pid, timeout=timeout, popen=popen, name="kafka broker", error=KafkaBrokerError
    )


def _is_our_broker(pid: int, layout: _Layout) -> bool:
    """Guard against pid reuse: only a live JVM running kafka.Kafka on this data folder counts."""
    return local_service.is_our_jvm(pid, (_MAIN_CLASS, str(layout.server_properties)))


def _log_tail(layout: _Layout) -> str:
    return local_service.log_tail((layout.log_file, layout.stdout_file), empty="(no broker output)")
