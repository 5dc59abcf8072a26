"""Which message id a record carries, computed on Spark executors with the worker's own rules.

An input record's id is what ``dedupectl.messages.extract_id`` says, exactly: the audit's idea of a valid id
must be the worker's, or it would report every dead letter as a loss. With ``value_format = "json"`` that
takes a JSON parse per record, so it runs as a Python UDF (the one Python step of the audit); with
``"raw"`` the id is the key and Spark computes it natively; with ``"avro"`` or ``"protobuf"`` every value is
decoded by the UDF with its writer schema. The schemas reach the executors inside ``SchemaSource``: schema
files as their bytes, read on the driver; a registry as its URL and settings, each Python worker fetching a
schema id once (the ids in a range are known only once it is read, and executors reach the registry as they
reach Kafka). With ``id_header`` the id is that header's value:
the records must be read with their headers (Spark's Kafka source, ``includeHeaders``).

These functions are pickled by reference: executors import this module, so dedupectl must be installed in
the executors' Python (see docs/spark-cluster.md).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from dedupectl.errors import ConfigError
from dedupectl.messages import DeadLetter, DeadLetterReason, extract_id
from dedupectl.schemas import SchemaSource
from store.codec import MAX_ID_BYTES


def _pairs(headers) -> list[tuple[str, bytes | None]] | None:
    """Spark's ``array<struct<key, value>>`` headers as the Kafka clients give them."""
    return None if headers is None else [(header["key"], header["value"]) for header in headers]


def _id_or_none(value_format: str, id_field: str, id_header: str | None, schemas: SchemaSource | None):
    def extract(key: bytes | None, value: bytes | None, headers=None) -> bytes | None:
        try:
            return extract_id(key, value, value_format, id_field, _pairs(headers), id_header, schemas)
        except DeadLetter:
            return None

    return extract


def _reason(value_format: str, id_field: str, id_header: str | None, schemas: SchemaSource | None):
    def reason(key: bytes | None, value: bytes | None, headers=None) -> str | None:
        try:
            extract_id(key, value, value_format, id_field, _pairs(headers), id_header, schemas)
        except DeadLetter as dead:
            return dead.reason.value
        return None

    return reason


def input_id(
    key: Column,
    value: Column,
    value_format: str,
    id_field: str,
    headers: Column | None = None,
    id_header: str | None = None,
    schemas: SchemaSource | None = None,
) -> Column:
    """The record's messageId (binary), or null where the worker would dead-letter it. ``headers``: the
    records' headers column, needed with ``id_header``; ``schemas``: with value_format avro or protobuf."""
    if id_header is not None:
        udf = F.udf(_id_or_none(value_format, id_field, id_header, schemas), BinaryType(), useArrow=False)
        return udf(key, value, _needed(headers))
    if value_format == "raw":
        return F.when((F.length(key) > 0) & (F.length(key) <= MAX_ID_BYTES), key)
    return F.udf(_id_or_none(value_format, id_field, None, schemas), BinaryType(), useArrow=False)(key, value)


def dead_letter_reason(
    key: Column,
    value: Column,
    value_format: str,
    id_field: str,
    headers: Column | None = None,
    id_header: str | None = None,
    schemas: SchemaSource | None = None,
) -> Column:
    """Why the worker would dead-letter the record (apply only to records whose ``input_id`` is null)."""
    if id_header is not None:
        udf = F.udf(_reason(value_format, id_field, id_header, schemas), StringType(), useArrow=False)
        return udf(key, value, _needed(headers))
    if value_format == "raw":
        return F.when(F.length(key) > MAX_ID_BYTES, F.lit(DeadLetterReason.ID_TOO_LONG.value)).otherwise(
            F.lit(DeadLetterReason.MISSING_ID.value)
        )
    return F.udf(_reason(value_format, id_field, None, schemas), StringType(), useArrow=False)(key, value)


def _needed(headers: Column | None) -> Column:
    if headers is None:  # a caller's mistake: without the headers every record would look id-less
        raise ValueError("ids from a header need the records' headers column")
    return headers


def output_id(key: Column) -> Column:
    """An output record's id is its key (the worker writes it so); null when it has none."""
    return F.when(F.length(key) > 0, key)


def refuse_header_ids_in_files(command: str, id_header: str | None) -> None:
    """Archived records carry no headers: with ``id_header`` their ids cannot be read as the worker's."""
    if id_header is not None:
        raise ConfigError(
            f"{command} cannot read ids from archived input files: the worker takes them from the {id_header!r} "
            "header, and archives keep no headers",
            "read the range from the input topic instead",
        )
