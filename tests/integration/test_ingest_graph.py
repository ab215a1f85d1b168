"""The ingest job graph as Flink builds it (a real JVM in a child process, nothing executed): the stable
operator uids that checkpoints are restored by, every stage at the job's parallelism, the stream keyed
in front of the de-dup operator, the silver committer alone at parallelism 1, and the speed layer
(``gold.enabled``) behind the de-dup's side output, with uids of its own, its writer the silver
committer's second input, or absent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lakestream.gold import GoldSettings
from udfs.ingest_gold import aggregate_uid

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import json, sys
    from lakestream.config import load_config
    from flink_jobs.ingest import build_ingest_job

    cfg = load_config(
        environ={"LAKESTREAM__FLINK__PARALLELISM": "3", "LAKESTREAM__GOLD__ENABLED": sys.argv[2]}
    )
    env = build_ingest_job(
        cfg, bootstrap_servers="127.0.0.1:9", bounded=False, checkpoint_dir=sys.argv[1]
    )
    graph = env._j_stream_execution_environment.getStreamGraph()
    nodes = {}
    it = graph.getStreamNodes().iterator()
    while it.hasNext():
        node = it.next()
        nodes[node.getId()] = node
    out = []
    for node in nodes.values():
        inputs = [
            [nodes[e.getSourceId()].getTransformationUID(), str(e.getPartitioner())]
            for e in list(node.getInEdges())
        ]
        out.append({"uid": node.getTransformationUID(), "parallelism": node.getParallelism(), "in": inputs})
    print(json.dumps(out))
    """
)

UIDS = {
    "ingest-kafka-source",
    "ingest-standardise-markers",
    "ingest-standardise",
    "ingest-event-time-gate",
    "ingest-dedup",
    "ingest-resolve-orders",
    "ingest-silver-committer-markers",
    "ingest-silver-committer",
    "ingest-silver-committer-end",
}
#: The speed layer's operators; the aggregate's uid is a digest of the window and the metrics (DESIGN.md
#: section 11.6: what a changed definition means).
AGGREGATE = aggregate_uid(GoldSettings())
GOLD_UIDS = {"ingest-gold-lateness", AGGREGATE, "ingest-gold-upsert-markers"}
#: At the job's parallelism, chained after the de-dup: the lateness gate and its partials.
GOLD_PARALLEL = {"ingest-gold-lateness"}


def _graph(tmp_path: Path, gold: bool) -> dict[str, dict[str, object]]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ckpt"), "true" if gold else "false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {n["uid"]: n for n in json.loads(proc.stdout.strip().splitlines()[-1])}


def test_the_speed_layer_hangs_off_the_dedup_side_output_and_is_gone_when_disabled(tmp_path: Path) -> None:
    nodes = _graph(tmp_path, gold=True)
    assert set(nodes) == UIDS | GOLD_UIDS
    [(source, partitioner)] = nodes["ingest-gold-lateness"]["in"]  # type: ignore[misc]
    assert source == "ingest-dedup" and partitioner == "FORWARD"
    for uid in GOLD_UIDS:
        assert nodes[uid]["parallelism"] == (3 if uid in GOLD_PARALLEL else 1), uid
    # The gates' partials meet per window (keyed by window start) in the aggregate.
    [(source, partitioner)] = nodes[AGGREGATE]["in"]  # type: ignore[misc]
    assert source == "ingest-gold-lateness" and partitioner == "HASH"
    # The stamp reads the aggregate's rows and, on its second input, the lateness gate's watermarks.
    sources = {src for src, _ in nodes["ingest-gold-upsert-markers"]["in"]}  # type: ignore[attr-defined]
    assert sources == {AGGREGATE, "ingest-gold-lateness"}
    # The gold writer is the silver committer's second input: one Python worker for both sinks.
    inputs = sorted(tuple(edge) for edge in nodes["ingest-silver-committer"]["in"])  # type: ignore[attr-defined]
    assert inputs == [
        ("ingest-gold-upsert-markers", "FORWARD"),
        ("ingest-silver-committer-markers", "FORWARD"),
    ]
    # Off: the graph of the five tables only, exactly as before the speed layer.
    assert set(_graph(tmp_path, gold=False)) == UIDS


def test_operator_uids_and_the_silver_committer(tmp_path: Path) -> None:
    nodes: dict[str, Any] = _graph(tmp_path, gold=False)
    # Checkpoints are restored by uid: every operator has a stable one (a changed or missing uid loses
    # or orphans that operator's state on upgrade; see the README's upgrade notes).
    assert set(nodes) == UIDS
    for uid in UIDS - {
        "ingest-silver-committer-markers",
        "ingest-silver-committer",
        "ingest-silver-committer-end",
    }:
        assert nodes[uid]["parallelism"] == 3, uid
    # Keyed by bucket in front of the de-dup operator; everything else is forward.
    [(source, partitioner)] = nodes["ingest-dedup"]["in"]
    assert source == "ingest-event-time-gate" and partitioner == "HASH"
    [(source, partitioner)] = nodes["ingest-resolve-orders"]["in"]
    assert source == "ingest-dedup" and partitioner == "FORWARD"
    [(source, partitioner)] = nodes["ingest-event-time-gate"]["in"]
    assert source == "ingest-standardise" and partitioner == "FORWARD"
    for uid in ("ingest-silver-committer-markers", "ingest-silver-committer", "ingest-silver-committer-end"):
        assert nodes[uid]["parallelism"] == 1
    # The committer's marker operator reads the resolve operator's committables, the committer reads it.
    [(source, _)] = nodes["ingest-silver-committer-markers"]["in"]
    assert source == "ingest-resolve-orders"
    [(source, partitioner)] = nodes["ingest-silver-committer"]["in"]
    assert source == "ingest-silver-committer-markers" and partitioner == "FORWARD"
