"""Where lakestream finds its own build outputs and keeps its runtime data.

Everything downloaded or built (jars, broker data, cluster logs) lives in git-ignored folders so a
fresh clone stays clean after the demo and the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

from lakestream.errors import LakestreamError

PROJECT_ROOT: Path = Path(__file__).resolve().parent.parent
JVM_DIR: Path = PROJECT_ROOT / "jvm"
JVM_TARGET: Path = JVM_DIR / "target"
#: The project's own jar (checkpoint epoch operator and friends).
LAKESTREAM_JAR: Path = JVM_TARGET / "lakestream-jvm.jar"
#: Flink connector jars that job graphs add to the pipeline classpath.
FLINK_LIB_DIR: Path = JVM_TARGET / "lib" / "flink"
#: A Kafka broker and its runtime dependencies, for the local single-node KRaft broker.
KAFKA_LIB_DIR: Path = JVM_TARGET / "lib" / "kafka"
#: S3Proxy and its runtime dependencies, for the local S3-compatible server (``jvm/s3proxy/pom.xml``).
S3PROXY_LIB_DIR: Path = JVM_TARGET / "lib" / "s3proxy"
#: Flink plugins of the local MiniCluster, in Flink's layout (one folder per plugin), as a cluster keeps
#: them in ``$FLINK_HOME/plugins``.
PLUGINS_DIR: Path = JVM_TARGET / "plugins"
#: Flink's S3 file system plugin (``flink-s3-fs-presto``), for checkpoints on an object store.
S3_PLUGIN_DIR: Path = PLUGINS_DIR / "s3-fs-presto"
#: Runtime state of the local services (broker and S3 data, cluster logs, pid and state files).
STATE_DIR: Path = Path(os.environ.get("LAKESTREAM_STATE_DIR", PROJECT_ROOT / ".lakestream"))
#: Caches shared by every project and run of this user (the local JVM's class-data archives):
#: ``$XDG_CACHE_HOME/lakestream``, else ``~/.cache/lakestream``.
CACHE_DIR: Path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lakestream"


class MissingBuildError(LakestreamError, RuntimeError):
    """A jar that the Maven build produces is not there."""

    names_command = False


def require_jvm_build() -> None:
    """Fail early with the fix when the Maven build has not been run."""
    missing = [p for p in (LAKESTREAM_JAR, FLINK_LIB_DIR, KAFKA_LIB_DIR) if not p.exists()]
    if missing:
        names = ", ".join(str(p.relative_to(PROJECT_ROOT)) for p in missing)
        raise MissingBuildError(
            f"missing JVM build outputs: {names}. Run `make jvm` (or `mvn -q -f jvm/pom.xml package`)."
        )


def require_s3_plugin() -> Path:
    """The S3 plugin's folder, or the fix when the Maven build has not put its jar there."""
    if not any(S3_PLUGIN_DIR.glob("flink-s3-fs-presto-*.jar")):
        raise MissingBuildError(
            f"flink.checkpoint_dir is on S3 but Flink's S3 plugin is missing from {S3_PLUGIN_DIR}. "
            "Run `make jvm` (or `mvn -q -f jvm/pom.xml package`)."
        )
    return S3_PLUGIN_DIR


def flink_jars() -> list[Path]:
    """Jars a job graph needs on its pipeline classpath: ours plus the connectors."""
    require_jvm_build()
    return [LAKESTREAM_JAR, *sorted(FLINK_LIB_DIR.glob("*.jar"))]
