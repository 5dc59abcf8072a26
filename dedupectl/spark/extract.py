"""Which message id a record carries, computed on Spark executors with the worker's own rules.

An input record's id is what ``dedupectl.messages.extract_id`` says, exactly: the audit's idea of a valid id
must be the worker's, or it would report every dead letter as a loss. With ``value_format = "json"`` that
takes a JSON parse per record, so it runs as a Python UDF (the one Python step of the audit); with
``"raw"`` the id is the key and Spark computes it natively.

These functions are pickled by reference: executors import this module, so dedupectl must be installed in
the executors' Python (see docs/spark-cluster.md).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from dedupectl.errors import ConfigError
from dedupectl.messages import DeadLetter, DeadLetterReason, extract_id
from store.codec import MAX_ID_BYTES


def _id_or_none(value_format: str, id_field: str):
    def extract(key: bytes | None, value: bytes | None) -> bytes | None:
        try:
            return extract_id(key, value, value_format, id_field)
        except DeadLetter:
            return None

    return extract


def _reason(value_format: str, id_field: str):
    def reason(key: bytes | None, value: bytes | None) -> str | None:
        try:
            extract_id(key, value, value_format, id_field)
        except DeadLetter as dead:
            return dead.reason.value
        return None

    return reason


def input_id(key: Column, value: Column, value_format: str, id_field: str) -> Column:
    """The record's messageId (binary), or null where the worker would dead-letter it."""
    if value_format == "raw":
        return F.when((F.length(key) > 0) & (F.length(key) <= MAX_ID_BYTES), key)
    return F.udf(_id_or_none(value_format, id_field), BinaryType(), useArrow=False)(key, value)


def dead_letter_reason(key: Column, value: Column, value_format: str, id_field: str) -> Column:
    """Why the worker would dead-letter the record (apply only to records whose ``input_id`` is null)."""
    if value_format == "raw":
        return F.when(F.length(key) > MAX_ID_BYTES, F.lit(DeadLetterReason.ID_TOO_LONG.value)).otherwise(
            F.lit(DeadLetterReason.MISSING_ID.value)
        )
    return F.udf(_reason(value_format, id_field), StringType(), useArrow=False)(key, value)


def output_id(key: Column) -> Column:
    """An output record's id is its key (the worker writes it so); null when it has none."""
    return F.when(F.length(key) > 0, key)


def refuse_header_ids(command: str, id_header: str | None) -> None:
    """The Spark jobs read ids from the key and the value only: with ``id_header`` they would read other ids
    than the worker's, so they refuse instead."""
    if id_header is not None:
        raise ConfigError(
            f"{command} cannot read ids from record headers, and the worker takes them from the {id_header!r} header",
            "trace single ids with dedupectl trace, which reads headers",
        )
