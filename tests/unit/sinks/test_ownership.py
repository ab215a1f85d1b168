"""The OPEN decision as a pure function: manifests and txn versions in, a plan out (no Delta, no disk)."""

from __future__ import annotations

import pytest

from sinks.ownership import EOI_CHECKPOINT_ID, OpenPlan, Ownership, plan_open
from sinks.sink_errors import RestoreBehindTableError
from sinks.staging import Manifest, ManifestState


def manifest(n: int, *, subtask: int = 0, run: str = "run-1", state: ManifestState = "prepared") -> Manifest:
    return Manifest(
        app_prefix="job",
        run_id=run,
        subtask=subtask,
        checkpoint_id=n,
        state=state,
        kind="data_files",
        token=f"{run}-{subtask}-{n}",
        staging_dirs=(".",),
    )


def plan(
    manifests: list[Manifest],
    restored: int | None,
    *,
    versions: dict[str, int] | None = None,
    subtask: int = 0,
    parallelism: int = 1,
    run: str = "run-1",
) -> OpenPlan:
    ownership = Ownership("job", run, subtask, parallelism)
    return plan_open(ownership, restored, manifests, (versions or {}).get)


def test_pending_manifests_are_aborted_even_where_the_table_has_their_checkpoint() -> None:
    pending = manifest(1, state="pending")
    assert plan([pending], 2, versions={"job:run-1:0": 2}) == OpenPlan(abort=(pending,))


def test_manifests_the_table_already_holds_are_only_cleaned_up_whatever_their_run() -> None:
    ours, theirs = manifest(2), manifest(7, run="old")
    result = plan([ours, theirs], 2, versions={"job:run-1:0": 2, "job:old:0": 9})
    assert result == OpenPlan(clean_up=(ours, theirs))


def test_same_run_up_to_the_restored_checkpoint_commits_and_newer_ones_abort() -> None:
    m1, m2, m3 = manifest(1), manifest(2), manifest(3)
    assert plan([m1, m2, m3], 2) == OpenPlan(commit=(m1, m2), abort=(m3,))


def test_other_runs_prepared_work_is_aborted_even_below_the_restored_checkpoint() -> None:
    old = manifest(1, run="old")
    assert plan([old], 5) == OpenPlan(abort=(old,))


def test_a_fresh_start_aborts_everything_not_in_the_table() -> None:
    m1, m2 = manifest(1), manifest(2, run="old")
    assert plan([m1, m2], None) == OpenPlan(abort=(m1, m2))


def test_other_subtasks_slots_are_left_alone() -> None:
    mine, other = manifest(1, subtask=0), manifest(1, subtask=1)
    assert plan([mine, other], 1, parallelism=2) == OpenPlan(commit=(mine,))
    assert plan([mine, other], 1, subtask=1, parallelism=2) == OpenPlan(commit=(other,))


@pytest.mark.parametrize(("restored", "committed"), [(3, 5), (None, 1)])
def test_a_restore_behind_the_runs_own_commits_is_refused(restored: int | None, committed: int) -> None:
    with pytest.raises(RestoreBehindTableError) as info:
        plan([manifest(1)], restored, versions={"job:run-1:0": committed})
    assert info.value.committed_version == committed and info.value.app_id == "job:run-1:0"


def test_a_restore_at_or_ahead_of_the_runs_own_commits_is_accepted() -> None:
    assert plan([], 5, versions={"job:run-1:0": 5}) == OpenPlan()
    assert plan([], 5, versions={"job:run-1:0": 3}) == OpenPlan()


def test_a_restore_after_the_runs_end_of_input_commit_stages_nothing_more() -> None:
    committed = manifest(1)
    result = plan([committed], 1, versions={"job:run-1:0": EOI_CHECKPOINT_ID})
    assert result == OpenPlan(clean_up=(committed,), input_already_committed=True)
    assert plan([], None, versions={"job:run-1:0": EOI_CHECKPOINT_ID}).input_already_committed


def test_rescale_3_to_2_subtask_0_adopts_slot_2_with_its_own_app_id() -> None:
    done = [manifest(2, subtask=j) for j in range(3)]  # checkpoint 2 completed, nobody got COMMIT(2)
    torn = [manifest(3, subtask=j) for j in range(3)]  # checkpoint 3 never completed
    plans = [plan(done + torn, 2, subtask=i, parallelism=2) for i in range(2)]
    assert plans[0] == OpenPlan(commit=(done[0], done[2]), abort=(torn[0], torn[2]))
    assert plans[1] == OpenPlan(commit=(done[1],), abort=(torn[1],))
    assert {m.app_id for m in plans[0].commit} == {"job:run-1:0", "job:run-1:2"}


def test_rescale_2_to_3_the_new_subtask_owns_nothing_old() -> None:
    done = [manifest(1, subtask=j) for j in range(2)]
    plans = [plan(done, 1, subtask=i, parallelism=3) for i in range(3)]
    assert [p.commit for p in plans] == [(done[0],), (done[1],), ()]


@pytest.mark.parametrize("new", range(1, 7))
@pytest.mark.parametrize("old", range(1, 7))
def test_every_old_slot_has_exactly_one_owner_and_every_manifest_one_decision(old: int, new: int) -> None:
    for j in range(old):
        assert sum(Ownership("job", "run-1", i, new).owns(j) for i in range(new)) == 1
    manifests = [
        manifest(n, subtask=j, run=run, state=state)
        for j in range(old)
        for n in (1, 2, 3)
        for run in ("run-1", "old")
        for state in ("pending", "prepared")
    ]
    versions = {"job:run-1:0": 1, "job:old:0": 3}
    decided = [
        m
        for i in range(new)
        for p in [plan(manifests, 2, versions=versions, subtask=i, parallelism=new)]
        for m in (*p.commit, *p.clean_up, *p.abort)
    ]
    assert sorted(decided, key=repr) == sorted(manifests, key=repr)
