"""What the local services (the Kafka broker, the S3 server) share: one JVM each, started and stopped alike.

Each service is a child JVM on 127.0.0.1. Started for a test run it is tied to the starting thread
(Linux parent-death signal); started detached it outlives its starter and is recorded in a state file,
so another CLI process can report on it and stop it, signalling only a pid that is still that
service's JVM. Readiness is evidence (the service answering), never a sleep; a service that exits or
does not answer fails with the tail of its log. The services add what differs: configuration files,
the readiness probe, the settings a running one must match.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from devtools import processes
from lakestream.errors import LakestreamError

__all__ = [
    "AlreadyRunningError",
    "LocalServiceError",
    "PortInUseError",
    "ServiceStartError",
    "detached_child",
    "forget_detached",
    "is_our_jvm",
    "log_tail",
    "read_state",
    "remember_detached",
    "spawn_jvm",
    "start_on_port",
    "stop_process",
    "tail_text",
    "wait_ready",
    "write_private",
    "write_state",
]

log = logging.getLogger(__name__)

HOST = processes.HOST
_LOG_TAIL_LINES = 40
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------- errors


class LocalServiceError(LakestreamError, RuntimeError):
    """Base class: a local service cannot start, answer or stop (a setup error: exit code 2)."""

    names_command = False


class PortInUseError(LocalServiceError):
    """The explicitly requested port is taken by another process."""

    def __init__(self, port: int) -> None:
        super().__init__(
            f"port {port} on {HOST} is already in use: stop whatever listens there "
            f"(e.g. `ss -ltnp 'sport = :{port}'`), pass another port, or omit port to pick a free one"
        )
        self.port = port


class ServiceStartError(LocalServiceError):
    """The service's JVM exited or did not answer in time; carries the tail of its log."""

    def __init__(self, message: str, *, log_file: Path, log_tail: str) -> None:
        super().__init__(f"{message}\n--- last lines of {log_file} ---\n{log_tail}")
        self.log_file = log_file
        self.log_tail = log_tail


class AlreadyRunningError(LocalServiceError):
    """A detached service is running with other settings than requested."""


# ---------------------------------------------------------------------------------------- state files


@dataclass(frozen=True)
class ServiceLayout:
    """The data folder of one local service and the two files every service writes there: its own log
    (``<name>.log``) and its console output (``<name>.out``). Each service adds its own files."""

    root: Path
    name: str

    @property
    def log_file(self) -> Path:
        """The service's own log."""
        return self.root / f"{self.name}.log"

    @property
    def stdout_file(self) -> Path:
        """What the service's JVM writes to stdout and stderr."""
        return self.root / f"{self.name}.out"


_L = TypeVar("_L", bound=ServiceLayout)
_S = TypeVar("_S", bound="RunningService[Any]")


class RunningService(Generic[_L]):
    """A local service's JVM started by this process, in its data folder: stop it, or use it as a
    context manager. Each service says how it stops and what else it knows about itself."""

    def __init__(self, *, process: subprocess.Popen[bytes], port: int, layout: _L) -> None:
        """Wrap a spawned service process; each service's ``start`` also waits until it answers."""
        self._process = process
        self._port = port
        self._layout = layout

    @property
    def port(self) -> int:
        """The port its clients use."""
        return self._port

    @property
    def pid(self) -> int:
        """Process id of the service's JVM."""
        return self._process.pid

    @property
    def data_dir(self) -> Path:
        """The folder holding the service's data, configuration and log."""
        return self._layout.root

    @property
    def log_file(self) -> Path:
        """The service's log, the first place to look when something is off."""
        return self._layout.log_file

    @property
    def running(self) -> bool:
        """Whether the service's JVM is still alive."""
        return self._process.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """Shut the service down; its exit code."""
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def write_state(path: Path, record: Mapping[str, Any]) -> None:
    """Record a detached service in ``path``: atomically, and owner-only (it may hold a secret)."""
    write_private(path, json.dumps(dict(record), indent=2) + "\n")


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically; the file is readable and writable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover could carry other permissions; O_EXCL below makes it ours
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


def read_state(path: Path, required: Collection[str], *, what: str) -> dict[str, Any] | None:
    """The record in ``path``; None when there is none, and (with a warning) when it is unreadable."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s state file %s: %s", what, path, exc)
        return None
    if not isinstance(record, dict) or not set(required) <= record.keys():
        log.warning("ignoring %s state file %s without %s", what, path, "/".join(sorted(required)))
        return None
    return record


# ------------------------------------------------------------------------------------------ processes

#: Popen objects of detached services started by this process, so stopping one reaps the child.
_DETACHED_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def remember_detached(process: subprocess.Popen[bytes]) -> None:
    """Keep the Popen of a detached service this process started (its pid is recorded elsewhere)."""
    _DETACHED_CHILDREN[process.pid] = process


def detached_child(pid: int) -> subprocess.Popen[bytes] | None:
    """The Popen of a detached service this process started, if it did."""
    return _DETACHED_CHILDREN.get(pid)


def forget_detached(pid: int) -> subprocess.Popen[bytes] | None:
    """Drop (and return) the Popen of a detached service, once it is being stopped."""
    return _DETACHED_CHILDREN.pop(pid, None)


def spawn_jvm(command: Sequence[str], *, cwd: Path, output: Path, detached: bool) -> subprocess.Popen[bytes]:
    """Start ``command`` with stdout and stderr appended to ``output``, in a session of its own.

    Not detached, Linux sends it SIGTERM when the starting *thread* exits (so a killed test run leaves
    no JVM behind); detached, it outlives this process.
    """
    with output.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(command)}\n".encode())
        out.flush()
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            # Own session: a Ctrl-C in the terminal reaches the CLI, not the service it manages.
            start_new_session=True,
            preexec_fn=None if detached else processes.parent_death_signal(),
        )


def wait_ready(
    process: subprocess.Popen[bytes],
    probe: Callable[[float], bool],
    *,
    timeout: float,
    name: str,
    address: str,
    where: str,
    fail: Callable[[str], Exception],
) -> None:
    """Return once ``probe(seconds left)`` is true; ``fail(message)`` when the JVM exits or time runs out.

    ``name`` ("the Kafka broker"), ``address`` (where it should answer) and ``where`` (its port and data
    folder) make the messages; the caller's ``fail`` adds the log tail.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise fail(f"{name} exited with code {process.returncode} while starting ({where})")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise fail(
                f"{name} did not answer at {address} within {timeout:.0f}s; "
                "raise timeout= on a slow machine or read the log below"
            )
        if probe(remaining):
            return
        time.sleep(0.2)


def start_on_port(requested: int | None, attempt: Callable[[int], _T]) -> _T:
    """``attempt(port)`` on the requested port, or on a free one.

    A free port found here can be taken before the JVM binds it, so when the port was ours to choose a
    start that failed with "Address already in use" is retried twice on another. ``attempt`` stops its
    own JVM when it fails. The caller checks a requested port first (its own ``PortInUseError``).
    """
    attempts = 1 if requested is not None else 3
    for number in range(1, attempts + 1):
        port = requested if requested is not None else processes.free_port()
        try:
            return attempt(port)
        except ServiceStartError as exc:
            if number < attempts and "Address already in use" in exc.log_tail:
                log.info("port %d raced with another process, retrying on another", port)
                continue
            raise
    raise AssertionError("unreachable: the last attempt either returns or raises")


def stop_process(
    pid: int,
    *,
    timeout: float,
    popen: subprocess.Popen[bytes] | None,
    name: str,
    error: Callable[[str], LocalServiceError],
) -> int | None:
    """SIGTERM, SIGKILL after ``timeout`` seconds; a process that survives SIGKILL is ``error(message)``."""
    try:
        return processes.terminate(pid, timeout=timeout, popen=popen, name=name)
    except OSError as exc:
        raise error(str(exc)) from exc


def is_our_jvm(pid: int, required_args: Collection[str]) -> bool:
    """Guard against pid reuse: only a live process whose command line holds every one of ``required_args``.

    Where there is no ``/proc`` (not Linux) the recorded pid is trusted.
    """
    if not processes.alive(pid, detached_child(pid)):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not sys.platform.startswith("linux")
    args = {arg.decode(errors="replace") for arg in argv}
    return set(required_args) <= args


# ---------------------------------------------------------------------------------------------- logs


def log_tail(paths: Sequence[Path], *, empty: str = "(no output)") -> str:
    """The last lines of each non-empty file of ``paths``, each under its name."""
    parts = []
    for path in paths:
        text = tail_text(_read_end(path))
        if text.strip():
            parts.append(f"[{path.name}]\n{text}")
    return "\n".join(parts) or empty


def _read_end(path: Path, max_bytes: int = 64 * 1024) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - max_bytes))
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def tail_text(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
