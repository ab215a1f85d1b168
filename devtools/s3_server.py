"""A local S3-compatible server (S3Proxy on its filesystem store) for the tests, the demo and benchmarks.

A real S3 API over HTTP on 127.0.0.1 (SigV4 authentication, path-style buckets, multipart uploads,
conditional PUTs), kept in a local folder: the Maven build puts S3Proxy in ``jvm/target/lib/s3proxy``
(``jvm/s3proxy/pom.xml`` says why that version). Like the Kafka broker, :class:`LocalS3` lives as long
as the thread that started it and :func:`start_detached` keeps one in the background for
``lakestream s3``; the process plumbing is ``devtools.local_service``'s. Its own requests (is it
answering, list and create buckets) go through pyarrow's S3 client (:meth:`S3Endpoint.filesystem`).

Delta tables on it: ``write_deltalake("s3://BUCKET/TABLE", data, storage_options=s3.storage_options())``.
Concurrent delta-rs writers are safe on it because it refuses ``If-None-Match: *`` over an existing key
atomically (``tests/integration/devtools/test_s3_server.py`` shows both).
"""

from __future__ import annotations

import logging
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import pyarrow.fs as pafs

from devtools import local_service, processes
from devtools.local_service import AlreadyRunningError, LocalServiceError, ServiceStartError
from lakestream.paths import S3PROXY_LIB_DIR, STATE_DIR, MissingBuildError
from runtime.flink_env import JavaNotFoundError, require_java

__all__ = [
    "BucketNameError",
    "DEFAULT_BUCKET",
    "DEFAULT_DATA_DIR",
    "DEFAULT_STATE_FILE",
    "REGION",
    "JavaNotFoundError",
    "LocalS3",
    "PortInUseError",
    "S3AlreadyRunningError",
    "S3Endpoint",
    "S3JarsMissingError",
    "S3RequestError",
    "S3ServerError",
    "S3StartError",
    "S3Status",
    "check_bucket_name",
    "create_bucket",
    "list_buckets",
    "start_detached",
    "status_detached",
    "stop_detached",
]

log = logging.getLogger(__name__)

#: Where the server keeps its buckets, configuration and log when no ``data_dir`` is given (git-ignored).
DEFAULT_DATA_DIR: Path = STATE_DIR / "s3"
#: Pid, endpoint, key pair and data folder of the detached server (owner-only: it holds the secret key).
DEFAULT_STATE_FILE: Path = STATE_DIR / "s3.json"
#: The bucket ``lakestream s3 start`` creates when given none.
DEFAULT_BUCKET = "lakestream"

HOST = processes.HOST
_MAIN_CLASS = "org.gaul.s3proxy.Main"
#: Key pairs given by a caller go into a Java properties file: printable ASCII without spaces.
_KEY_CHARS = re.compile(r"[\x21-\x7e]{3,128}")
#: The region the local server's clients sign for (S3Proxy accepts any; one name keeps them alike).
REGION = "us-east-1"
#: The storage option that holds the secret key: never printed.
_SECRET = "AWS_SECRET_ACCESS_KEY"
#: S3's rule for new bucket names (what AWS accepts today): 3-63 lowercase letters, digits, dots, hyphens.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


# --------------------------------------------------------------------------------------------- errors


class S3ServerError(LocalServiceError):
    """Base class: anything that stops the local S3 server from starting, answering or stopping."""


class S3JarsMissingError(S3ServerError, MissingBuildError):
    """``jvm/target/lib/s3proxy`` is missing: the Maven build has not been run."""


class PortInUseError(S3ServerError, local_service.PortInUseError):
    """The explicitly requested port is taken by another process."""


class S3AlreadyRunningError(S3ServerError, AlreadyRunningError):
    """A detached server is running with another data folder, port or key pair than requested."""


class S3StartError(S3ServerError, ServiceStartError):
    """The server's JVM exited or did not answer in time; carries the tail of its log."""


class S3RequestError(S3ServerError):
    """A request to the S3 server failed or was refused; the message says which and what to do."""


class BucketNameError(S3ServerError):
    """A bucket name S3 does not accept."""


# ------------------------------------------------------------------------------------------ endpoint


@dataclass(frozen=True)
class S3Endpoint:
    """Where an S3 server answers (``http://127.0.0.1:PORT``) and the key pair it accepts."""

    url: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for this server (``write_deltalake(..., storage_options=)``).

        Key by key, as delta-rs 1.6 hands them to object_store 0.13 (lowercased, so they also work as
        environment variables): the endpoint, a region, the key pair; ``AWS_ALLOW_HTTP``, because the
        local server speaks plain HTTP; ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false``, path-style
        addressing, since ``bucket.127.0.0.1`` does not resolve; ``AWS_CONDITIONAL_PUT=etag``:
        delta-rs commits version N by creating ``_delta_log/N.json`` only if it does not exist yet
        (``If-None-Match: *``), and with this setting object_store sends that condition, so of two
        writers racing for N one gets "already exists" and retries at N+1 instead of overwriting.
        (etag is object_store 0.13's default; it is set so the protection does not hang on a default.)
        ``AWS_S3_ALLOW_UNSAFE_RENAME`` is not set: it would swap the commit for an unprotected one.
        """
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_CONDITIONAL_PUT": "etag",
        }

    def with_keys(self, access_key: str, secret_key: str) -> S3Endpoint:
        """The same server with another key pair (tests use a wrong one)."""
        return S3Endpoint(self.url, access_key, secret_key, self.region)

    def filesystem(self, *, timeout: float = 30.0, attempts: int = 3) -> pafs.S3FileSystem:
        """pyarrow's S3 client (the AWS C++ SDK) on this server, allowed to create buckets.

        Path-style addressing is what pyarrow does with an ``endpoint_override``. ``timeout`` bounds
        connecting and each request; ``attempts`` counts tries per request, retries included.
        """
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            scheme="http",
            endpoint_override=self.url.removeprefix("http://"),
            connect_timeout=timeout,
            request_timeout=timeout,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
            allow_bucket_creation=True,
        )


def check_bucket_name(name: str) -> str:
    """``name`` if S3 accepts it for a new bucket, else :class:`BucketNameError` saying the rule."""
    if not _BUCKET_NAME.fullmatch(name) or ".." in name:
        raise BucketNameError(
            f"{name!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits, dots and "
            "hyphens, starting and ending with a letter or digit (e.g. `lakestream`)"
        )
    return name


def list_buckets(endpoint: S3Endpoint, *, timeout: float = 30.0, attempts: int = 3) -> list[str]:
    """The names of the server's buckets (ListBuckets); :class:`S3RequestError` when it refuses."""
    try:
        infos = endpoint.filesystem(timeout=timeout, attempts=attempts).get_file_info(pafs.FileSelector(""))
    except OSError as exc:
        raise _refused(endpoint, exc, "listing its buckets") from exc
    return sorted(info.path for info in infos if info.type == pafs.FileType.Directory)


def create_bucket(endpoint: S3Endpoint, name: str, *, exist_ok: bool = True) -> bool:
    """Create bucket ``name``; True if it was created, False if it was there (with ``exist_ok``)."""
    check_bucket_name(name)
    fs = endpoint.filesystem()
    try:
        if fs.get_file_info(name).type != pafs.FileType.NotFound:
            if exist_ok:
                return False
            raise S3RequestError(f"bucket {name!r} already exists on the S3 server at {endpoint.url}")
        fs.create_dir(name)
    except OSError as exc:
        raise _refused(endpoint, exc, f"creating bucket {name!r}") from exc
    return True


#: What to do about the AWS SDK's error names, as pyarrow's messages carry them.
_FIXES = {
    "NETWORK_CONNECTION": "start one (`lakestream s3 start`), or check the endpoint",
    "INVALID_ACCESS_KEY_ID": "use the access key it was started with (`lakestream s3 status` shows it)",
    "SIGNATURE_DOES_NOT_MATCH": "use the secret key it was started with (kept in its state file)",
    "ACCESS_DENIED": "use the key pair it was started with (`lakestream s3 status`)",
}


def _refused(endpoint: S3Endpoint, exc: OSError, doing: str) -> S3RequestError:
    fix = next((f for code, f in _FIXES.items() if f"AWS Error {code} " in str(exc)), "read the server's log")
    return S3RequestError(f"the S3 server at {endpoint.url} failed {doing} ({exc}): {fix}")


# --------------------------------------------------------------------------------------------- status


@dataclass(frozen=True)
class S3Status:
    """What a CLI needs to report about a server; ``responding`` and ``buckets`` are None unless probed."""

    running: bool
    pid: int | None = None
    endpoint: S3Endpoint | None = None
    data_dir: Path | None = None
    log_file: Path | None = None
    state_file: Path | None = None
    responding: bool | None = None
    buckets: tuple[str, ...] | None = None

    def describe(self) -> str:
        """One human-readable line, e.g. for ``lakestream s3 status``; never the secret key."""
        if not self.running or self.endpoint is None:
            return "s3: not running"
        answer = {True: "answering", False: "NOT answering", None: "not probed"}[self.responding]
        return (
            f"s3: running (pid {self.pid}) at {self.endpoint.url}, {answer}; "
            f"data {self.data_dir}, log {self.log_file}"
        )

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for the server (see :meth:`S3Endpoint.storage_options`)."""
        if self.endpoint is None:
            raise S3ServerError("no S3 server is running: start one with `lakestream s3 start`")
        return self.endpoint.storage_options()

    def export_line(self) -> str:
        """``export ...`` of :meth:`storage_options` for a shell; the secret is not in it: the line reads
        it from the owner-only state file when it runs."""
        exports = [
            f"{key}={shlex.quote(value)}" for key, value in self.storage_options().items() if key != _SECRET
        ]
        read_secret = shlex.quote('import json,sys; print(json.load(open(sys.argv[1]))["secret_key"])')
        exports.append(f'{_SECRET}="$(python3 -c {read_secret} {shlex.quote(str(self.state_file))})"')
        return "export " + " ".join(exports)


# ----------------------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class _Layout(local_service.ServiceLayout):
    """Files of one server data folder, so every entry point agrees on where things live."""

    name: str = "s3proxy"

    @property
    def buckets_dir(self) -> Path:
        """The filesystem store: one folder per bucket, one file per object."""
        return self.root / "buckets"

    @property
    def properties(self) -> Path:
        """S3Proxy's configuration, with the secret key: owner-only."""
        return self.root / "s3proxy.properties"

    @property
    def logback_xml(self) -> Path:
        return self.root / "logback.xml"


class LocalS3(local_service.RunningService[_Layout]):
    """A running local S3 server started by this process; stop it, or use it as a context manager."""

    def __init__(
        self, *, process: subprocess.Popen[bytes], port: int, endpoint: S3Endpoint, layout: _Layout
    ) -> None:
        """Wrap a spawned server process; use :meth:`start`, which also waits until it answers."""
        super().__init__(process=process, port=port, layout=layout)
        self._endpoint = endpoint

    @classmethod
    def start(
        cls,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        buckets: Iterable[str] = (),
        timeout: float = 60,
        heap: str = "512m",
    ) -> LocalS3:
        """Start a server and return once it answers a signed request; then create ``buckets``.

        ``data_dir`` keeps the buckets across restarts (default ``STATE_DIR/s3``); ``port`` defaults to
        a free one; the key pair is generated unless given. On Linux the server gets SIGTERM when the
        *thread* that started it exits: start it from a thread that outlives it, or use
        :func:`start_detached`. Raises :class:`JavaNotFoundError`, :class:`S3JarsMissingError`,
        :class:`PortInUseError`, :class:`S3StartError` or :class:`BucketNameError`.
        """
        buckets = [check_bucket_name(b) for b in buckets]
        server = _launch(
            data_dir=data_dir,
            port=port,
            access_key=access_key,
            secret_key=secret_key,
            timeout=timeout,
            heap=heap,
            detached=False,
        )
        try:
            for bucket in buckets:
                server.create_bucket(bucket)
        except BaseException:
            server.stop(timeout=10)
            raise
        return server

    @property
    def endpoint(self) -> S3Endpoint:
        """URL and key pair, for clients."""
        return self._endpoint

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self._endpoint.url

    @property
    def buckets_dir(self) -> Path:
        """Where the objects are, one folder per bucket (for tests that look behind the API)."""
        return self._layout.buckets_dir

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for this server (see :meth:`S3Endpoint.storage_options`)."""
        return self._endpoint.storage_options()

    def create_bucket(self, name: str, *, exist_ok: bool = True) -> bool:
        """Create bucket ``name``; True if created, False if it was there (with ``exist_ok``)."""
        return create_bucket(self._endpoint, name, exist_ok=exist_ok)

    def status(self, *, probe: bool = True) -> S3Status:
        """Report liveness, and with ``probe`` whether it answers a signed request and its buckets."""
        running = self.running
        responding, buckets = _probe(self._endpoint) if running and probe else (None, None)
        return S3Status(
            running=running,
            pid=self.pid if running else None,
            endpoint=self._endpoint,
            data_dir=self.data_dir,
            log_file=self.log_file,
            responding=responding,
            buckets=buckets,
        )

    def stop(self, timeout: float = 30) -> int | None:
        """Shut down (SIGTERM: S3Proxy drains its requests), SIGKILL after ``timeout`` s; the exit code."""
        return _stop_server(self._process.pid, timeout=timeout, popen=self._process)

    def __repr__(self) -> str:
        return f"LocalS3(pid={self.pid}, url={self.url!r})"


# ------------------------------------------------------------------------------------ detached server

_STATE_KEYS = ("pid", "url", "access_key", "secret_key", "data_dir")


def start_detached(
    *,
    data_dir: Path | None = None,
    port: int | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    buckets: Iterable[str] = (),
    timeout: float = 60,
    heap: str = "512m",
    state_file: Path | None = None,
) -> S3Status:
    """Start a background server that outlives this process, record it in ``state_file`` (mode 0600).

    Idempotent: if the recorded server is still running with the same data folder (and, where given,
    port and key pair) its status is returned; ``buckets`` are created on it either way. One recorded
    with other settings raises :class:`S3AlreadyRunningError`, naming ``lakestream s3 stop``.
    """
    state_path = state_file or DEFAULT_STATE_FILE
    layout = _Layout((data_dir or DEFAULT_DATA_DIR).resolve())
    buckets = [check_bucket_name(b) for b in buckets]
    current = status_detached(state_file=state_path, probe=False)
    if current.running and current.endpoint is not None:
        same = (
            current.data_dir == layout.root
            and (port is None or current.endpoint.url == _url(port))
            and (access_key is None or access_key == current.endpoint.access_key)
            and (secret_key is None or secret_key == current.endpoint.secret_key)
        )
        if not same:
            raise S3AlreadyRunningError(
                f"a detached S3 server is already running (pid {current.pid}, {current.endpoint.url}, "
                f"data {current.data_dir}) with other settings; stop it first with `lakestream s3 stop`"
            )
        for bucket in buckets:
            create_bucket(current.endpoint, bucket)
        return status_detached(state_file=state_path)
    server = _launch(
        data_dir=layout.root,
        port=port,
        access_key=access_key,
        secret_key=secret_key,
        timeout=timeout,
        heap=heap,
        detached=True,
    )
    local_service.remember_detached(server._process)
    try:
        for bucket in buckets:
            server.create_bucket(bucket)
    except BaseException:
        server.stop(timeout=10)
        raise
    local_service.write_state(
        state_path,
        {
            "pid": server.pid,
            "url": server.url,
            "port": server.port,
            "region": server.endpoint.region,
            "access_key": server.endpoint.access_key,
            "secret_key": server.endpoint.secret_key,
            "data_dir": str(server.data_dir),
            "log_file": str(server.log_file),
            "started_at": time.time(),
        },
    )
    return status_detached(state_file=state_path)


def status_detached(*, state_file: Path | None = None, probe: bool = True) -> S3Status:
    """Report on the server recorded in ``state_file``; a stale record counts as not running."""
    state_path = state_file or DEFAULT_STATE_FILE
    record = local_service.read_state(state_path, _STATE_KEYS, what="S3 server")
    if record is None:
        return S3Status(running=False)
    pid = int(record["pid"])
    layout = _Layout(Path(record["data_dir"]))
    endpoint = S3Endpoint(
        url=str(record["url"]),
        access_key=str(record["access_key"]),
        secret_key=str(record["secret_key"]),
        region=str(record.get("region", REGION)),
    )
    if not _is_our_server(pid, layout):
        return S3Status(running=False, endpoint=endpoint, data_dir=layout.root, state_file=state_path)
    responding, buckets = _probe(endpoint) if probe else (None, None)
    return S3Status(
        running=True,
        pid=pid,
        endpoint=endpoint,
        data_dir=layout.root,
        log_file=layout.log_file,
        state_file=state_path,
        responding=responding,
        buckets=buckets,
    )


def stop_detached(*, timeout: float = 30, state_file: Path | None = None) -> S3Status:
    """Stop the recorded background server (SIGTERM, then SIGKILL) and forget it.

    Returns the status it had before stopping (``running=False`` if there was nothing to stop). Only
    the recorded pid is signalled, and only after checking it is still that server's JVM.
    """
    state_path = state_file or DEFAULT_STATE_FILE
    before = status_detached(state_file=state_path, probe=False)
    if before.running and before.pid is not None:
        _stop_server(before.pid, timeout=timeout, popen=local_service.forget_detached(before.pid))
    state_path.unlink(missing_ok=True)
    return before


# ------------------------------------------------------------------------------------------ launching


def _url(port: int) -> str:
    return f"http://{HOST}:{port}"


def _launch(
    *,
    data_dir: Path | None,
    port: int | None,
    access_key: str | None,
    secret_key: str | None,
    timeout: float,
    heap: str,
    detached: bool,
) -> LocalS3:
    java = require_java()
    classpath = _s3proxy_classpath()
    access_key = _checked_key("access_key", access_key or f"LSK{secrets.token_hex(8).upper()}")
    secret_key = _checked_key("secret_key", secret_key or secrets.token_urlsafe(30))
    layout = _Layout((data_dir or DEFAULT_DATA_DIR).resolve())
    layout.buckets_dir.mkdir(parents=True, exist_ok=True)
    if port is not None and processes.port_in_use(port):
        raise PortInUseError(port)

    def attempt(server_port: int) -> LocalS3:
        endpoint = S3Endpoint(_url(server_port), access_key, secret_key, REGION)
        _write_config(layout, endpoint)
        process = _spawn(java, classpath, layout, heap=heap, detached=detached)
        server = LocalS3(process=process, port=server_port, endpoint=endpoint, layout=layout)
        try:
            _wait_ready(server, timeout=timeout)
        except BaseException:
            server.stop(timeout=10)
            raise
        return server

    server = local_service.start_on_port(port, attempt)
    log.info("S3 server pid %d answering at %s", server.pid, server.url)
    return server


def _s3proxy_classpath() -> str:
    if not any(S3PROXY_LIB_DIR.glob("s3proxy-*.jar")):
        raise S3JarsMissingError(
            f"no S3Proxy jars in {S3PROXY_LIB_DIR}: run `make jvm` (or `mvn -q -f jvm/pom.xml package`)"
        )
    return str(S3PROXY_LIB_DIR / "*")


def _checked_key(name: str, value: str) -> str:
    if not _KEY_CHARS.fullmatch(value):
        raise S3ServerError(
            f"{name} must be 3-128 printable ASCII characters without spaces; omit it to generate one"
        )
    return value


def _write_config(layout: _Layout, endpoint: S3Endpoint) -> None:
    """S3Proxy's properties (owner-only: they hold the secret) and a logback configuration."""
    settings = {
        "s3proxy.endpoint": endpoint.url,  # binds 127.0.0.1 only
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": endpoint.access_key,
        "s3proxy.credential": endpoint.secret_key,
        # The filesystem store (filesystem-nio2 since S3Proxy 4): If-None-Match: * is resolved by
        # link(2) as the object is published, so it holds against concurrent writers.
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(layout.buckets_dir),
    }
    text = "# Written by devtools/s3_server.py at every start; edits are overwritten.\n" + "".join(
        f"{key}={_properties_value(value)}\n" for key, value in settings.items()
    )
    local_service.write_private(layout.properties, text)
    log_file = escape(str(layout.log_file))
    # The S3Proxy jar ships logback without a configuration, so logback's default would log every
    # request at DEBUG to stdout: here INFO goes to a size-capped file instead.
    layout.logback_xml.write_text(
        "<!-- Written by devtools/s3_server.py at every start; edits are overwritten. -->\n"
        "<configuration>\n"
        '  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">\n'
        f"    <file>{log_file}</file>\n"
        '    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">\n'
        f"      <fileNamePattern>{log_file}.%i</fileNamePattern>\n"
        "      <minIndex>1</minIndex>\n"
        "      <maxIndex>2</maxIndex>\n"
        "    </rollingPolicy>\n"
        '    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">\n'
        "      <maxFileSize>20MB</maxFileSize>\n"
        "    </triggeringPolicy>\n"
        "    <encoder><pattern>[%d] %level %msg - %logger%n</pattern></encoder>\n"
        "  </appender>\n"
        '  <root level="INFO"><appender-ref ref="FILE"/></root>\n'
        "</configuration>\n",
        encoding="utf-8",
    )


def _properties_value(value: str) -> str:
    """A value as ``java.util.Properties`` reads it back: backslashes escaped, no leading blanks."""
    return value.replace("\\", "\\\\")


def _spawn(
    java: str, classpath: str, layout: _Layout, *, heap: str, detached: bool
) -> subprocess.Popen[bytes]:
    command = [
        java,
        f"-Xmx{heap}",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlogback.configurationFile={layout.logback_xml}",
        "-cp",
        classpath,
        _MAIN_CLASS,
        "--properties",
        str(layout.properties),
    ]
    return local_service.spawn_jvm(command, cwd=layout.root, output=layout.stdout_file, detached=detached)


def _wait_ready(server: LocalS3, *, timeout: float) -> None:
    layout = server._layout

    def probe(remaining: float) -> bool:
        return processes.accepts_connections(server.port) and _answers(
            server.endpoint, timeout=min(10.0, max(remaining, 1.0))
        )

    def fail(message: str) -> S3StartError:
        return S3StartError(message, log_file=layout.log_file, log_tail=_log_tail(layout))

    local_service.wait_ready(
        server._process,
        probe,
        timeout=timeout,
        name="the S3 server",
        address=server.url,
        where=f"port {server.port}, data {layout.root}",
        fail=fail,
    )


def _answers(endpoint: S3Endpoint, *, timeout: float) -> bool:
    """Whether the server answers a signed ListBuckets (up, and taking this key pair)."""
    try:
        list_buckets(endpoint, timeout=timeout, attempts=1)
    except S3RequestError:
        return False
    return True


def _probe(endpoint: S3Endpoint) -> tuple[bool, tuple[str, ...] | None]:
    try:
        return True, tuple(list_buckets(endpoint, timeout=5.0, attempts=1))
    except S3RequestError as exc:
        log.debug("S3 server at %s not answering: %s", endpoint.url, exc)
        return False, None


# ------------------------------------------------------------------------------------------- stopping


def _stop_server(pid: int, *, timeout: float, popen: subprocess.Popen[bytes] | None) -> int | None:
    """Stop the server JVM; one that survives SIGKILL is an S3ServerError."""
    return local_service.stop_process(
        pid, timeout=timeout, popen=popen, name="S3 server", error=S3ServerError
    )


def _is_our_server(pid: int, layout: _Layout) -> bool:
    """Guard against pid reuse: only a live JVM running S3Proxy on this data folder's properties counts."""
    return local_service.is_our_jvm(pid, (_MAIN_CLASS, str(layout.properties)))


def _log_tail(layout: _Layout) -> str:
    return local_service.log_tail((layout.log_file, layout.stdout_file), empty="(no S3 server output)")
