"""The table lock on a local folder: generations, waiting, expiry, renewal, takeover, tidying.

Racing takers and a killed holder, on a local folder and the real S3 server:
``tests/integration/test_maintenance_object_store.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from storage.table_files import LocalTableFiles
from storage.table_lock import (
    LOCK_FORMAT,
    HeldLock,
    LockHeldError,
    LockOwner,
    LockRecord,
    LockState,
    TableLock,
    now_ms,
)


def lock_of(tmp_path: Path, **kw: float) -> TableLock:
    return TableLock(LocalTableFiles(tmp_path), "maintenance", **kw)


def generations(tmp_path: Path) -> list[str]:
    folder = tmp_path / "_lakestream" / "locks" / "maintenance"
    return sorted(p.name for p in folder.iterdir())


def elsewhere(operation: str = "optimize") -> LockOwner:
    """An owner on another host (no crash check applies): only its expiry frees the lock."""
    return LockOwner("t-" + operation, operation, "lakestream maintain optimize t", "other-host", 4242)


def test_a_record_round_trips_and_anything_else_is_refused() -> None:
    rec = LockRecord(LockOwner.this_process("optimize"), "held", 1, 2)
    assert LockRecord.from_json(rec.to_json()) == rec
    for bad in (b"", b"{", b'{"format": 99}', b'{"format": %d, "state": "held"}' % LOCK_FORMAT, b"[1]"):
        with pytest.raises(ValueError):
            LockRecord.from_json(bad)


def test_take_release_take_again_keeps_one_generation_on_disk(tmp_path: Path) -> None:
    lock = lock_of(tmp_path)
    with lock.holding("optimize", wait_s=0) as held:
        assert held.generation == 1 and lock.state().record == held.record
        assert generations(tmp_path) == [f"{1:020d}.json"]
    state = lock.state()
    assert state.generation == 2 and state.record is not None and state.record.state == "released"
    with lock.holding("zorder", wait_s=0) as again:
        assert again.generation == 3
    assert generations(tmp_path) == [f"{4:020d}.json"]


def test_a_second_taker_waits_then_names_the_holder_and_its_expiry(tmp_path: Path) -> None:
    lock = lock_of(tmp_path)
    with lock.holding("optimize", wait_s=0):
        started = time.monotonic()
        held_by = rf"held by optimize by pid {os.getpid()} on .* held until .*UTC"
        with pytest.raises(LockHeldError, match=held_by):
            lock.acquire("zorder", wait_s=0.3)
        assert time.monotonic() - started >= 0.3
    lock.acquire("zorder", wait_s=0).release()


def test_an_expired_holder_on_another_host_is_taken_over_and_learns_it_at_its_next_renewal(
    tmp_path: Path,
) -> None:
    lock = lock_of(tmp_path, lease_s=30, renew_every_s=20)
    stale = LockRecord(elsewhere(), "held", now_ms() - 60_000, now_ms() - 1)
    assert lock._create(1, stale)
    # The stalled holder's side, as its process sees it (its renewals did not get through in time).
    stalled = HeldLock(lock, stale, 1, time.monotonic())
    taker = lock.acquire("zorder", wait_s=0)
    assert taker.generation == 2
    assert not stalled.renew() and stalled.lost is not None and "zorder by pid" in stalled.lost
    stalled.release()  # leaves the new holder alone
    assert lock.state().record == taker.record
    taker.release()


def test_a_holder_not_yet_expired_on_another_host_is_waited_for_until_its_expiry(tmp_path: Path) -> None:
    lock = lock_of(tmp_path)
    expires = now_ms() + 700
    assert lock._create(1, LockRecord(elsewhere(), "held", now_ms(), expires))
    with pytest.raises(LockHeldError, match="optimize by pid 4242 on other-host"):
        lock.acquire("zorder", wait_s=0.1)
    held = lock.acquire("zorder", wait_s=10)  # returns once the expiry passed
    assert now_ms() >= expires and held.generation == 2
    held.release()


def test_renewals_keep_the_lock_past_its_lease(tmp_path: Path) -> None:
    lock = lock_of(tmp_path, lease_s=0.6, renew_every_s=0.1)
    with lock.holding("optimize", wait_s=0) as held:
        with pytest.raises(LockHeldError):
            lock.acquire("zorder", wait_s=1.5)  # more than two leases
        assert held.generation >= 5 and held.lost is None
        assert len(generations(tmp_path)) == 1  # each renewal tidied the one before
    assert held.record.state == "released"  # the generation after the last renewal
    again = lock.acquire("zorder", wait_s=0)
    assert again.generation == held.generation + 1
    again.release()


def test_an_unreadable_newest_generation_holds_for_a_lease_from_its_writing(tmp_path: Path) -> None:
    lock = lock_of(tmp_path)
    folder = tmp_path / "_lakestream" / "locks" / "maintenance"
    folder.mkdir(parents=True)
    (folder / f"{7:020d}.json").write_bytes(b"")  # a taker that died between O_EXCL and its write
    state = lock.state()
    assert state.generation == 7 and state.record is None and not state.free(now_ms(), lock.lease_ms)
    assert state.free(state.written_ms + lock.lease_ms, lock.lease_ms)
    assert "unreadable lock generation 7" in state.describe(lock.lease_ms)


def test_a_generation_tidied_away_and_created_again_is_not_the_lock(tmp_path: Path) -> None:
    lock = lock_of(tmp_path)
    with lock.holding("optimize", wait_s=0):
        pass
    with lock.holding("optimize", wait_s=0):
        pass  # generations 1..4 were written, only 4 is left
    late = LockRecord(elsewhere("late"), "held", now_ms(), now_ms() + 60_000)
    assert not lock._create(2, late)  # a taker that read generation 1 long ago
    assert generations(tmp_path) == [f"{4:020d}.json"]


def test_a_crash_check_needs_the_same_host_pid_space_and_a_gone_process() -> None:
    me = LockOwner.this_process("optimize")
    assert not me.crashed()
    reused_pid = LockOwner("t", "x", "c", me.host, me.pid, me.pid_space, "not-my-start")
    assert reused_pid.crashed() == bool(me.pid_space)
    assert not LockOwner("t", "x", "c", "other-host", me.pid, me.pid_space, "not-my-start").crashed()
    state = LockState(3, LockRecord(elsewhere(), "held", 0, now_ms() + 60_000))
    assert not state.free(now_ms(), 1000)
    assert LockState(0).free(now_ms(), 1000)


def test_lease_and_renewal_must_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="renew_every_s"):
        lock_of(tmp_path, lease_s=1, renew_every_s=1)
