"""RSS per process kind: which process of a run's tree is which, on recorded command lines and stacks."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import procs

VENV = "/work/x/.venv"
#: A bounded ingest run's tree at p=2 as ``ps`` showed it (pid, name, command line).
TREE = [
    (100, "python", [f"{VENV}/bin/python", "-m", "benchmarks.ingest_run", "--bootstrap", "127.0.0.1:1"]),
    (101, "java", ["java", "-XX:TieredStopAtLevel=1", "org.apache.flink.client.python.PythonGatewayServer"]),
    (
        102,
        "bash",
        ["bash", f"{VENV}/lib/python3.11/site-packages/pyflink/bin/pyflink-udf-runner.sh", "--id=1-1"],
    ),
    (103, "python", [f"{VENV}/bin/python", "-m", "pyflink.fn_execution.beam.beam_boot", "--id=1-1"]),
    (104, "tee", ["tee", "/tmp/python-dist-x/flink-python-udf-boot.log"]),
    (105, "python", [f"{VENV}/bin/python", "-m", "pyflink.fn_execution.beam.beam_boot", "--id=2-1"]),
    (106, "python", [f"{VENV}/bin/python", "-m", "pyflink.fn_execution.beam.beam_boot", "--id=3-1"]),
]
#: Excerpts of ``py-spy dump`` of a worker inside a bundle and of one between bundles.
STANDARDISE_STACK = """Thread 0x7F (idle): "MainThread"
    _process (udfs/ingest_standardise.py:181)
    process_element (udfs/ingest_standardise.py:142)
    _run_bundle (apache_beam/runners/worker/sdk_worker.py:486)
"""
RESOLVE_STACK = """    fold (udfs/ingest_resolve.py:90)
    process_bundle (apache_beam/runners/worker/bundle_processor.py:1)
"""
IDLE_STACK = """Thread 0x7F (idle): "MainThread"
    wait (threading.py:327)
    run (apache_beam/runners/worker/sdk_worker.py:262)
    main (pyflink/fn_execution/beam/beam_sdk_worker_main.py:38)
"""


def kind_of(pid: int, name: str, cmd: list[str], workers: dict[int, str]) -> str:
    return procs.process_kind(is_root=pid == 100, name=name, cmdline=cmd, worker_kind=workers.get(pid))


def test_process_kinds_of_a_recorded_tree() -> None:
    workers = {103: procs.STANDARDISE, 106: procs.RESOLVE}
    kinds = {pid: kind_of(pid, name, cmd, workers) for pid, name, cmd in TREE}
    assert kinds == {
        100: procs.CLIENT,
        101: procs.JVM,
        102: procs.OTHER,
        103: procs.STANDARDISE,
        104: procs.OTHER,
        105: procs.WORKER,  # not told apart yet
        106: procs.RESOLVE,
    }
    assert not procs.is_beam_worker(TREE[0][2]) and procs.is_beam_worker(TREE[3][2])
    # A Python child that is no Beam worker (e.g. Spark's) is "other python", not a worker.
    assert kind_of(7, "python3", ["python3", "-m", "pyspark.daemon"], {}) == procs.PYTHON


def test_workers_of_a_run_with_one_worker_per_slot_are_slot_workers() -> None:
    kinds = {
        pid: procs.process_kind(
            is_root=pid == 100, name=name, cmdline=cmd, worker_kind=None, unclassified=procs.SLOT_WORKERS
        )
        for pid, name, cmd in TREE
    }
    assert [pid for pid, k in kinds.items() if k == procs.SLOT_WORKERS] == [103, 105, 106]
    assert kinds[101] == procs.JVM and kinds[102] == procs.OTHER


@pytest.mark.parametrize(
    ("python_workers", "sets", "per_operator"),
    [
        ("slot", [], False),
        ("operator", [], True),
        ("slot", ["python.fn-execution.memory.managed=false"], True),
        ("operator", ["rest.port=1", "python.fn-execution.memory.managed = TRUE"], False),
        ("slot", ["python.fn-execution.memory.managed.x=false"], False),
    ],
)
def test_whether_a_run_has_one_worker_per_operator(
    python_workers: str, sets: list[str], per_operator: bool
) -> None:
    assert procs.one_worker_per_operator(python_workers, sets) is per_operator


def test_worker_kind_from_its_stack() -> None:
    assert procs.worker_kind_from_stack(STANDARDISE_STACK) == procs.STANDARDISE
    assert procs.worker_kind_from_stack(RESOLVE_STACK) == procs.RESOLVE
    assert procs.worker_kind_from_stack(IDLE_STACK) is None
    assert procs.worker_kind_from_stack("") is None


def test_rss_grouped_per_kind() -> None:
    mib = procs.MIB
    pairs = [
        (procs.CLIENT, 180 * mib),
        (procs.JVM, 650 * mib),
        (procs.STANDARDISE, 250 * mib),
        (procs.STANDARDISE, 260 * mib),
        (procs.RESOLVE, 370 * mib),
        (procs.OTHER, 5 * mib),
        (procs.OTHER, 9 * mib),
    ]
    out = procs.group_rss(pairs)
    assert out == {
        procs.CLIENT: 180 * mib,
        procs.JVM: 650 * mib,
        procs.STANDARDISE: 510 * mib,
        procs.RESOLVE: 370 * mib,
        procs.OTHER: 14 * mib,
    }
    assert procs.group_rss([]) == {}


#: Vertices of the ingest job as Flink's REST API names them (p=2; p=1 chains everything into one task).
VERTICES_P2: dict[str, dict[str, Any]] = {
    "a": {
        "name": "Source: kafka source records -> kafka batches + standardise markers -> "
        "standardise + bronze/review/quarantine writers",
        "parallelism": 2,
    },
    "b": {
        "name": "event-time gate -> resolve markers -> resolve orders + late/silver writers -> "
        "resolve reports: Writer",
        "parallelism": 1,
    },
}
VERTICES_P1 = {"c": {"name": VERTICES_P2["a"]["name"] + " -> " + VERTICES_P2["b"]["name"], "parallelism": 1}}
VERTICES_KEYED = {
    "a": {"name": "Source: kafka source records -> standardise + w -> event-time gate", "parallelism": 4},
    "b": {
        "name": "de-dup by event id + resolve markers -> resolve orders + late/silver writers",
        "parallelism": 4,
    },
}


def test_expected_workers_are_the_python_operators_times_their_parallelism() -> None:
    assert procs.expected_workers(VERTICES_P2) == {procs.STANDARDISE: 2, procs.RESOLVE: 1}
    assert procs.expected_workers(VERTICES_P1) == {procs.STANDARDISE: 1, procs.RESOLVE: 1}
    assert procs.expected_workers(VERTICES_KEYED) == {procs.STANDARDISE: 4, procs.RESOLVE: 4}
    assert procs.expected_workers({}) == {}


def test_the_last_unclassified_workers_are_the_kind_still_short() -> None:
    expected = {procs.STANDARDISE: 2, procs.RESOLVE: 1}
    assert procs.by_elimination({103: procs.STANDARDISE, 106: procs.RESOLVE}, [103, 105, 106], expected) == {
        105: procs.STANDARDISE
    }
    assert procs.by_elimination({106: procs.RESOLVE}, [103, 105, 106], expected) == {
        103: procs.STANDARDISE,
        105: procs.STANDARDISE,
    }
    # two kinds short, or the count does not match: no guess
    assert procs.by_elimination({103: procs.STANDARDISE}, [103, 105, 106], expected) == {}
    assert procs.by_elimination({106: procs.RESOLVE}, [103, 105, 106, 107], expected) == {}
    assert procs.by_elimination({}, [], expected) == {}


def test_pss_of_a_live_tree_is_sampled_beside_rss() -> None:
    import os

    rss, pss = procs.RssSampler(os.getpid(), pss=True).sample_both()
    assert set(pss) == set(rss) and "client" in pss
    assert 0 < pss["client"] <= rss["client"] * 1.01  # a share of each page, at most all of it
    assert procs.RssSampler(os.getpid()).sample_both()[1] == {}  # off unless asked for


def test_cpu_between_interpolates_the_window_per_kind() -> None:
    series = [
        (100.0, {"jvm": 1.0}),
        (102.0, {"jvm": 3.0, "slot workers": 1.0}),
        (104.0, {"jvm": 4.0, "slot workers": 5.0}),
    ]
    # 101 -> 103: jvm 2.0 -> 3.5, the workers (absent at first: none yet) 0.5 -> 3.0.
    assert procs.cpu_between(series, 101.0, 103.0) == {"jvm": 1.5, "slot workers": 2.5}
    # Outside the samples: clamped to the first and the last.
    assert procs.cpu_between(series, 50.0, 500.0) == {"jvm": 3.0, "slot workers": 5.0}
    assert procs.cpu_between([], 1.0, 2.0) == {}


def test_the_sampler_keeps_cumulative_cpu_of_the_tree() -> None:
    import os

    sampler = procs.RssSampler(os.getpid())
    sampler.sample_both()
    sum(i * i for i in range(2_000_000))  # some CPU of this (the root) process
    sampler.sample_both()
    (t0, first), (t1, second) = sampler.cpu_series
    assert t1 >= t0 and set(second) >= {procs.CLIENT}
    assert second[procs.CLIENT] > first[procs.CLIENT]
