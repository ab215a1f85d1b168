"""Print the CPython the venv is made from: the fastest supported one on PATH.

Run by ``make`` (plain ``python3``, once, when ``.venv`` does not exist yet) unless ``PYTHON`` is set.
The Python workers run lakestream's per-record code, so the interpreter's build matters: CPython built
with profile-guided and link-time optimisation (Debian's and python.org's builds) ran the ingest
benchmark's Python workers about a fifth faster than a build without them (pyenv's default) on the same
machine (benchmarks/RESULTS.md). Candidates are ``python3.12``, ``python3.11``, ``python3.10`` and
``python3`` in every PATH directory; each is asked for its version, for ``venv`` with ``ensurepip``, and
to time a short loop of the kind of work the workers do (best of several rounds, in its own CPU time).
``python3`` wins unless another is at least ``MARGIN`` faster, so noise does not flip the choice. The
choice and the timings go to stderr; only the interpreter's path goes to stdout.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: A candidate replaces the default ``python3`` only when this much faster (0.10 = 10 % less time).
MARGIN = 0.10
NAMES = ("python3", "python3.12", "python3.11", "python3.10")

#: Run by each candidate: its real path, version, whether it can make a venv with pip, and the best
#: CPU time of a loop of dict, string, integer and JSON work.
PROBE = r"""
import sys, time, json
ok = (3, 10) <= sys.version_info[:2] <= (3, 12)
try:
    import venv, ensurepip
except ImportError:
    ok = False
rows = [json.dumps({"id": "e%d" % i, "amount": "%d.%02d" % (i, i % 100),
                    "at": "2026-01-01 10:00:%02d" % (i % 60)}) for i in range(4000)]
def work():
    out = []
    for text in rows:
        d = json.loads(text)
        whole, _, cents = d["amount"].partition(".")
        out.append((d["id"].upper(), int(whole) * 100 + int(cents), d["at"][11:].split(":"), len(text)))
    return out
best = float("inf")
for _ in range(7):
    t = time.process_time()
    work()
    best = min(best, time.process_time() - t)
import os
print(os.path.realpath(sys.executable), "%d.%d.%d" % sys.version_info[:3], int(ok), best)
"""


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


def main() -> int:
    """Probe every candidate, report them on stderr, print the chosen one's path (exit 1: none)."""
    results: list[tuple[str, str, bool, float]] = []
    for exe in candidates(os.environ.get("PATH", "")):
        result = probe(exe)
        if result is not None and result[0] not in [r[0] for r in results]:
            results.append(result)
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
