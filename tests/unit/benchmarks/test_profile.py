"""How ``benchmarks.profile`` reads py-spy's collapsed stacks into a worker's time split."""

from __future__ import annotations

from benchmarks.profile import parse_collapsed

POOL = "run (apache_beam/utils/thread_pool_executor.py:37)"
BUNDLE = f"{POOL};process_bundle (apache_beam/runners/worker/sdk_worker.py:694)"
STD = "process_element (udfs/ingest_standardise.py:129)"


def test_time_splits_into_own_code_runtime_and_between_bundles() -> None:
    lines = [
        # pool thread 1: 6 ticks in a bundle (4 own code, 1 Beam, 1 waiting for input), 4 idle
        f"thread (0x1);{BUNDLE};{STD};stable_id (lakestream/adapters/parsing.py:453) 3",
        f"thread (0x1);{BUNDLE};process_element (/srv/app/udfs/ingest_standardise.py:130) 1",
        f"thread (0x1);{BUNDLE};wait (threading.py:320) 1",
        f"thread (0x1);{BUNDLE};input_elements (apache_beam/runners/worker/data_plane.py:539);get (q.py:1) 1",
        f"thread (0x1);{POOL};get (queue.py:171);wait (threading.py:320) 4",
        # pool thread 2 picked up a later bundle: still "in bundle" time of the same worker
        f"thread (0x2);{BUNDLE};rows_to_batch (sinks/flink/delta_sink.py:80) 2",
        f"thread (0x2);{POOL};wait (threading.py:320) 1",
        "not a stack line",
    ]
    prof = parse_collapsed(lines, 7).summary(top=3)
    assert prof["ticks"] == 10  # the longest-lived thread saw every tick
    assert prof["in_bundle_pct"] == 80.0  # 8 of 10 ticks, across both pool threads
    assert prof["lakestream_code_pct"] == 60.0  # 6 ticks with udfs/ or lakestream/ frames, absolute paths too
    assert prof["runtime_in_bundle_pct"] == 10.0
    assert prof["waiting_for_input_in_bundle_pct"] == 10.0  # blocked in input_elements: the JVM's turn
    assert prof["between_bundles_pct"] == 20.0
    assert prof["waiting_for_the_jvm_pct"] == 30.0
    assert prof["top_self"][0] == ("stable_id (parsing.py)", 30.0)
    assert ("process_element (ingest_standardise.py)", 10.0) in prof["top_lakestream_frames"]


def test_empty_profile_is_all_zero() -> None:
    prof = parse_collapsed([], 1).summary(top=3)
    assert prof["ticks"] == 0 and prof["in_bundle_pct"] == 0.0 and prof["top_self"] == []
