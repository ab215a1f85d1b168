"""Slot decisions before a job goes to a cluster: what a graph needs, what the cluster has, the message."""

from __future__ import annotations

import urllib.error

import pytest

from runtime.cluster_slots import (
    ClusterSlots,
    InsufficientSlotsError,
    require_slots,
    rest_address,
    shortage,
    slots_needed,
)
from runtime.flink_env import FlinkRuntimeError

ADDRESS = "localhost:8081"


def slots(total: int, free: int, taskmanagers: int = 1) -> ClusterSlots:
    return ClusterSlots(ADDRESS, taskmanagers=taskmanagers, total=total, free=free)


def test_slot_sharing_needs_the_highest_parallelism_of_each_group() -> None:
    # The ingest shape: every stage at p = 3, the silver committer at 1.
    assert slots_needed([("default", 3), ("default", 3), (None, 1), ("default", 3)]) == 3
    assert slots_needed([("default", 2), ("io", 4), ("io", 1)]) == 6
    assert slots_needed([]) == 0


def test_enough_free_slots_is_no_shortage() -> None:
    assert shortage(2, 2, slots(total=4, free=2)) is None


def test_the_message_names_need_free_total_and_both_fixes() -> None:
    message = shortage(2, 2, slots(total=1, free=1))
    assert message == (
        "job needs 2 slots (flink.parallelism = 2), the cluster at localhost:8081 has 1 free of 1; "
        "start more TaskManagers / raise taskmanager.numberOfTaskSlots, "
        "or set LAKESTREAM__FLINK__PARALLELISM=1"
    )


def test_a_busy_cluster_is_told_apart_from_a_small_one() -> None:
    message = shortage(2, 2, slots(total=4, free=0)) or ""
    assert "has 0 free of 4 (all taken by running jobs)" in message
    assert "PARALLELISM=0" not in message


def test_only_remote_targets_are_checked_and_flink_runs_m_is_the_address() -> None:
    assert rest_address({"execution.target": "local"}) is None
    assert rest_address({}) is None
    assert rest_address({"execution.target": "yarn-session"}) is None
    remote = {"execution.target": "remote", "rest.address": "jm.example", "rest.port": "18081"}
    assert rest_address(remote) == "jm.example:18081"
    assert rest_address({"execution.target": "remote"}) == "localhost:8081"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_a_short_cluster_fails_at_once_without_waiting() -> None:
    clock, reads = Clock(), []

    def read(address: str) -> ClusterSlots:
        reads.append(address)
        return slots(total=1, free=1)

    with pytest.raises(InsufficientSlotsError, match="has 1 free of 1") as info:
        require_slots(ADDRESS, 2, 2, read=read, clock=clock, sleep=clock.sleep)
    assert isinstance(info.value, FlinkRuntimeError)  # the CLI's exit code 2
    assert reads == [ADDRESS] and clock.now == 0.0


def test_a_starting_cluster_is_waited_for_until_its_slots_register() -> None:
    clock = Clock()
    answers: list[object] = [
        urllib.error.URLError(ConnectionRefusedError(111, "refused")),
        slots(total=0, free=0, taskmanagers=0),
        slots(total=0, free=0, taskmanagers=1),  # registered, no slot report yet
        slots(total=4, free=4),
    ]

    def read(address: str) -> ClusterSlots:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, ClusterSlots)
        return answer

    got = require_slots(ADDRESS, 2, 2, read=read, clock=clock, sleep=clock.sleep, poll_s=1.0)
    assert got.free == 4 and clock.now == 3.0


def test_a_cluster_that_never_gets_a_slot_fails_after_the_wait() -> None:
    clock = Clock()
    with pytest.raises(
        InsufficientSlotsError, match=r"0 free of 0.*no TaskManager slot registered within 5 s"
    ):
        require_slots(
            ADDRESS, 1, 1, read=lambda a: slots(0, 0, 0), clock=clock, sleep=clock.sleep, wait_s=5.0
        )
    assert clock.now == 5.0


def test_other_rest_errors_are_raised_at_once() -> None:
    clock = Clock()

    def read(address: str) -> ClusterSlots:
        raise urllib.error.URLError("certificate verify failed")

    with pytest.raises(urllib.error.URLError):
        require_slots(ADDRESS, 1, 1, read=read, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0


def test_overview_json_is_read_by_its_field_names() -> None:
    overview = {"taskmanagers": 2, "slots-total": 4, "slots-available": 3, "jobs-running": 1}
    assert ClusterSlots.from_overview(ADDRESS, overview) == ClusterSlots(ADDRESS, 2, 4, 3)
