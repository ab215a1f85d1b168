"""The ingest job graph as Flink builds it (a real JVM in a child process, nothing executed): the stable
operator uids that checkpoints are restored by, every stage at the job's parallelism, the stream keyed
in front of the de-dup operator, and the silver committer alone at parallelism 1."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import json, sys
    from lakestream.config import load_config
    from flink_jobs.ingest import build_ingest_job

    cfg = load_config(environ={"LAKESTREAM__FLINK__PARALLELISM": "3"})
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


def test_operator_uids_and_the_silver_committer(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ckpt")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    nodes = {n["uid"]: n for n in json.loads(proc.stdout.strip().splitlines()[-1])}
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
