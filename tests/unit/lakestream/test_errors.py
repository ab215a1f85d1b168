"""The one error root: every product exception is a LakestreamError, and each says how it ends a command."""

from __future__ import annotations

import importlib
import pickle
from types import ModuleType

import pytest

from batch.backfill import RangeError, StagingCheckError
from devtools.kafka_broker import KafkaBrokerError, KafkaJarsMissingError
from devtools.s3_server import S3JarsMissingError, S3RequestError, S3ServerError
from flink_jobs.lifecycle import JobFailedError
from lakestream.adapters import UnknownAdapterError
from lakestream.config import ConfigError
from lakestream.errors import BAD_INPUT, FAILED, LakestreamError, exit_status
from lakestream.gold import GmvOverflowError, GoldTableError
from lakestream.paths import MissingBuildError
from lakestream.progress import ResumeError
from lakestream.time import TimeArgError
from maintenance.maintenance_errors import ConflictError, MaintenanceError, PredicateError, TableMissingError
from runtime.cluster_slots import InsufficientSlotsError
from runtime.flink_env import FlinkRuntimeError, JavaNotFoundError
from serving.gold_read import GoldMissingError
from serving.metrics_view import GoldDataError
from serving.table_summary import TimeTravelError
from sinks.sink_errors import DeltaSinkError, MarkerOrderError, TableSchemaError
from sources.source_errors import DeltaSourceError, SourceOptionsError, StartingPointError
from storage.read_errors import DeltaReadError, UnsupportedTableError
from tests.unit.test_layers import modules

#: Exceptions used as control flow inside one module, never ending a command: outside the root on purpose.
OUTSIDE_THE_ROOT = {
    "demo.run_demo.DemoInterrupted",  # the demo's own Ctrl-C handling
    "lakestream.adapters.parsing.FieldError",  # a quarantined record's reject reason
    "serving.serve.BadRequest",  # an HTTP 400 answer
}
#: Modules that act on import (a Python worker's start-up, ``python -m cli``).
NOT_IMPORTED = ("__main__", "sitecustomize")


def exceptions_in(module: ModuleType) -> dict[str, type[BaseException]]:
    """The exception classes ``module`` defines, by qualified name."""
    return {
        f"{module.__name__}.{name}": value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }


def outside_the_root(found: dict[str, type[BaseException]]) -> set[str]:
    return {name for name, cls in found.items() if not issubclass(cls, LakestreamError)}


def product_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in sorted(modules()):
        if name.rpartition(".")[2] not in NOT_IMPORTED:
            found |= exceptions_in(importlib.import_module(name))
    return found


def test_every_product_exception_derives_from_the_root() -> None:
    found = product_exceptions()
    assert len(found) > 50, "the walk over the product modules found too few exception classes"
    assert outside_the_root(found) == OUTSIDE_THE_ROOT


def test_a_class_without_the_root_is_found() -> None:
    probe = ModuleType("probe")
    exec(
        "from lakestream.errors import LakestreamError\n"
        "class Rooted(LakestreamError, ValueError): pass\n"
        "class Lost(ValueError): pass\n",
        probe.__dict__,
    )
    assert outside_the_root(exceptions_in(probe)) == {"probe.Lost"}


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (
            ConfigError("flink.paralelism: unknown"),
            2,
            "lakestream: configuration error: flink.paralelism: unknown",
        ),
        (FlinkRuntimeError("no java"), 2, "lakestream: no java"),
        (JavaNotFoundError("java 11 found"), 2, "lakestream: java 11 found"),
        (InsufficientSlotsError("2 slots free"), 2, "lakestream: 2 slots free"),
        (MissingBuildError("run make jvm"), 2, "lakestream: run make jvm"),
        (KafkaBrokerError("broker down"), 2, "lakestream: broker down"),
        (KafkaJarsMissingError("run make jvm"), 2, "lakestream: run make jvm"),
        (S3ServerError("server down"), 2, "lakestream: server down"),
        (S3JarsMissingError("run make jvm"), 2, "lakestream: run make jvm"),
        (S3RequestError("SIGNATURE_DOES_NOT_MATCH"), 2, "lakestream: SIGNATURE_DOES_NOT_MATCH"),
        (DeltaSourceError("not a Delta table"), 2, "lakestream ingest: not a Delta table"),
        (StartingPointError("version 9 is past the end"), 2, "lakestream ingest: version 9 is past the end"),
        (UnsupportedTableError("deletion vectors"), 2, "lakestream ingest: deletion vectors"),
        (ResumeError("topic t was re-created"), 2, "lakestream ingest: topic t was re-created"),
        (TimeArgError("--from: not a time"), 2, "lakestream ingest: --from: not a time"),
        (ConflictError("lost 5 races"), 1, "lakestream ingest: lost 5 races"),
        (StagingCheckError("3 rows differ"), 1, "lakestream ingest: 3 rows differ"),
        (GmvOverflowError("gmv too large"), 1, "lakestream ingest: gmv too large"),
        (GoldTableError("other columns"), 2, "lakestream ingest: other columns"),
        (MaintenanceError("cannot vacuum"), 2, "lakestream ingest: cannot vacuum"),
        (TableMissingError("no table"), 2, "lakestream ingest: no table"),
        (RangeError("--to before --from"), 2, "lakestream ingest: --to before --from"),
        (GoldMissingError("no gold yet"), 2, "lakestream ingest: no gold yet"),
        (TimeTravelError("version 3 is gone"), 2, "lakestream ingest: version 3 is gone"),
        (
            GoldDataError("two realtime rows"),
            1,
            "lakestream ingest: the gold table breaks its contract: two realtime rows",
        ),
        (
            JobFailedError("DataLossError: version 3"),
            1,
            "lakestream ingest: job failed: DataLossError: version 3",
        ),
        (MarkerOrderError("write before OPEN"), 1, "lakestream ingest: write before OPEN"),
        (TableSchemaError("other schema"), 2, "lakestream ingest: other schema"),
        (UnknownAdapterError("no adapter 'x'"), 2, "lakestream ingest: no adapter 'x'"),
    ],
)
def test_each_family_ends_a_command_with_its_code_and_message(
    error: Exception, code: int, message: str
) -> None:
    assert exit_status(error, "ingest") == (code, message)


@pytest.mark.parametrize("error", [KeyError("a bug"), ValueError("a bug"), RuntimeError("a bug")])
def test_foreign_exceptions_are_not_ours(error: Exception) -> None:
    assert exit_status(error, "ingest") is None


def test_the_codes_are_the_documented_ones() -> None:
    assert (BAD_INPUT, FAILED) == (2, 1)
    assert LakestreamError.exit_code == BAD_INPUT and DeltaSinkError.exit_code == FAILED


def test_the_secondary_bases_stay_for_their_catchers() -> None:
    assert issubclass(ConfigError, ValueError) and issubclass(TimeArgError, ValueError)
    assert issubclass(UnknownAdapterError, KeyError)
    assert issubclass(SourceOptionsError, ValueError) and issubclass(PredicateError, ValueError)
    assert issubclass(MaintenanceError, RuntimeError) and issubclass(KafkaJarsMissingError, MissingBuildError)
    assert issubclass(S3JarsMissingError, MissingBuildError)
    assert issubclass(StartingPointError, DeltaReadError) and issubclass(
        UnsupportedTableError, DeltaReadError
    )


def test_a_fix_ends_the_message() -> None:
    assert str(LakestreamError("the table is locked", fix="wait for the rewrite")) == (
        "the table is locked. Fix: wait for the rewrite"
    )
    error = MaintenanceError("the table is locked.", fix="wait for the rewrite")
    assert error.fix == "wait for the rewrite"
    assert exit_status(error, "maintain") == (
        2,
        "lakestream maintain: the table is locked. Fix: wait for the rewrite",
    )
    assert LakestreamError("plain").fix is None and str(LakestreamError("plain")) == "plain"


def test_an_error_with_a_fix_survives_pickling() -> None:
    again = pickle.loads(pickle.dumps(ConfigError("bad key", fix="remove it")))
    assert isinstance(again, ConfigError)
    assert str(again) == "bad key. Fix: remove it" and again.fix == "remove it"
