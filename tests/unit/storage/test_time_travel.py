"""Opening a real Delta table at a version or as of a time, and its callers' own errors around it."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from lakestream.time import utc_from_ms
from storage.delta_log import commit_ms
from storage.time_travel import OutOfReachError, open_table_at

VERSIONS = 4


@pytest.fixture
def table(tmp_path: Path) -> tuple[str, list[int]]:
    """A table with versions 0..3 (one row each) and the commit time (epoch ms) of each."""
    uri = str(tmp_path / "t")
    times: list[int] = []
    for n in range(VERSIONS):
        write_deltalake(uri, pa.table({"n": pa.array([n], pa.int64())}), mode="append")
        committed = commit_ms(uri, n)
        assert committed is not None
        times.append(committed)
        clock_past(committed)  # the next commit gets a later time
    assert times == sorted(set(times))
    return uri, times


def clock_past(ms: int) -> None:
    """Until the wall clock has passed ``ms`` (epoch ms)."""
    while time.time() * 1000 <= ms:
        time.sleep(0.001)


def test_a_version_in_reach_and_the_latest(table: tuple[str, list[int]]) -> None:
    uri, _ = table
    assert open_table_at(uri, None, name="--version").version() == 3
    dt = open_table_at(uri, 1, name="--version")
    assert dt.version() == 1 and dt.to_pyarrow_table().num_rows == 2


@pytest.mark.parametrize("version", [4, 99, -1])
def test_a_version_not_in_the_log_names_the_flag_and_the_reach(
    table: tuple[str, list[int]], version: int
) -> None:
    uri, _ = table
    with pytest.raises(OutOfReachError) as err:
        open_table_at(uri, version, name="--version")
    message = str(err.value)
    assert message.startswith(f"--version {version}: cannot load {uri} there (the latest version is 3)")
    assert "versions go from the oldest retained commit to 3" in message and "log cleanup" in message


def test_as_of_a_time_is_the_newest_version_committed_by_then(table: tuple[str, list[int]]) -> None:
    uri, times = table
    assert open_table_at(uri, utc_from_ms(times[1]), name="--as-of").version() == 1
    between = utc_from_ms(times[2]) - timedelta(microseconds=1)
    assert open_table_at(uri, between, name="--as-of").version() == 1
    later = utc_from_ms(times[3]) + timedelta(days=1)
    assert open_table_at(uri, later, name="--as-of").version() == 3


def test_a_time_before_the_first_commit_is_out_of_reach(table: tuple[str, list[int]]) -> None:
    uri, times = table
    with pytest.raises(
        OutOfReachError, match=r"^as_of 2000-01-01T00:00:00Z: .* has no version committed at or"
    ):
        open_table_at(uri, utc_from_ms(946_684_800_000), name="as_of")
    with pytest.raises(OutOfReachError, match="its oldest retained version 0 was committed at"):
        open_table_at(uri, utc_from_ms(times[0] - 1), name="as_of")


def test_versions_removed_by_log_cleanup_are_out_of_reach(table: tuple[str, list[int]]) -> None:
    uri, times = table
    DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    dt = DeltaTable(uri)  # version 4: the property change
    dt.create_checkpoint()
    newest = commit_ms(uri, 4)
    assert newest is not None
    clock_past(newest)  # every commit is then older than the zero retention
    dt.cleanup_metadata()
    assert open_table_at(uri, 4, name="--as-of").version() == 4
    with pytest.raises(OutOfReachError, match="--as-of 2: cannot load .* versions go from the oldest"):
        open_table_at(uri, 2, name="--as-of")
    with pytest.raises(OutOfReachError, match="has no version committed at or before it .*version 4"):
        open_table_at(uri, utc_from_ms(times[3]), name="--as-of")


def test_a_missing_table_is_left_to_the_caller(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        open_table_at(str(tmp_path / "none"), 0, name="--version")


def test_each_caller_keeps_its_error_class_and_flag(table: tuple[str, list[int]], tmp_path: Path) -> None:
    from batch.backfill import RangeError, open_bronze
    from maintenance.maintenance_errors import MaintenanceError, TableMissingError
    from maintenance.operations import resolve_restore_target
    from serving.gold_read import GoldMissingError, GoldReadError, open_gold
    from serving.table_summary import TimeTravelError, open_at

    uri, times = table
    with pytest.raises(TimeTravelError, match="^--version 9: cannot load"):
        open_at(uri, 9)
    with pytest.raises(TimeTravelError, match="^--as-of 2000-01-01T00:00:00Z: "):
        open_at(uri, utc_from_ms(946_684_800_000))
    with pytest.raises(GoldReadError, match="^as_of 7: cannot load"):
        open_gold(uri, 7, name="as_of")
    with pytest.raises(GoldMissingError, match="no gold table at"):
        open_gold(str(tmp_path / "none"), 1)
    assert resolve_restore_target(uri, version=None, timestamp=utc_from_ms(times[2]).isoformat()) == 2
    with pytest.raises(MaintenanceError, match="^--timestamp 'soon': not an ISO 8601 date or time"):
        resolve_restore_target(uri, version=None, timestamp="soon")
    with pytest.raises(MaintenanceError, match="^--timestamp 2000-01-01T00:00:00Z: .* has no version"):
        resolve_restore_target(uri, version=None, timestamp="2000-01-01")
    with pytest.raises(MaintenanceError, match="^--version 9: cannot load"):
        resolve_restore_target(uri, version=9, timestamp=None)
    assert open_bronze(uri, 2).version() == 2
    with pytest.raises(RangeError, match="^--as-of 9: cannot load"):
        open_bronze(uri, 9)
    with pytest.raises(TableMissingError, match="no bronze table at"):
        open_bronze(str(tmp_path / "none"), None)
