"""Keep reading the local JVM's standard error, so the JVM never blocks writing to it.

PyFlink starts its gateway JVM (the local MiniCluster's) with standard error on a pipe it reads only if
the JVM dies before it connects. Once the JVM has written a pipe's worth (64 KiB on Linux) the next write
blocks the thread that makes it: a gRPC event loop thread logging a closed connection (through
``java.util.logging``'s console handler) stopped every Python operator's data channel, so a running job
stopped committing and checkpointing, with no exception anywhere. The lines are passed on to this
process's standard error (file descriptor 2), where a JVM run from a terminal writes them.
"""

from __future__ import annotations

import os
import threading
from typing import IO

#: Lines not passed on: PyFlink's launcher adds ``--add-opens=jdk.proxy2/...`` for every JVM, which a
#: JDK 17 without that module answers with this warning at each start; it says nothing to the user.
IGNORED = (b"WARNING: Unknown module: jdk.proxy2 specified to --add-opens",)


def forward(stream: IO[bytes], fd: int = 2) -> threading.Thread:
    """Read ``stream`` to its end in a daemon thread, writing its lines to ``fd`` (minus ``IGNORED``).

    A write that fails (``fd`` closed, its reader gone) drops the line; reading goes on, which is what
    keeps the JVM running.
    """

    def run() -> None:
        with stream:
            for line in iter(stream.readline, b""):
                if line.rstrip(b"\r\n") in IGNORED:
                    continue
                try:
                    os.write(fd, line)
                except OSError:
                    pass

    thread = threading.Thread(target=run, name="lakestream-jvm-stderr", daemon=True)
    thread.start()
    return thread
