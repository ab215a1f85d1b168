"""The demo's signal handling: the first SIGINT/SIGTERM interrupts, later ones cannot cut the clean-up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from demo.run_demo import DemoInterrupted, _signals_interrupt


def _wait_for_signal() -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError("no signal arrived")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_interrupts_and_later_ones_are_ignored(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    cleaned = False
    with pytest.raises(DemoInterrupted) as caught:
        with _signals_interrupt():
            try:
                os.kill(os.getpid(), sig)
                _wait_for_signal()
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C during the clean-up
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                cleaned = True
    assert caught.value.signum == sig and 128 + caught.value.signum in (130, 143)
    assert cleaned
    assert signal.getsignal(sig) is before


def test_an_interruption_waits_for_a_held_block_to_finish() -> None:
    finished = False
    with pytest.raises(DemoInterrupted) as caught:
        with _signals_interrupt() as interrupts:
            with interrupts.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)  # the handler has run: the signal is recorded, not raised
                assert interrupts.signum == signal.SIGINT
                finished = True
            raise AssertionError("the interruption was not raised after the held block")
    assert finished and caught.value.signum == signal.SIGINT
