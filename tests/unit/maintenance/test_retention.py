"""The retention rules: table, jobs, readers, staged files; log cleanup; restore; property changes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from maintenance.retention import (
    IntervalError,
    ReaderNeed,
    RetentionFacts,
    StagedWork,
    cleanup_verdict,
    deleted_file_retention,
    parse_delta_interval,
    property_problems,
    protected_files,
    restore_verdict,
    retention_requirements,
    vacuum_verdict,
    whole_hours,
)

HOUR_MS = 3600 * 1000
NOW = 1_800_000_000_000


def facts(**kw: object) -> RetentionFacts:
    base: dict[str, object] = {
        "now_ms": NOW,
        "table_retention": timedelta(days=7),
        "checkpoint_interval": timedelta(seconds=10),
    }
    base.update(kw)
    return RetentionFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 7 days", timedelta(days=7)),
        ("interval 1 week", timedelta(weeks=1)),
        ("INTERVAL 36 hours", timedelta(hours=36)),
        ("30 days", timedelta(days=30)),
        ("interval 90 minutes", timedelta(minutes=90)),
    ],
)
def test_delta_intervals_parse(text: str, expected: timedelta) -> None:
    assert parse_delta_interval(text, key="k") == expected


@pytest.mark.parametrize("text", ["7d", "interval seven days", "interval 3 fortnights", ""])
def test_a_malformed_interval_names_the_key_and_the_form(text: str) -> None:
    with pytest.raises(IntervalError, match=r"delta\.x = .*interval <n> <unit>"):
        parse_delta_interval(text, key="delta.x")


def test_the_table_default_retention_is_a_week() -> None:
    assert deleted_file_retention({}) == timedelta(days=7)
    assert deleted_file_retention({"delta.deletedFileRetentionDuration": "interval 2 days"}) == timedelta(
        days=2
    )


def test_default_retention_is_the_tables_and_is_allowed() -> None:
    verdict = vacuum_verdict(facts(), None)
    assert verdict.retention_hours == 168 and verdict.allowed and not verdict.violated
    assert verdict.minimum_hours == 168


def test_below_the_table_retention_is_refused_unless_forced() -> None:
    verdict = vacuum_verdict(facts(), 24)
    assert not verdict.allowed
    assert [r.rule for r in verdict.violated] == ["table"]
    assert "delta.deletedFileRetentionDuration" in verdict.explain()
    assert vacuum_verdict(facts(), 24, force=True).allowed


def test_the_jobs_need_two_checkpoint_intervals() -> None:
    f = facts(table_retention=timedelta(0), checkpoint_interval=timedelta(minutes=45))
    assert not vacuum_verdict(f, 1).allowed  # 1h < 90 minutes
    assert [r.rule for r in vacuum_verdict(f, 1).violated] == ["jobs"]
    assert vacuum_verdict(f, 2).allowed
    assert vacuum_verdict(f, 0, force=True).allowed


def test_a_reader_behind_holds_the_retention_back_to_its_versions_commit_time() -> None:
    need = ReaderNeed("feed", version=40, version_time_ms=NOW - 50 * HOUR_MS, last_seen_ms=NOW - HOUR_MS)
    f = facts(table_retention=timedelta(hours=24), readers=(need,))
    reqs = {r.rule: r for r in retention_requirements(f)}
    assert reqs["reader feed"].minimum == timedelta(hours=50, seconds=20)
    assert not vacuum_verdict(f, 48).allowed
    assert not vacuum_verdict(f, 50).allowed  # the margin (two checkpoint intervals) is not covered
    assert vacuum_verdict(f, 51).allowed
    text = vacuum_verdict(f, 48).explain()
    assert "reader feed" in text and "version 40" in text and "--forget 'feed'" in text


def test_a_caught_up_reader_needs_nothing() -> None:
    need = ReaderNeed("feed", version=41, version_time_ms=None, last_seen_ms=NOW)
    f = facts(table_retention=timedelta(0), readers=(need,))
    assert [r.rule for r in retention_requirements(f)] == ["table", "jobs"]
    assert vacuum_verdict(f, 1).allowed


def test_a_reader_whose_commit_is_gone_is_reported_as_having_lost_data() -> None:
    need = ReaderNeed("feed", version=3, version_time_ms=0, last_seen_ms=NOW, commit_missing=True)
    verdict = vacuum_verdict(facts(readers=(need,)), 168)
    assert not verdict.allowed and "lost data" in verdict.explain()


def test_a_full_vacuum_never_deletes_staged_files_even_forced() -> None:
    staged = frozenset({"source=a/part-00000-tok-c6.snappy.parquet"})
    f = facts(staged_files=staged)
    candidates = ["source=a/old.parquet", *staged]
    verdict = vacuum_verdict(f, 200, full=True, force=True, candidates=candidates)
    assert not verdict.allowed
    assert verdict.staged_in_the_way == tuple(staged)
    assert "without --full" in verdict.explain()
    # Lite mode deletes only removed files: a staged file is never one of them, so it is not checked.
    assert vacuum_verdict(f, 200, candidates=candidates).allowed
    assert vacuum_verdict(f, 200, full=True, candidates=["source=a/old.parquet"]).allowed


def test_a_full_vacuum_below_the_jobs_rule_is_refused_even_forced() -> None:
    f = facts(table_retention=timedelta(0))
    verdict = vacuum_verdict(f, 0, full=True, force=True)
    assert not verdict.allowed and verdict.full_below_jobs
    assert "full mode needs at least 1h" in verdict.explain()
    assert vacuum_verdict(f, 1, full=True).allowed


def test_whole_hours_round_up() -> None:
    assert [whole_hours(timedelta(seconds=s)) for s in (0, 1, 3600, 3601)] == [0, 1, 1, 2]


def test_protected_files_include_a_pending_prepares_token_files() -> None:
    work = [
        StagedWork(files=("source=a/f1.parquet",)),
        StagedWork(files=(), token="tok9", staging_dirs=("source=b", "."), pending=True),
    ]
    listing = {"source=b": ["part-0-tok9-c3.parquet", "other.parquet"], ".": ["x-tok9.parquet"]}
    assert protected_files(work, listing) == {
        "source=a/f1.parquet",
        "source=b/part-0-tok9-c3.parquet",
        "x-tok9.parquet",
    }


def test_log_cleanup_is_refused_while_a_reader_needs_a_commit_older_than_the_log_retention() -> None:
    need = ReaderNeed("feed", version=7, version_time_ms=NOW - 40 * 24 * HOUR_MS, last_seen_ms=NOW)
    kw = {"now_ms": NOW, "checkpoint_interval": timedelta(seconds=10), "readers": [need]}
    refused = cleanup_verdict(table_log_retention=timedelta(days=30), **kw)  # type: ignore[arg-type]
    assert not refused.allowed and "version 7" in refused.explain()
    assert cleanup_verdict(table_log_retention=timedelta(days=41), **kw).allowed  # type: ignore[arg-type]
    assert cleanup_verdict(table_log_retention=timedelta(days=30), force=True, **kw).allowed  # type: ignore[arg-type]


def test_restore_of_a_sink_written_table_needs_force() -> None:
    kw = {"target_version": 3, "current_version": 9, "staged_manifests": 0, "readers": []}
    assert restore_verdict(written_by_sink=False, force=False, **kw).allowed  # type: ignore[arg-type]
    refused = restore_verdict(written_by_sink=True, force=False, **kw)  # type: ignore[arg-type]
    assert not refused.allowed and "will not write them again" in refused.warnings[0]
    assert "--force" in refused.refusal
    forced = restore_verdict(written_by_sink=True, force=True, **kw)  # type: ignore[arg-type]
    assert forced.allowed and forced.warnings


def test_restore_to_the_current_version_or_later_is_refused() -> None:
    for target in (9, 12):
        v = restore_verdict(
            target_version=target,
            current_version=9,
            written_by_sink=False,
            staged_manifests=0,
            readers=[],
            force=True,
        )
        assert not v.allowed and "nothing to restore" in v.refusal


def test_property_changes_that_break_lakestream_are_refused() -> None:
    refusals, _ = property_problems({"delta.enableDeletionVectors": "true"}, written_by_merge_sink=False)
    assert refusals and "deletion vectors" in refusals[0]
    refusals, _ = property_problems({"delta.appendOnly": "true"}, written_by_merge_sink=True)
    assert refusals and "MERGE" in refusals[0]
    refusals, _ = property_problems({"delta.logRetentionDuration": "a month"}, written_by_merge_sink=False)
    assert refusals and "interval <n> <unit>" in refusals[0]
    refusals, warnings = property_problems({"delta.targetFileSize": "1000"}, written_by_merge_sink=True)
    assert not refusals and "merge_target_file_size_mb" in warnings[0]
    assert property_problems(
        {"delta.logRetentionDuration": "interval 60 days"}, written_by_merge_sink=True
    ) == (
        [],
        [],
    )
