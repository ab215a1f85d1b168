"""Reader position records: what a restore may go back to, pruning, the recorder's writes."""

from __future__ import annotations

from pathlib import Path

from storage.reader_positions import (
    PositionRecorder,
    ReaderRecord,
    forget,
    read_records,
    record_path,
    with_position,
)
from storage.table_files import LocalTableFiles

MIN = 60_000


def record(*positions: tuple[int, int], updated: int | None = None) -> ReaderRecord:
    return ReaderRecord("r", "tid", updated if updated is not None else positions[-1][0], tuple(positions))


def test_the_needed_version_is_the_lowest_within_the_horizon_and_the_state_at_its_start() -> None:
    rec = record((0, 3), (10 * MIN, 5), (20 * MIN, 9), (30 * MIN, 12), updated=31 * MIN)
    # A restore may go back 15 minutes from the newest entry: to a state recorded at 16 min or later,
    # which is at least the entry before that time (5).
    assert rec.needed_version(15 * MIN) == 5
    assert rec.needed_version(5 * MIN) == 9
    assert rec.needed_version(0) == 12
    assert rec.needed_version(10**9) == 3


def test_a_restore_that_went_back_is_within_the_window() -> None:
    rec = record((0, 10), (MIN, 14), (2 * MIN, 11), updated=3 * MIN)  # restored to 11 at 2 min
    assert rec.needed_version(30 * 1000) == 11


def test_with_position_collapses_repeats_and_prunes_old_history_but_keeps_the_window_start() -> None:
    rec = None
    for t, v in [(0, 1), (MIN, 1), (2 * MIN, 2), (3 * MIN, 3), (10 * MIN, 4)]:
        rec = with_position(rec, reader="r", table_id="tid", version=v, now_ms=t, history_ms=5 * MIN)
    assert rec is not None
    assert rec.positions == ((3 * MIN, 3), (10 * MIN, 4))  # (0,1),(2m,2) pruned; 3m is the window start
    assert rec.updated_ms == 10 * MIN


def test_another_table_id_starts_a_new_history() -> None:
    rec = with_position(record((0, 7)), reader="r", table_id="new", version=0, now_ms=MIN)
    assert rec.positions == ((MIN, 0),)


def test_an_id_not_known_yet_keeps_the_history() -> None:
    first = with_position(None, reader="r", table_id="", version=0, now_ms=0)
    rec = with_position(first, reader="r", table_id="tid", version=4, now_ms=MIN)
    assert rec.positions == ((0, 0), (MIN, 4)) and rec.table_id == "tid"
    assert with_position(rec, reader="r", table_id="", version=5, now_ms=2 * MIN).table_id == "tid"


def test_json_round_trip_and_safe_file_names(tmp_path: Path) -> None:
    rec = record((5, 1), (9, 2))
    assert ReaderRecord.from_json(rec.to_json()) == rec
    folder, _, name = record_path("changefeed silver/orders -> kafka:a.b").rpartition("/")
    assert folder == "_lakestream/readers" and name.endswith(".json") and "." not in name[:-5]


def test_a_local_record_is_the_json_file_earlier_versions_wrote(tmp_path: Path) -> None:
    """The layout is an upgrade contract: a record written before is read, and one written now is the same."""
    rec = record((5, 1), (9, 2))
    old = tmp_path / "_lakestream" / "readers" / "r.json"
    old.parent.mkdir(parents=True)
    old.write_text(rec.to_json(), encoding="utf-8")
    files = LocalTableFiles(tmp_path)
    assert read_records(files) == [rec]
    PositionRecorder(files, "r").flush()
    PositionRecorder(files, "r2").observe(version=2, table_id="tid", now_ms=9)
    assert sorted(p.name for p in old.parent.iterdir()) == ["r.json", "r2.json"]
    assert old.read_text(encoding="utf-8") == rec.to_json()


def test_the_recorder_writes_each_new_version_and_a_still_one_every_interval(tmp_path: Path) -> None:
    files = LocalTableFiles(tmp_path)
    rec = PositionRecorder(files, "feed", every_ms=10_000)
    assert rec.observe(version=3, table_id="t", now_ms=0)
    assert not rec.observe(version=3, table_id="t", now_ms=5_000)  # the same version: not yet
    assert read_records(files)[0].positions == ((0, 3),)
    assert rec.observe(version=4, table_id="t", now_ms=6_000)  # a new version: written at once
    assert read_records(files)[0].positions == ((0, 3), (6_000, 4))
    assert not rec.observe(version=4, table_id="t", now_ms=15_000)
    assert rec.observe(version=4, table_id="t", now_ms=16_000)  # the interval passed
    assert read_records(files)[0].updated_ms == 16_000
    assert rec.observe(version=2, table_id="t", now_ms=17_000)  # a restore: written at once
    assert read_records(files)[0].positions[-1] == (17_000, 2)
    assert not rec.observe(version=2, table_id="t", now_ms=18_000)
    assert rec.flush() and not rec.flush()  # the end of the task writes what is left
    assert read_records(files)[0].updated_ms == 18_000
    # A new task attempt continues the record it finds.
    again = PositionRecorder(files, "feed")
    again.observe(version=3, table_id="t", now_ms=13_000)
    assert read_records(files)[0].positions[0] == (0, 3)
    assert forget(files, "feed") and not forget(files, "feed")
    assert read_records(files) == []


def test_a_recorder_that_cannot_write_does_not_fail(tmp_path: Path) -> None:
    blocker = tmp_path / "_lakestream"
    blocker.write_text("a file where the folder should be")
    assert not PositionRecorder(LocalTableFiles(tmp_path), "feed").observe(version=1, table_id="t", now_ms=0)
