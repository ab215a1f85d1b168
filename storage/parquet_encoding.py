"""How lakestream's writers encode Parquet: a dictionary only for columns of a small closed set of values.

A Parquet writer dictionary-encodes every column by default. Most columns here never repeat (event ids,
timestamps, amounts, raw payloads), so that is hashing for nothing and a dictionary page per chunk;
columns of a small closed set (``lakestream.standard.CLOSED_SET_COLUMNS``: statuses, kinds, sources,
topics) keep it. Compression stays snappy. Every writer of a sink's files uses it: the stager's appends,
the committer's MERGEs and changes files, merge-on-read folds, OPTIMIZE / Z-order rewrites.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from deltalake import ColumnProperties, WriterProperties

from lakestream.standard import CLOSED_SET_COLUMNS

COMPRESSION = "snappy"
#: The same codec as delta-rs spells it.
DELTA_COMPRESSION: Literal["SNAPPY"] = "SNAPPY"
assert DELTA_COMPRESSION.lower() == COMPRESSION


def dictionary_columns(columns: Iterable[str]) -> list[str]:
    """Which of a file's ``columns`` to dictionary-encode, in their order."""
    return [name for name in columns if name in CLOSED_SET_COLUMNS]


def pyarrow_options(columns: Iterable[str]) -> dict[str, Any]:
    """Keyword arguments of ``pyarrow.parquet.ParquetWriter`` / ``write_table`` for a file of ``columns``."""
    return {"compression": COMPRESSION, "use_dictionary": dictionary_columns(columns)}


def writer_properties(columns: Iterable[str]) -> WriterProperties:
    """delta-rs ``WriterProperties`` for the files a MERGE, write or OPTIMIZE writes with ``columns``."""
    return WriterProperties(
        compression=DELTA_COMPRESSION,
        default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={
            name: ColumnProperties(dictionary_enabled=True) for name in dictionary_columns(columns)
        },
    )
