"""Python's bucket -> subtask mapping and the Java key selector agree with Flink's key-group maths.

Standardise (Python) decides which subtask an event's part goes to; Flink routes it by the key the Java
``BucketKeySelector`` returns. If the two disagreed, the de-dup operator would be handed keys outside its
key-group range. Checked against Flink's own ``KeyGroupRangeAssignment`` in a real JVM.
"""

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
    import json
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env
    from lakestream.keys import subtask_of

    build_env(FlinkConfig(), checkpoint_dir="unused")  # the JVM with the project's jar
    from pyflink.java_gateway import get_gateway
    jvm = get_gateway().jvm
    kgra = jvm.org.apache.flink.runtime.state.KeyGroupRangeAssignment
    selector = jvm.io.lakestream.flink.ingest.BucketKeySelector
    bad = []
    for max_p in (1, 7, 128, 1000):
        for p in sorted({1, 2, 3, 5, 8, max_p}):
            if p > max_p:
                continue
            for kg in range(max_p):
                if kgra.computeOperatorIndexForKeyGroup(max_p, p, kg) != subtask_of(kg, p, max_p):
                    bad.append(("subtask", max_p, p, kg))
        for kg in range(max_p):
            key = selector.keyForKeyGroup(kg, max_p)
            if kgra.assignToKeyGroup(key, max_p) != kg:
                bad.append(("key", max_p, kg))
    print(json.dumps(bad[:20]))
    """
)


def test_python_subtasks_and_java_keys_follow_flinks_key_groups(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
