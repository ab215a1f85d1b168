"""Where a run starts: the lineage rule (``flink_jobs.resume``), without Flink or Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from flink_jobs.resume import (
    JobFolder,
    Lineage,
    StorePath,
    checkpoint_id,
    lineage_ended,
    lineage_for_run,
    location,
    plan_start,
    unrestorable,
)
from lakestream.progress import ResumeError
from sinks.ownership import EOI_CHECKPOINT_ID


def checkpoint(folder: Path, job: str = "j1", n: int = 1) -> Path:
    done = folder / job / f"chk-{n}"
    done.mkdir(parents=True)
    (done / "_metadata").write_bytes(b"")
    return done


def lineage(root: Path, run_id: str, *, created: int = 1, bounded: bool = False) -> Lineage:
    return Lineage(folder=root / run_id, run_id=run_id, bounded=bounded, parallelism=2, created_ms=created)


# (fresh, previous lineage: None / "bounded" / "unbounded", it has a checkpoint, an older-layout
# checkpoint exists, a writer of it committed its end, this run is bounded, Kafka job) -> action
PLANS = [
    (True, "unbounded", True, True, True, False, True, "new"),  # --fresh wins over everything
    (False, None, False, False, False, True, True, "new"),  # a first run
    (False, None, False, True, False, False, True, "restore"),  # an earlier version's checkpoint...
    (False, None, False, True, False, True, True, "new"),  # ... is not restored into a bounded run
    (False, None, False, True, False, True, False, "restore"),  # ... except by the change feed
    (False, "unbounded", True, False, False, False, True, "restore"),  # killed, then started again
    (False, "unbounded", True, False, False, True, True, "settle"),  # killed, then a bounded run
    (False, "unbounded", False, False, False, True, True, "new"),  # killed before its first checkpoint
    (False, "bounded", True, False, False, True, True, "complete"),  # a bounded run killed mid-way
    (False, "bounded", True, False, False, False, True, "complete"),  # ... whatever runs next
    (False, "bounded", False, False, True, True, True, "complete"),  # ended in part, no checkpoint
    (False, "bounded", False, False, False, True, True, "new"),  # stopped before committing anything
    (False, "unbounded", True, True, False, False, True, "restore"),  # a lineage supersedes older ones
    (False, "bounded", True, False, True, True, False, "new"),  # change feed: one writer, exact position
    (False, "bounded", True, False, False, False, False, "restore"),  # change feed: any kind restores
    (False, "unbounded", False, False, False, True, False, "new"),
]


@pytest.mark.parametrize(
    ("fresh", "kind", "has_checkpoint", "legacy", "ended", "bounded", "kafka", "action"), PLANS
)
def test_plan_start(
    tmp_path: Path,
    fresh: bool,
    kind: str | None,
    has_checkpoint: bool,
    legacy: bool,
    ended: bool,
    bounded: bool,
    kafka: bool,
    action: str,
) -> None:
    newest = lineage(tmp_path, "r1", bounded=kind == "bounded") if kind else None
    ckpt = tmp_path / "r1" / "j" / "chk-1" if has_checkpoint else None
    old = tmp_path / "old" / "chk-9" if legacy else None
    plan = plan_start(
        fresh=fresh, newest=newest, checkpoint=ckpt, legacy=old, ended=ended, bounded=bounded, kafka=kafka
    )
    assert plan.action == action and plan.reason
    if action in ("restore", "settle", "complete"):
        assert plan.checkpoint == (ckpt if kind else old)
        assert plan.lineage is newest


def test_lineage_round_trips_and_the_newest_is_the_latest_created(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    assert folder.newest() is None and folder.lineages() == []
    a = lineage(tmp_path, "aaa", created=5, bounded=True)
    b = Lineage(
        folder=tmp_path / "bbb",
        run_id="bbb",
        bounded=True,
        parallelism=3,
        start={"offsets": {"t#0": 4}, "watermarks": {"t#0": 99}},
        end={"t#0": 9},
        restored_from="/x/chk-1",
        created_ms=7,
        widest=4,
    )
    folder.begin(b)
    folder.begin(a)
    (tmp_path / "junk").mkdir()  # not a lineage
    assert folder.lineages() == [a, b] and folder.newest() == b
    assert Lineage.read(tmp_path / "junk") is None


def test_a_lineages_checkpoint_is_its_newest_own_else_the_one_it_continues(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    origin = checkpoint(tmp_path, job="0ld", n=4)
    lin = Lineage(
        folder=tmp_path / "legacy-1", run_id=None, bounded=False, parallelism=1, restored_from=str(origin)
    )
    folder.begin(lin)
    assert folder.checkpoint(lin) == origin
    assert folder.legacy_checkpoint() == origin
    own = checkpoint(lin.folder, job="j2", n=6)
    assert folder.checkpoint(lin) == own


def test_prune_keeps_only_what_the_lineage_still_needs(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    old = lineage(tmp_path, "old", created=1)
    keep = lineage(tmp_path, "keep", created=2)
    for lin in (old, keep):
        folder.begin(lin)
    legacy = checkpoint(tmp_path, job="f00d", n=3)
    restored = checkpoint(keep.folder, job="job-b", n=8)
    stale = checkpoint(keep.folder, job="job-a", n=2)
    folder.prune(keep, keep_checkpoint=restored)
    assert not old.folder.exists() and not legacy.exists() and not stale.exists()
    assert restored.is_dir() and (keep.folder / "lineage.json").is_file()
    folder.finish(keep)
    assert not keep.folder.exists() and list(tmp_path.iterdir()) == []
    # A removal a crash interrupted (renamed aside, not yet deleted) is no lineage, and goes next time.
    half = lineage(tmp_path, "half", created=3)
    folder.begin(half)
    half.folder.rename(tmp_path / ".removing-half-0000")
    assert folder.newest() is None and list(tmp_path.iterdir()) == []


def test_a_run_continues_or_begins_a_lineage(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    new = lineage_for_run(
        folder,
        plan_start(
            fresh=True, newest=None, checkpoint=None, legacy=None, ended=False, bounded=True, kafka=True
        ),
        bounded=True,
        parallelism=2,
        start={"offsets": {}},
        end={"t#0": 3},
    )
    assert new.run_id and new.folder == tmp_path / new.run_id and new.end == {"t#0": 3}
    ckpt = checkpoint(new.folder)
    plan = plan_start(
        fresh=False, newest=new, checkpoint=ckpt, legacy=None, ended=False, bounded=True, kafka=False
    )
    wider = lineage_for_run(folder, plan, bounded=False, parallelism=4, start={})
    assert (wider.run_id, wider.folder, wider.start) == (new.run_id, new.folder, {"offsets": {}})
    assert (wider.bounded, wider.end, wider.parallelism, wider.widest) == (False, None, 4, 4)
    narrower = lineage_for_run(
        folder,
        plan_start(
            fresh=False, newest=wider, checkpoint=ckpt, legacy=None, ended=False, bounded=True, kafka=False
        ),
        bounded=True,
        parallelism=1,
        start={},
    )
    assert (narrower.parallelism, narrower.widest) == (1, 4)


def test_a_lineage_has_ended_when_any_of_its_writers_committed_its_end() -> None:
    txns = {("bronze", "ingest/bronze:r1:1"): EOI_CHECKPOINT_ID, ("silver", "ingest/silver:r1:0"): 7}
    tables = [("bronze", "ingest/bronze"), ("silver", "ingest/silver")]

    def txn(uri: str, app_id: str) -> int | None:
        return txns.get((uri, app_id))

    assert lineage_ended(tables, "r1", 2, txn_version=txn)
    assert not lineage_ended(tables, "r1", 1, txn_version=txn)  # subtask 1 is outside its parallelism
    assert not lineage_ended(tables, "r2", 2, txn_version=txn)
    assert not lineage_ended(tables, None, 2, txn_version=txn)  # unknown run id: cannot tell


def test_settle_puts_every_table_at_the_checkpoints_cut(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable

    from flink_jobs.resume import settle
    from lakestream.progress import read_progress
    from sinks.flink.delta_sink import DeltaSinkSpec
    from sinks.table_spec import TableSpec

    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
    spec = DeltaSinkSpec(table=TableSpec(table_uri=str(tmp_path / "t"), schema=schema), app_prefix="job/t")
    from sinks.writer import TwoPhaseDeltaWriter

    writers = []
    for subtask in range(2):
        w = TwoPhaseDeltaWriter(spec=spec.table, app_prefix=spec.app_prefix)
        w.open(restored_checkpoint_id=None, run_id="r1", subtask=subtask, parallelism=2)
        writers.append(w)
    for n in (1, 2, 3):
        for subtask, w in enumerate(writers):
            offsets = list(range(10 * n, 10 * n + 5))
            w.write(
                pa.RecordBatch.from_pydict(
                    {"topic": ["a"] * 5, "partition": [subtask] * 5, "offset": offsets}, schema=schema
                )
            )
            w.prepare(n, progress={f"kafka/a/{subtask}": 10 * n + 5})
        if n == 1:
            for w in writers:
                w.commit(1)
    del writers  # killed: checkpoint 2 completed (not committed), 3 did not
    lin = Lineage(folder=tmp_path / "ck" / "r1", run_id="r1", bounded=False, parallelism=2, widest=2)
    chk = checkpoint(lin.folder, n=2)
    settle([spec], lin, chk)
    settle([spec], lin, chk)  # idempotent: a crash halfway is settled again
    table = DeltaTable(spec.table.table_uri)
    assert sorted(table.to_pyarrow_table().column("offset").to_pylist()) == sorted(
        [o for n in (1, 2) for o in range(10 * n, 10 * n + 5)] * 2
    )
    assert read_progress(table, "job/t", ["kafka/a/0", "kafka/a/1"]) == {"kafka/a/0": 25, "kafka/a/1": 25}
    assert not list((tmp_path / "t" / "_lakestream" / "manifests").rglob("*.json"))


def test_a_checkpoint_refused_for_state_the_graph_lacks_says_the_way_on() -> None:
    checkpoint = Path("/ck/ingest/run/job/chk-3")
    flink = RuntimeError(
        "java.lang.IllegalStateException: Failed to rollback to checkpoint/savepoint file:/ck/chk-3. Cannot "
        "map checkpoint/savepoint state for operator 72748311d0262ee7e86cb9b3a76ad5d6 to the new program, "
        "because the operator is not available in the new program."
    )
    refused = unrestorable(flink, checkpoint, "ingest")
    assert isinstance(refused, ResumeError)
    said = str(refused)
    assert str(checkpoint) in said and "72748311d0262ee7e86cb9b3a76ad5d6" in said
    assert "`lakestream ingest` command once with --bounded" in said and "lakestream backfill" in said
    # Other jobs have no gold windows to backfill; other failures are not this one.
    assert "backfill" not in str(unrestorable(flink, checkpoint, "land"))
    assert unrestorable(RuntimeError("TaskManager lost"), checkpoint, "ingest") is None


def test_a_bounded_run_the_graph_cannot_complete_is_sent_back_to_its_own_graph() -> None:
    """Settling is not exact for a bounded run some of whose writers committed their end: the message
    asks for the run to be completed as it was defined, not for a settling bounded run."""
    checkpoint = Path("/ck/ingest/run/job/chk-3")
    flink = RuntimeError(
        "Cannot map checkpoint/savepoint state for operator 72748311d0262ee7e86cb9b3a76ad5d6 to the new "
        "program, because the operator is not available in the new program."
    )
    refused = unrestorable(flink, checkpoint, "ingest", completing="run-7")
    assert isinstance(refused, ResumeError)
    said = str(refused)
    assert "interrupted bounded run run-7" in said and str(checkpoint) in said
    assert "72748311d0262ee7e86cb9b3a76ad5d6" in said and "nothing was written" in said
    assert "the same `lakestream ingest --bounded` command once with the settings" in said
    assert "backfill" not in said and "command once with --bounded added" not in said


def test_a_folder_on_an_object_store_has_the_path_operations_a_job_folder_uses(tmp_path: Path) -> None:
    chk = location("s3://bucket/checkpoints/ingest/run/job/chk-7/")
    assert isinstance(chk, StorePath) and chk == "s3://bucket/checkpoints/ingest/run/job/chk-7"
    assert chk.name == "chk-7" and checkpoint_id(chk) == 7
    lineage_folder = StorePath("s3://bucket/checkpoints") / "ingest" / "run"
    assert chk.parent.parent == lineage_folder and lineage_folder in chk.parents
    assert chk.parents[-1] == "s3://bucket" and StorePath("s3://bucket/x").parents == ["s3://bucket"]
    assert StorePath("s3://bucket/checkpoints/other") not in chk.parents
    assert location(str(tmp_path / "ckpt")) == (tmp_path / "ckpt").resolve()
    lin = Lineage(folder=lineage_folder, run_id="run", bounded=False, parallelism=1)
    assert Lineage.parse(lineage_folder, lin.to_json()) == lin
    assert Lineage.parse(lineage_folder, "{not json") is None
