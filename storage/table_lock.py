"""An exclusive lock per table, kept in the table's own files: on a local disk and an object store alike.

Two of lakestream's rewrites of one table at once would put rows in it twice (``maintenance.rewrites``),
and maintainers may run on several hosts, so the lock lives beside the table, as numbered generations
``<table>/_lakestream/locks/<name>/<generation:020d>.json``; the newest one says who holds the lock and
until when. Taking it is creating the next generation with ``TableFiles.create`` (``O_EXCL``, ``PUT
If-None-Match: *``), which of several takers exactly one can do; the holder renews it while it works
by creating the next one again, and releases it with a generation that says so. Nothing is replaced or
deleted while it is the newest, so no store needs a conditional update (``If-Match``). A holder that
stops without releasing blocks others until its expiry, or not at all when it ran on the same host
and its process is gone. DESIGN.md section 10 has the argument.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lakestream.errors import FAILED, LakestreamError
from lakestream.time import plain_utc
from storage.table_files import FileInfo, TableFiles

log = logging.getLogger(__name__)

LOCKS_DIR = "_lakestream/locks"
LOCK_FORMAT = 1
#: How long a lock holds without a renewal: what a stopped holder on another host blocks others for.
LEASE_S = 120.0
#: How often a holder renews (several renewals fit into one lease, so a slow store does not lose it).
RENEW_EVERY_S = 30.0
#: Waiting for a held lock looks again after this long at first, then less often (up to a second).
FIRST_POLL_S = 0.05

_GENERATION = re.compile(r"(\d{20})\.json")

LockStateName = Literal["held", "released"]


class LockHeldError(LakestreamError, RuntimeError):
    """Another holder kept the lock for longer than the caller would wait; ``state`` says who."""

    exit_code = FAILED

    def __init__(self, message: str, *, state: LockState, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.state = state


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), None when it is gone or a zombie."""
    stat = _read_text(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name in parentheses may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]


def _pid_space() -> str:
    """What makes a pid mean one process: this boot of this kernel and this pid namespace ("" unknown)."""
    boot = _read_text("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot else ""


@dataclass(frozen=True, slots=True)
class LockOwner:
    """One taking of a lock by one process: who, for what, and how to tell that its process is gone."""

    #: Unique per taking: tells this holder's generations from any other's.
    token: str
    operation: str
    command: str
    host: str
    pid: int
    #: Boot and pid namespace of ``pid`` ("" where that cannot be known: no crash check then).
    pid_space: str = ""
    #: Start time of ``pid``, so that a later process with the same pid is not taken for the holder.
    process_start: str = ""

    @classmethod
    def this_process(cls, operation: str) -> LockOwner:
        """An owner for ``operation`` in the running process."""
        argv = [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]
        pid = os.getpid()
        return cls(
            token=uuid.uuid4().hex,
            operation=operation,
            command=" ".join(argv)[:200],
            host=socket.gethostname(),
            pid=pid,
            pid_space=_pid_space(),
            process_start=_process_start(pid) or "",
        )

    def crashed(self) -> bool:
        """True when the owner ran on this host, in this boot and pid namespace, and its process is gone."""
        if not self.pid_space or self.host != socket.gethostname() or self.pid_space != _pid_space():
            return False
        return _process_start(self.pid) != self.process_start

    def describe(self) -> str:
        """``optimize by pid 12 on host-a (lakestream maintain optimize silver/orders)``."""
        return f"{self.operation} by pid {self.pid} on {self.host} ({self.command})"


@dataclass(frozen=True, slots=True)
class LockRecord:
    """The content of one generation: its owner, held or released, and until when it holds."""

    owner: LockOwner
    state: LockStateName
    acquired_ms: int
    expires_ms: int

    def to_json(self) -> bytes:
        """Serialized form (versioned by ``format``)."""
        doc: dict[str, Any] = {
            "format": LOCK_FORMAT,
            "state": self.state,
            "acquired_ms": self.acquired_ms,
            "expires_ms": self.expires_ms,
            "owner": {
                "token": self.owner.token,
                "operation": self.owner.operation,
                "command": self.owner.command,
                "host": self.owner.host,
                "pid": self.owner.pid,
                "pid_space": self.owner.pid_space,
                "process_start": self.owner.process_start,
            },
        }
        return json.dumps(doc, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> LockRecord:
        """Parse :meth:`to_json`'s output; ``ValueError`` for anything else (a torn or foreign object)."""
        try:
            doc = json.loads(data)
            if doc.get("format") != LOCK_FORMAT or doc["state"] not in ("held", "released"):
                raise ValueError(f"unknown lock format or state: {doc.get('format')!r}, {doc.get('state')!r}")
            o = doc["owner"]
            owner = LockOwner(
                token=str(o["token"]),
                operation=str(o["operation"]),
                command=str(o["command"]),
                host=str(o["host"]),
                pid=int(o["pid"]),
                pid_space=str(o.get("pid_space", "")),
                process_start=str(o.get("process_start", "")),
            )
            return cls(owner, doc["state"], int(doc["acquired_ms"]), int(doc["expires_ms"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a lock record: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class LockState:
    """The newest generation of a lock as a taker finds it."""

    #: 0: the lock was never taken.
    generation: int
    #: None when the generation cannot be parsed (being written, or damaged).
    record: LockRecord | None = None
    #: Modification time of the generation (an unreadable one expires a lease after it).
    written_ms: int = 0

    def free(self, now_ms: int, lease_ms: int) -> bool:
        """Whether a taker may create the next generation now."""
        if self.generation == 0:
            return True
        if self.record is None:
            return now_ms >= self.written_ms + lease_ms
        record = self.record
        return record.state == "released" or now_ms >= record.expires_ms or record.owner.crashed()

    def expires_ms(self, lease_ms: int) -> int:
        """When the current holder lets go at the latest, unless it renews."""
        return self.record.expires_ms if self.record is not None else self.written_ms + lease_ms

    def describe(self, lease_ms: int) -> str:
        """Who holds it since when and until when, for an error message."""
        until = plain_utc(self.expires_ms(lease_ms))
        if self.record is None:
            return f"an unreadable lock generation {self.generation} (written {plain_utc(self.written_ms)})"
        return (
            f"{self.record.owner.describe()}, taken {plain_utc(self.record.acquired_ms)}, "
            f"held until {until} unless renewed"
        )


def now_ms() -> int:
    """Wall clock in epoch milliseconds: what expiry times are written in."""
    return int(time.time() * 1000)


class TableLock:
    """Lock ``name`` of one table (see the module docstring)."""

    def __init__(
        self,
        files: TableFiles,
        name: str = "maintenance",
        *,
        lease_s: float = LEASE_S,
        renew_every_s: float = RENEW_EVERY_S,
    ) -> None:
        if not 0 < renew_every_s < lease_s:
            raise ValueError(f"renew_every_s ({renew_every_s}) must be above 0 and below lease_s ({lease_s})")
        self.files = files
        self.name = name
        self.folder = f"{LOCKS_DIR}/{name}"
        self.lease_ms = int(lease_s * 1000)
        self.renew_every_s = renew_every_s

    @property
    def where(self) -> str:
        """The lock's folder, for messages."""
        return f"{self.files.uri.rstrip('/')}/{self.folder}"

    def path(self, generation: int) -> str:
        """Where ``generation`` lives, relative to the table root."""
        return f"{self.folder}/{generation:020d}.json"

    def _generations(self) -> list[tuple[int, FileInfo]]:
        found = []
        for info in self.files.list(self.folder, recursive=False):
            match = _GENERATION.fullmatch(info.path.rpartition("/")[2])
            if match:
                found.append((int(match.group(1)), info))
        return sorted(found, key=lambda g: g[0])

    def state(self) -> LockState:
        """The newest generation (tidied ones may vanish under a reader: it then looks again)."""
        while True:
            generations = self._generations()
            if not generations:
                return LockState(0)
            generation, info = generations[-1]
            data = self.files.read(info.path)
            if data is None:
                continue
            try:
                record: LockRecord | None = LockRecord.from_json(data)
            except ValueError:
                record = None
            return LockState(generation, record, info.modified_ms)

    def _create(self, generation: int, record: LockRecord) -> bool:
        """Create ``generation``; True when it is this owner's and the newest.

        A create that reports a conflict may have landed anyway (a retried request): the owner's token
        tells. A generation below the newest can be created again once it was tidied away; that one is
        not the lock, and is removed again.
        """
        path = self.path(generation)
        if not self.files.create(path, record.to_json()):
            data = self.files.read(path)
            with contextlib.suppress(ValueError):
                if data is not None and LockRecord.from_json(data).owner.token == record.owner.token:
                    return self._newest_is(generation)
            return False
        if not self._newest_is(generation):
            self.files.delete(path)
            return False
        return True

    def _newest_is(self, generation: int) -> bool:
        """Whether ``generation`` is the newest; then the older ones go (they no longer mean anything)."""
        generations = self._generations()
        if not generations or generations[-1][0] != generation:
            return False
        for _, info in generations[:-1]:
            self.files.delete(info.path)
        return True

    def acquire(self, operation: str, *, wait_s: float) -> HeldLock:
        """Take the lock for ``operation``, waiting up to ``wait_s`` for a holder; renewed until released.

        ``LockHeldError`` names the holder when the wait ends first.
        """
        owner = LockOwner.this_process(operation)
        deadline = time.monotonic() + wait_s
        poll = FIRST_POLL_S
        while True:
            current = self.state()
            if current.free(now_ms(), self.lease_ms):
                taken = now_ms()
                issued = time.monotonic()
                record = LockRecord(owner, "held", taken, taken + self.lease_ms)
                if self._create(current.generation + 1, record):
                    return HeldLock(self, record, current.generation + 1, issued)
                continue  # another taker won that generation: look again at once
            if time.monotonic() >= deadline:
                raise LockHeldError(
                    f"{self.where} is held by {current.describe(self.lease_ms)}",
                    state=current,
                )
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            poll = min(poll * 2, 1.0)

    @contextlib.contextmanager
    def holding(self, operation: str, *, wait_s: float) -> Iterator[HeldLock]:
        """The lock held for the ``with`` block (see :meth:`acquire`), released at its end."""
        held = self.acquire(operation, wait_s=wait_s)
        try:
            yield held
        finally:
            held.release()


class HeldLock:
    """A lock this process holds: a background thread renews it until :meth:`release`."""

    def __init__(self, lock: TableLock, record: LockRecord, generation: int, issued_mono: float) -> None:
        self.lock = lock
        self.record = record
        self.generation = generation
        #: Why this holder no longer holds the lock (another took it over), None while it does.
        self.lost: str | None = None
        self._valid_until = issued_mono + lock.lease_ms / 1000
        self._mutex = threading.Lock()
        self._done = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_until_done, name=f"lock renewal {lock.where}", daemon=True
        )
        self._renewer.start()

    def _renew_until_done(self) -> None:
        while not self._done.wait(self.lock.renew_every_s):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - a store error: the next renewal tries again
                late = time.monotonic() > self._valid_until
                log.warning(
                    "cannot renew the lock %s (%s)%s",
                    self.lock.where,
                    exc,
                    ": its lease has run out, another maintainer may take it over" if late else "",
                )

    def _next(self, state: LockStateName, expires_ms: int) -> bool:
        """Create the next generation for this owner; False (and ``lost`` set) when another holds it."""
        record = LockRecord(self.record.owner, state, self.record.acquired_ms, expires_ms)
        if self.lock._create(self.generation + 1, record):
            self.generation += 1
            self.record = record
            return True
        self.lost = f"taken over by {self.lock.state().describe(self.lock.lease_ms)}"
        log.error("%s: the lock %s was %s", self.record.owner.operation, self.lock.where, self.lost)
        return False

    def renew(self) -> bool:
        """Extend the lease by one generation; False once the lock was taken over (``lost`` says by whom)."""
        with self._mutex:
            if self.lost is not None or self._done.is_set():
                return False
            issued = time.monotonic()
            if not self._next("held", now_ms() + self.lock.lease_ms):
                return False
            self._valid_until = issued + self.lock.lease_ms / 1000
            return True

    def release(self) -> None:
        """Stop renewing and mark the lock released (a failure leaves it to lapse at its lease's end)."""
        self._done.set()
        self._renewer.join()
        with self._mutex:
            if self.lost is not None:
                return
            try:
                self._next("released", now_ms())
            except Exception as exc:  # noqa: BLE001 - the lease then ends by itself
                log.warning(
                    "cannot release the lock %s (%s); it lapses at %s",
                    self.lock.where,
                    exc,
                    plain_utc(self.record.expires_ms),
                )
