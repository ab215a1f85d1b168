"""Ports and processes of the local services: free ports, liveness, and ending what was started.

The broker, the standalone cluster, the tests and the benchmarks all start JVMs and worker processes
and must leave none behind, so each question (is this port free, is this pid still running, how to
end a process or a whole process group) has one answer here. Everything binds to loopback.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- ports


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_port(exclude: Collection[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, not one of ``exclude`` (ports already chosen)."""
    for _ in range(50):
        found = _ephemeral_port()
        if found not in exclude:
            return found
    raise OSError(f"could not find a free TCP port on {HOST}")


def port_in_use(port: int) -> bool:
    """True when the port cannot be bound on 127.0.0.1 (a listener, or a socket bound to it).

    Binds with ``SO_REUSEADDR``, so connections of an earlier run in TIME_WAIT do not count, and
    sends nothing to whatever holds the port. For a port another process is about to bind, probe
    with :func:`accepts_connections` instead: binding it, even briefly, can make that process fail.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
            sock.listen(1)
        except OSError:
            return True
    return False


def accepts_connections(port: int, *, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------------ processes


def alive(pid: int, popen: subprocess.Popen[Any] | None = None) -> bool:
    """Whether the process still runs; reaps it if it is our child, and counts a zombie as gone."""
    if popen is not None:
        return popen.poll() is None
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return _proc_state(pid) not in ("Z", "X", None)


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None if sys.platform.startswith("linux") else "?"
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[0]


def wait_gone(pid: int, popen: subprocess.Popen[Any] | None, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the process to end; True once it has."""
    deadline = time.monotonic() + timeout
    while alive(pid, popen):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def terminate(
    pid: int, *, timeout: float, popen: subprocess.Popen[Any] | None = None, name: str = "process"
) -> int | None:
    """SIGTERM, up to ``timeout`` seconds, then SIGKILL; reaps our own child. The exit code if known."""
    if not alive(pid, popen):
        return popen.returncode if popen is not None else None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_gone(pid, popen, timeout):
        return popen.returncode if popen is not None else None
    log.warning("%s pid %d ignored SIGTERM for %.0fs, sending SIGKILL", name, pid, timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_gone(pid, popen, 10):
        raise OSError(f"{name} pid {pid} survived SIGKILL; check `ps -p {pid}`")
    return popen.returncode if popen is not None else None


def kill_until_gone(find: Callable[[], Collection[int]], *, timeout: float) -> list[int]:
    """SIGKILL the pids ``find()`` lists, again and again, until it lists none or ``timeout`` passes.

    A SIGKILLed process is still listed until the kernel has torn it down, hence the repeated look.
    Returns what is still listed at the end (empty when everything went).
    """
    deadline = time.monotonic() + timeout
    while (pids := list(find())) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return pids


def kill_group(popen: subprocess.Popen[Any], *, grace: float = 0.0, reap_timeout: float = 30) -> int | None:
    """End the process group ``popen`` leads (started with ``start_new_session=True``) and reap it.

    With ``grace`` the group gets SIGTERM first and up to ``grace`` seconds to end; whatever is left
    (a JVM can outlive the Python client that started it) gets SIGKILL. Returns the leader's exit code.
    """
    if grace > 0:
        try:
            os.killpg(popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return popen.poll()
        deadline = time.monotonic() + grace
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=grace)
        while time.monotonic() < deadline:
            try:
                os.killpg(popen.pid, 0)
            except ProcessLookupError:
                return popen.poll()
            time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    return popen.wait(timeout=reap_timeout)


def pids_with_env(key: str, value: str) -> list[int]:
    """Pids of other processes whose environment holds ``key=value`` ([] where /proc is missing)."""
    needle = f"{key}={value}".encode()
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send ``sig`` to the child when the starting thread dies.

    So a crashed test run leaves no stray JVM. None off Linux (nothing to ask for).
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def set_pdeathsig() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return set_pdeathsig
