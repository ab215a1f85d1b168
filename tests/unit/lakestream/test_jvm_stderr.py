from __future__ import annotations

import os
import time

from runtime.jvm_stderr import IGNORED, forward


def test_more_than_a_pipe_of_lines_is_passed_on_in_order_without_the_ignored_one() -> None:
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    lines = [b"line %06d " % i + b"x" * 100 + b"\n" for i in range(2_000)]  # ~220 KB: 3 pipes' worth
    thread = forward(os.fdopen(source_r, "rb"), fd=sink_w)
    received = bytearray()
    with os.fdopen(source_w, "wb", buffering=0) as writer:
        writer.write(IGNORED[0] + b"\n")
        for line in lines:
            writer.write(line)  # would block once both pipes are full, unless both are read
            while True:
                chunk = _read_available(sink_r)
                if not chunk:
                    break
                received += chunk
    # The thread may still hold up to a pipe's worth of lines for a sink that is full: keep reading it
    # until the thread has passed everything on and ended.
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        received += _read_available(sink_r)
        thread.join(timeout=0.05)
    assert not thread.is_alive()
    os.close(sink_w)
    while chunk := os.read(sink_r, 1 << 16):
        received += chunk
    os.close(sink_r)
    assert bytes(received) == b"".join(lines)


def test_a_closed_destination_does_not_stop_the_reading() -> None:
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    os.close(sink_r)  # every write fails (broken pipe)
    thread = forward(os.fdopen(source_r, "rb"), fd=sink_w)
    with os.fdopen(source_w, "wb", buffering=0) as writer:
        for _ in range(2_000):
            writer.write(b"y" * 100 + b"\n")
    thread.join(timeout=10)
    os.close(sink_w)
    assert not thread.is_alive()


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""
    finally:
        os.set_blocking(fd, True)
