"""Benchmark-only dependencies: check them up front and name the exact command that installs them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from lakestream import paths

#: import name -> why the benchmark needs it
MODULES = {
    "psutil": "peak RSS of the JVM and Python worker process trees",
    "confluent_kafka": "fast producer + the librdkafka consume baseline",
    "pyspark": "the Spark Structured Streaming baseline",
    "delta": "delta-spark (MERGE into Delta from Spark)",
}
SPARK_LIB_DIR = paths.PROJECT_ROOT / "jvm" / "target" / "lib" / "spark"


class BenchSetupError(RuntimeError):
    """A benchmark dependency is missing; the message is the command that installs it."""


def pip_command() -> str:
    """The exact install command for the ``bench`` extra into the running interpreter's venv."""
    return f"{sys.executable} -m pip install -c requirements-lock.txt -e '.[bench]'"


def check(*, spark: bool) -> None:
    """Fail with the install commands when something the selected measurements need is missing."""
    missing = [
        m for m in MODULES if (spark or m not in ("pyspark", "delta")) and importlib.util.find_spec(m) is None
    ]
    if missing:
        raise BenchSetupError(
            f"missing benchmark modules {missing} ({', '.join(MODULES[m] for m in missing)}): run "
            f"`{pip_command()}` (or `make bench`, which does)"
        )
    if spark and not spark_jars():
        raise BenchSetupError(
            f"no Spark connector jars in {SPARK_LIB_DIR}: run "
            "`mvn -q -B -f jvm/pom.xml -Pspark-bench package` "
            "(or pass --skip-spark)"
        )


def spark_jars() -> list[Path]:
    """spark-sql-kafka, its kafka deps and delta-spark, as copied by the ``spark-bench`` Maven profile."""
    return sorted(SPARK_LIB_DIR.glob("*.jar")) if SPARK_LIB_DIR.is_dir() else []
