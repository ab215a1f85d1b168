"""The local JVM's class-data archive: which options a launch gets, what is published, what is pruned."""

from __future__ import annotations

import os
from pathlib import Path

from runtime import class_archive
from runtime.class_archive import QUIET, ArchivePlan, archive_key, plan, prune, publish


def jars(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        path = tmp_path / name
        path.write_bytes(b"jar " + name.encode())
        out.append(path)
    return out


def test_the_key_changes_with_a_jar_the_java_or_the_extra_class_path(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_bytes(b"java")
    lib = jars(tmp_path, "a.jar", "b.jar")
    key = archive_key(java, lib)
    assert key == archive_key(java, lib), "the same inputs give the same key"
    assert len(key) == 20 and all(c in "0123456789abcdef" for c in key)

    lib[1].write_bytes(b"a rebuilt jar, of another size")
    rebuilt = archive_key(java, lib)
    assert rebuilt != key
    os.utime(lib[1], ns=(1, 1))  # same size, another time: another jar too
    assert archive_key(java, lib) != rebuilt
    assert archive_key(java, lib[:1]) != archive_key(java, lib), "a jar less is another class path"
    assert archive_key(java, lib, extra="/opt/hadoop/*") != archive_key(java, lib)
    before = archive_key(java, lib)
    java.write_bytes(b"another jdk, of another size")
    assert archive_key(java, lib) != before


def test_a_first_launch_writes_an_archive_of_its_own_and_a_later_one_maps_the_published_one(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "archives"
    first = plan(folder, "k1", pid=41)
    assert first.pending == folder / "k1.41.part" and first.final == folder / "k1.jsa"
    assert first.options == (f"-XX:ArchiveClassesAtExit={first.pending}", QUIET)
    assert folder.is_dir(), "the folder is made for the JVM to write into"

    first.pending.write_bytes(b"archive")  # what the JVM writes at its exit
    assert publish(first, 1), "PyFlink's gateway JVM ends with status 1 once its client is gone"
    assert not first.pending.exists() and first.final.read_bytes() == b"archive"

    later = plan(folder, "k1", pid=42)
    assert later == ArchivePlan((f"-XX:SharedArchiveFile={first.final}", QUIET), first.final)
    assert not publish(later, 0), "a launch that mapped the archive publishes nothing"
    assert first.final.read_bytes() == b"archive"


def test_a_jvm_killed_by_a_signal_still_running_or_that_wrote_nothing_publishes_nothing(
    tmp_path: Path,
) -> None:
    for returncode, content in ((-9, b"half an archive"), (-15, b"half an archive"), (None, b"x"), (1, b"")):
        run = plan(tmp_path, "k", pid=7)
        assert run.pending is not None
        run.pending.write_bytes(content)
        assert not publish(run, returncode), (returncode, content)
        assert not run.pending.exists() and not run.final.exists(), "its file is deleted, not mapped later"
    run = plan(tmp_path, "k", pid=8)
    assert not publish(run, 0), "ended by itself without writing one (e.g. the JDK has no base archive)"
    assert not run.final.exists()


def test_concurrent_first_launches_each_write_their_own_file_and_the_last_rename_wins(tmp_path: Path) -> None:
    a, b = plan(tmp_path, "k", pid=1), plan(tmp_path, "k", pid=2)
    assert a.pending != b.pending and a.final == b.final
    assert a.pending is not None and b.pending is not None
    a.pending.write_bytes(b"from a")
    b.pending.write_bytes(b"from b")
    assert publish(a, 0) and publish(b, 0)
    assert a.final.read_bytes() == b"from b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.jsa"]


def test_prune_keeps_the_newest_archives_and_fresh_unpublished_files(tmp_path: Path) -> None:
    now = 1_000_000.0
    for i in range(5):
        path = tmp_path / f"k{i}.jsa"
        path.write_bytes(b"a")
        os.utime(path, (now - 100 * i, now - 100 * i))  # k0 the newest
    running = tmp_path / "k9.1.part"  # a run writing its archive right now
    running.write_bytes(b"p")
    os.utime(running, (now - 60, now - 60))
    dead = tmp_path / "k9.2.part"  # a run that died while writing
    dead.write_bytes(b"p")
    old = now - class_archive.STALE_S - 1
    os.utime(dead, (old, old))
    prune(tmp_path, keep=3, now=now)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k0.jsa", "k1.jsa", "k2.jsa", "k9.1.part"]
