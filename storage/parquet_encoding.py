"""How lakestream's writers encode Parquet: a dictionary only for columns of a small closed set of values,
and bloom filters for the columns rows are looked up by.

A Parquet writer dictionary-encodes every column by default. Most columns here never repeat (event ids,
timestamps, amounts, raw payloads), so that is hashing for nothing and a dictionary page per chunk;
columns of a small closed set (``lakestream.standard.CLOSED_SET_COLUMNS``: statuses, kinds, sources,
topics) keep it. Compression stays snappy. Every writer of a sink's files uses it: the stager's appends,
the committer's MERGEs and changes files, merge-on-read folds, OPTIMIZE / Z-order rewrites.

Bloom filters (``tables.bloom_filter_columns``, default ``order_id``) let a reader skip every row group
that cannot hold a looked-up value (``explain order`` finds one order among tens of millions of events
whose ids look random, which no min/max statistics prune). pyarrow writes none, so the files delta-rs
writes carry them: MERGEs, folds and OPTIMIZE; a sink's appended files get them when compacted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from deltalake import BloomFilterProperties, ColumnProperties, WriterProperties

from lakestream.standard import CLOSED_SET_COLUMNS

COMPRESSION = "snappy"
#: Rows per row group of files with bloom filters, and the distinct values each filter is sized for
#: (false positives 1 %: about 160 kB per filter).
BLOOM_ROW_GROUP_ROWS = 131_072
BLOOM_FPP = 0.01
#: The same codec as delta-rs spells it.
DELTA_COMPRESSION: Literal["SNAPPY"] = "SNAPPY"
assert DELTA_COMPRESSION.lower() == COMPRESSION


def dictionary_columns(columns: Iterable[str]) -> list[str]:
    """Which of a file's ``columns`` to dictionary-encode, in their order."""
    return [name for name in columns if name in CLOSED_SET_COLUMNS]


def pyarrow_options(columns: Iterable[str]) -> dict[str, Any]:
    """Keyword arguments of ``pyarrow.parquet.ParquetWriter`` / ``write_table`` for a file of ``columns``."""
    return {"compression": COMPRESSION, "use_dictionary": dictionary_columns(columns)}


def writer_properties(columns: Iterable[str], *, bloom_filters: Iterable[str] = ()) -> WriterProperties:
    """delta-rs ``WriterProperties`` for the files a MERGE, write or OPTIMIZE writes with ``columns``, with
    a bloom filter for each of ``bloom_filters`` among them (and row groups sized for the filters)."""
    names = list(columns)
    properties = {name: ColumnProperties(dictionary_enabled=True) for name in dictionary_columns(names)}
    bloom = [name for name in bloom_filters if name in names]
    for name in bloom:
        properties[name] = ColumnProperties(
            dictionary_enabled=name in properties,
            bloom_filter_properties=BloomFilterProperties(
                set_bloom_filter_enabled=True, fpp=BLOOM_FPP, ndv=BLOOM_ROW_GROUP_ROWS
            ),
        )
    return WriterProperties(
        compression=DELTA_COMPRESSION,
        max_row_group_size=BLOOM_ROW_GROUP_ROWS if bloom else None,
        default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties=properties,
    )
