"""A job run as a child process that can always be ended with everything it started.

The demo runs its Flink job (a local MiniCluster client, or ``flink run`` for a cluster) in a child
process of its own session, with its output in a log file: the terminal stays free for the live view,
a Ctrl-C reaches only the demo, and the demo decides how the job ends. The child's process group holds
the client, its MiniCluster JVM and, usually, the Python workers the JVM starts; every process of the
run also carries a marker in its environment (``LAKESTREAM_JOB_RUN=<id>``), so whatever left the group
is still found and ended (as ``StandaloneCluster.stop`` finds a killed TaskManager's Python workers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from devtools import processes

#: Environment variable that marks every process of one run.
RUN_MARKER = "LAKESTREAM_JOB_RUN"


class JobProcess:
    """One child job: :meth:`start`, :meth:`poll` while it runs, :meth:`stop` to end it and its processes."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str], log_file: Path) -> None:
        self.command = list(command)
        self.log_file = log_file
        self.run_id = uuid.uuid4().hex
        self._env = {**env, RUN_MARKER: self.run_id}
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> JobProcess:
        """Start the child: own session, stdin closed, stdout and stderr appended to the log file."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {' '.join(self.command)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                # If the demo itself is killed, the child is told to end too (its JVM follows it).
                preexec_fn=processes.parent_death_signal(signal.SIGTERM),
            )
        return self

    @property
    def pid(self) -> int | None:
        """The child's pid (None before :meth:`start`)."""
        return self._popen.pid if self._popen is not None else None

    def poll(self) -> int | None:
        """The child's exit code once it has ended, else None."""
        return self._popen.poll() if self._popen is not None else None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end on its own and return its exit code."""
        if self._popen is None:
            raise RuntimeError("the job process was not started")
        return self._popen.wait(timeout)

    def leftovers(self) -> list[int]:
        """Pids of processes of this run that are still there (the child's group and marked ones)."""
        found = set(processes.pids_with_env(RUN_MARKER, self.run_id))
        if self._popen is not None:
            try:
                os.killpg(self._popen.pid, 0)
                found |= _group_members(self._popen.pid)
            except ProcessLookupError:
                pass
        return sorted(p for p in found if processes.alive(p))

    def stop(self, *, grace: float = 5, timeout: float = 20) -> list[int]:
        """End the child's group (SIGTERM, ``grace`` seconds, SIGKILL) and every marked process.

        Returns the pids still there after ``timeout`` seconds (empty when everything ended).
        """
        if self._popen is not None:
            processes.kill_group(self._popen, grace=grace if self._popen.poll() is None else 0)
        return processes.kill_until_gone(
            lambda: processes.pids_with_env(RUN_MARKER, self.run_id), timeout=timeout
        )

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the child's output."""
        return "\n".join(self._log_end().rstrip().splitlines()[-lines:])

    def failure(self) -> str:
        """The lines of the child's output that name why it failed (:func:`failure_summary`)."""
        return failure_summary(self._log_end())

    def _log_end(self) -> str:
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(max(0, self.log_file.stat().st_size - 256 * 1024))
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return "(no output)"


def failure_summary(output: str, *, lines: int = 25, causes: int = 3) -> str:
    """The part of a failed job's output that names the cause.

    A Flink failure ends in Java stack frames (``at ...``, ``... 12 more``), and its root cause is in the
    ``Caused by:`` lines before them: those (the last ``causes`` of them) when there are any, with the
    last line that is not a stack frame; else the last ``lines`` lines.
    """
    text = output.rstrip().splitlines()
    found = [ln.strip() for ln in text if ln.lstrip().startswith("Caused by:")]
    if not found:
        return "\n".join(text[-lines:])
    picked = list(dict.fromkeys(found))[-causes:]
    frames = ("at ", "... ", "Caused by:")
    last = next((ln.strip() for ln in reversed(text) if ln.strip() and not ln.strip().startswith(frames)), "")
    return "\n".join([*picked, last] if last and last not in picked else picked)


def _group_members(pgid: int) -> set[int]:
    """Pids in process group ``pgid`` (from /proc; empty where it is missing)."""
    members: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return members
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.add(int(entry.name))
    return members
