"""When the job folds its merge-on-read changes, and how a fold in the background reports back."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from merge_on_read import fold_schedule
from merge_on_read.fold_changes import FoldResult
from merge_on_read.fold_schedule import BackgroundFold, FoldSchedule, FoldTask
from tests.support.silver_rows import change as event
from tests.unit.sinks.test_changes_mode import changes_writer, mor
from tests.unit.sinks.test_merge_mode import batch


def test_a_fold_is_due_by_age_or_by_rows() -> None:
    s = FoldSchedule(every=timedelta(seconds=60), rows=1000)
    assert not s.due(since_s=59.9, rows=999)
    assert s.due(since_s=60, rows=0)
    assert s.due(since_s=1, rows=1000)
    assert not FoldSchedule(every=timedelta(seconds=60), rows=0).due(since_s=1, rows=10**9)
    with pytest.raises(ValueError, match="every > 0"):
        FoldSchedule(every=timedelta(0))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_background_folds_start_when_due_and_finish_folds_the_rest(tmp_path: Path) -> None:
    clock = Clock()
    fold = BackgroundFold(
        FoldTask(mor(tmp_path), FoldSchedule(every=timedelta(seconds=10), rows=3)), clock=clock
    )
    assert DeltaTable(mor(tmp_path).snapshot_uri).version() == 0  # created at start, empty
    w = changes_writer(tmp_path, None)
    w.write(batch([event("o1", "e1", 1, status="a")]))
    w.prepare(1)
    fold.committed(w.commit(1).rows)
    assert fold.folds == 0 and not fold.running  # 1 row, no time passed
    clock.now = 10.0
    fold.committed(0)  # due by age
    assert fold._thread is not None
    fold._thread.join()
    assert fold.folds == 1 and fold.last is not None and fold.last.change_rows == 1
    w.write(batch([event(f"o{i}", f"x{i}", 2, status="b") for i in range(2, 6)]))
    w.prepare(2)
    fold.committed(w.commit(2).rows)  # due by rows (4 >= 3)
    result = fold.finish()  # waits for that fold, then folds what is left (nothing)
    assert fold.folds == 3 and result.change_rows == 0 and result.folded_through is not None
    assert DeltaTable(mor(tmp_path).snapshot_uri).to_pyarrow_table().num_rows == 5


def test_a_failed_background_fold_fails_the_next_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object, **_kw: object) -> FoldResult:
        raise OSError("disk full")

    monkeypatch.setattr(fold_schedule, "fold_once", broken)
    clock = Clock()
    fold = BackgroundFold(FoldTask(mor(tmp_path), FoldSchedule(every=timedelta(seconds=1))), clock=clock)
    clock.now = 5.0
    fold.committed(0)
    assert fold._thread is not None
    fold._thread.join()
    with pytest.raises(RuntimeError, match="the background fold failed: disk full"):
        fold.committed(0)
