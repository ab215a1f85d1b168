"""Print the CPython the venv is made from: the fastest supported one on PATH.

Run by ``make`` (plain ``python3``, once, when ``.venv`` does not exist yet) unless ``PYTHON`` is set.
The Python workers run lakestream's per-record code, so the interpreter's build matters: a CPython with
profile-guided and link-time optimisation (Debian's, python.org's) runs it faster than one without
(pyenv's default). Each ``python3``, ``python3.12``, ``python3.11`` and ``python3.10`` on PATH with
``venv`` and ``ensurepip`` times a short loop of the workers' kind of work; ``python3`` wins unless
another is at least ``MARGIN`` faster, so noise does not flip the choice. Timings go to stderr, only
the chosen path to stdout.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: A candidate replaces the default ``python3`` only when this much faster (0.10 = 10 % less time).
MARGIN = 0.10
NAMES = ("python3", "python3.12", "python3.11", "python3.10")

#: Run by each candidate: its real path, version, whether it can make a venv with pip, and the best
#: CPU time of a loop of the interpreter work the workers do per record (string splits and formats,
#: integer arithmetic, a slotted object, dict and tuple building, calls), in pure Python: C helpers
#: such as ``json``'s accelerator run the same in every build and would hide the difference.
PROBE = r"""
import sys, time
ok = (3, 10) <= sys.version_info[:2] <= (3, 12)
try:
    import venv, ensurepip
except ImportError:
    ok = False
class Event:
    __slots__ = ("ident", "fen", "clock", "tags")
    def __init__(self, ident, fen, clock, tags):
        self.ident, self.fen, self.clock, self.tags = ident, fen, clock, tags
def parse(i):
    ident, amount, at = ("e%d,%d.%02d,2026-01-01 10:00:%02d" % (i, i, i % 100, i % 60)).split(",")
    whole, _, cents = amount.partition(".")
    event = Event(ident.upper(), int(whole) * 100 + int(cents), at[11:].split(":"), {"k": i & 7})
    return event if event.fen % 3 else None
def work():
    out = []
    for i in range(10000):
        event = parse(i)
        if event is not None and event.tags.get("k") != 5:
            out.append((event.ident, event.fen, len(event.clock)))
    return out
best = float("inf")
for _ in range(5):
    t = time.process_time()
    work()
    best = min(best, time.process_time() - t)
import os
print(os.path.realpath(sys.executable), "%d.%d.%d" % sys.version_info[:3], int(ok), best)
"""
#: Probes per candidate, taken in turns so that a busy moment of the machine hits every candidate.
ROUNDS = 3


def candidates(path: str) -> list[str]:
    """Executables named like a CPython 3 on ``path``, in PATH order, ``python3`` first."""
    found: list[str] = []
    for name in NAMES:
        for folder in path.split(os.pathsep):
            exe = os.path.join(folder or ".", name)
            if os.path.isfile(exe) and os.access(exe, os.X_OK) and exe not in found:
                found.append(exe)
    return found


def probe(exe: str) -> tuple[str, str, bool, float] | None:
    """(real path, version, can make a venv, seconds) of one candidate; None when it does not run."""
    try:
        out = subprocess.run(
            [exe, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
        ).stdout.split()
        return out[0], out[1], out[2] == "1", float(out[3])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def choose(results: list[tuple[str, str, bool, float]]) -> tuple[str, str, bool, float] | None:
    """The first usable result unless a later one is ``MARGIN`` faster (then the fastest)."""
    usable = [r for r in results if r[2]]
    if not usable:
        return None
    first, fastest = usable[0], min(usable, key=lambda r: r[3])
    return fastest if fastest[3] < first[3] * (1 - MARGIN) else first


def measure(exes: list[str], rounds: int = ROUNDS) -> list[tuple[str, str, bool, float]]:
    """``probe`` each executable ``rounds`` times in turns; per interpreter (real path) the best time,
    in the order of ``exes``; executables that do not run are left out."""
    best: dict[str, tuple[str, str, bool, float]] = {}
    live: list[str] = []
    for exe in exes:  # the first round; later ones skip other names of an interpreter already probed
        result = probe(exe)
        if result is not None and result[0] not in best:
            best[result[0]] = result
            live.append(exe)
    for _ in range(rounds - 1):
        for exe in live:
            result = probe(exe)
            if result is not None and result[0] in best and result[3] < best[result[0]][3]:
                best[result[0]] = result
    return list(best.values())


def main() -> int:
    """Probe every candidate, report them on stderr, print the chosen one's path (exit 1: none)."""
    results = measure(candidates(os.environ.get("PATH", "")))
    chosen = choose(results)
    for real, version, usable, seconds in results:
        mark = "->" if chosen is not None and real == chosen[0] else "  "
        state = f"{seconds * 1000:6.1f} ms" if usable else "no venv/ensurepip or unsupported version"
        print(f"lakestream: {mark} {real} ({version}): {state}", file=sys.stderr)
    if chosen is None:
        print(
            "lakestream: no CPython 3.10-3.12 with venv and ensurepip on PATH: install one "
            "(e.g. apt-get install python3.11-venv) or run make PYTHON=/path/to/python3.11",
            file=sys.stderr,
        )
        return 1
    print(chosen[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
