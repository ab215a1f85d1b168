import threading
from collections.abc import Iterator

import pytest
from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory

from runtime.worker.bundles import BEAM_METHODS, skip_sampler_waits

Sampler = statesampler.StateSampler


def restore_beam() -> None:
    methods = Sampler.__dict__.get(BEAM_METHODS)
    if methods is not None:  # replaced by this test or by a function's open() in an earlier one
        Sampler.start, Sampler.stop = methods
        delattr(Sampler, BEAM_METHODS)


@pytest.fixture
def beam_sampler() -> Iterator[None]:
    """Beam's own start and stop during the test and after it."""
    restore_beam()
    yield
    restore_beam()


def sampler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name != threading.current_thread().name)


def test_beam_starts_a_thread_per_bundle(beam_sampler: None) -> None:
    # What the replacement removes: without it every start runs a sampler thread until stop joins it.
    sampler = Sampler("step", CounterFactory())
    before = sampler_threads()
    sampler.start()
    assert sampler_threads() == before + 1
    sampler.stop_if_still_running()
    assert sampler_threads() == before


def test_bundles_run_without_a_thread_and_keep_the_tracker(beam_sampler: None) -> None:
    skip_sampler_waits()
    sampler = Sampler("step", CounterFactory())
    before = sampler_threads()
    for _ in range(3):  # a worker runs bundle after bundle on one sampler: start, stop, reset
        sampler.start()
        assert sampler_threads() == before
        assert statesampler.get_current_tracker() is sampler  # user metrics find their container here
        with sampler.scoped_state("step", "process"):
            assert sampler.current_state().name.step_name == "step"
        sampler.stop_if_still_running()
        assert sampler.finished
        assert statesampler.get_current_tracker() is None
        sampler.reset()


def test_a_sampler_started_by_beam_stops_by_joining_its_thread(beam_sampler: None) -> None:
    # Another operator's bundle in the same worker may have begun before an ``open`` replaced start/stop.
    sampler = Sampler("step", CounterFactory())
    before = sampler_threads()
    sampler.start()
    try:
        assert sampler_threads() == before + 1
        skip_sampler_waits()
    finally:
        sampler.stop_if_still_running()
    assert sampler_threads() == before  # joined, not left running
    assert statesampler.get_current_tracker() is None


def test_replacing_twice_keeps_the_first_replacement(beam_sampler: None) -> None:
    skip_sampler_waits()
    start, stop = Sampler.__dict__["start"], Sampler.__dict__["stop"]
    skip_sampler_waits()
    assert (Sampler.__dict__["start"], Sampler.__dict__["stop"]) == (start, stop)
