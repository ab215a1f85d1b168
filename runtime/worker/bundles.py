"""Bundle ends without Beam's sampler sleep, for the Python workers.

Apache Beam starts a state-sampler thread with every bundle and joins it at the bundle's end; the thread
sleeps in steps that cannot be cut short, so every bundle end (and Flink, which waits for it) waits out
the rest of a step. The thread only feeds Beam's own per-step counters and "lull" log lines, which Flink
neither reports nor needs; the tracker itself (user metrics find their container through it) stays.
Here a sampler starts and stops without a thread.
"""

from __future__ import annotations

import threading
from typing import Any, Final

#: Set on Beam's ``StateSampler`` class once its start and stop are replaced: Beam's (start, stop).
BEAM_METHODS: Final = "_lakestream_beam_methods"
#: Set on a sampler started without a thread, until it stops.
_NO_THREAD: Final = "_lakestream_no_thread"


def skip_sampler_waits() -> None:
    """Replace ``StateSampler.start``/``stop`` in this process with thread-less ones; idempotent.

    A sampler whose thread is already running (a bundle of another operator in the same worker, begun
    before this call) stops the way Beam's does, joining its thread. Beam is imported here, in the
    worker: the client builds the job graph from these modules without it.
    """
    from apache_beam.runners.worker import statesampler

    beam: Any = statesampler  # untyped
    cls = beam.StateSampler
    if BEAM_METHODS in cls.__dict__:
        return
    beam_start, beam_stop = cls.start, cls.stop

    def start(self: Any) -> None:
        self.tracked_thread = threading.current_thread()
        beam.set_current_tracker(self)
        self.started = True
        self.__dict__[_NO_THREAD] = True

    def stop(self: Any) -> None:
        if not self.__dict__.pop(_NO_THREAD, False):
            beam_stop(self)  # started by Beam's start: its thread runs and is joined
            return
        beam.set_current_tracker(None)
        self.finished = True

    cls.start = start
    cls.stop = stop
    setattr(cls, BEAM_METHODS, (beam_start, beam_stop))
