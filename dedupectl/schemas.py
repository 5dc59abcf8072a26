"""Values in the Confluent wire format: their writer schemas (from a Schema Registry or local files) and
their decoding, for ``value_format`` ``avro`` and ``protobuf``.

The wire format, as Confluent's serializers write it:

    byte 0       magic byte, 0
    bytes 1-4    the writer schema's id, big-endian unsigned
    (protobuf)   the message indexes: zigzag varints, a count then the path of the message in the schema's
                 file (a lone 0 for its first message), read with confluent-kafka's own reader
    the rest     the payload: Avro binary (fastavro) or a Protobuf message (protobuf's message classes)

A value is read as far as its id needs (``WireDecoder.check`` and ``decode``): the header and a known schema
id always; the payload only when the id is in it. An Avro record's fields follow one another in the writer
schema's order, so its id is read with the writer schema cut after the id's field (in each inline record on
the pointer's path): the fields before it are decoded, the rest of the value, passed on as its bytes are, is
not read. A Protobuf message, whose fields come in any order, is parsed whole.

A schema comes from ``SchemaSource.files`` first (their bytes travel with the source, so Spark executors
need no copy of the files), else from the registry, fetched once per schema id per process. A registry
that does not answer (connection refused, a timeout, a 5xx) is a transient fault: retried with backoff for
``retry_for`` seconds, then ``SchemaRegistryUnavailableError``; never a reason to dead-letter a record.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dedupectl.errors import ConfigError, SchemaRegistryUnavailableError

log = logging.getLogger(__name__)

SCHEMA_FORMATS = ("avro", "protobuf")
WIRE_HEADER = struct.Struct(">bI")  # magic byte, schema id
MAGIC_BYTE = 0
UNKNOWN_SCHEMA_CODE = 40403  # the registry's error code for a schema id it does not hold
SECRET_SETTINGS = ("basic.auth.user.info", "ssl.key.password", "bearer.auth.token", "bearer.auth.client.secret")
MISSING = object()  # a field the decoded value does not have


class UndecodableValue(Exception):
    """The value is not in the wire format, or its payload does not decode with its writer schema."""


class UnknownSchema(Exception):
    """Neither the schema files nor the registry hold the value's schema id."""


@dataclass(frozen=True)
class SchemaSource:
    """Where writer schemas come from: files (schema id to their bytes) and/or a registry. Plain values, so it
    hashes (one decoder per source per process) and pickles (to Spark executors)."""

    value_format: str  # avro or protobuf
    files: tuple[tuple[int, str, bytes], ...] = ()  # (schema id, file name, its bytes)
    registry_url: str | None = None
    registry_settings: tuple[tuple[str, str], ...] = ()  # the registry client's settings, as key=value
    retry_for: float = 300.0  # seconds an unanswering registry is retried

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view with secrets redacted."""
        settings = {key: "***" if key in SECRET_SETTINGS else value for key, value in self.registry_settings}
        return {
            "value_format": self.value_format,
            "schema_files": {str(schema_id): name for schema_id, name, _ in self.files},
            "schema_registry": self.registry_url,
            "schema_registry_settings": settings,
        }


def schema_source(
    value_format: str,
    files: dict[int, str] | None,
    registry_url: str | None,
    registry_settings: dict[str, str] | None,
    retry_for: float,
) -> SchemaSource | None:
    """The source for ``value_format``, its files read and parsed now (a bad one is a ConfigError, exit 2);
    None for the formats without schemas."""
    if value_format not in SCHEMA_FORMATS:
        if files or registry_url:
            raise ConfigError(
                f"schema files or a schema registry are given, but value_format is {value_format!r}",
                "set --value-format avro or protobuf, or drop --schema-file / --schema-registry",
            )
        return None
    if not files and not registry_url:
        raise ConfigError(
            f"value_format {value_format} needs writer schemas, and none are given",
            "pass --schema-registry URL or --schema-file ID=PATH",
        )
    loaded = []
    for schema_id, path in sorted((files or {}).items()):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            raise ConfigError(f"cannot read schema file {path}: {error.strerror}", "check --schema-file") from None
        _parse_file(value_format, path, data)
        loaded.append((schema_id, str(path), data))
    return SchemaSource(
        value_format,
        tuple(loaded),
        registry_url or None,
        tuple(sorted((registry_settings or {}).items())),
        retry_for,
    )


def _parse_file(value_format: str, name: str, data: bytes):
    """The writer schema in a file: an Avro schema (.avsc, JSON) or a FileDescriptorSet (``protoc
    --include_imports --descriptor_set_out``) whose last file is the schema's; ConfigError when it is neither."""
    if value_format == "avro":
        import fastavro

        try:
            return _AvroSchema(json.loads(data))
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as error:
            raise ConfigError(f"schema file {name} is not an Avro schema: {error}", "give an .avsc file") from None
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
        if not files.file:
            raise DecodeError("no file in the set")
        pool = descriptor_pool.DescriptorPool()
        for proto in files.file:
            pool.Add(proto)
        schema = pool.FindFileByName(files.file[-1].name)
    except (DecodeError, TypeError, KeyError, ValueError) as error:
        raise ConfigError(
            f"schema file {name} is not a Protobuf FileDescriptorSet: {error}",
            "write one with protoc --include_imports --descriptor_set_out=FILE.desc schema.proto",
        ) from None
    if not schema.message_types_by_name:
        raise ConfigError(
            f"schema file {name}: {schema.name} (the set's last file, the schema's) declares no message",
            "list the .proto that declares the message last on protoc's command line",
        )
    return _ProtobufSchema(schema)


class _AvroSchema:
    """A writer schema, read as far as an id's field: cut after it (``avro_prefix``), once per id path."""

    def __init__(self, schema, references: dict | None = None) -> None:
        import fastavro

        self._schema, self._references = schema, references or {}
        fastavro.parse_schema(schema, named_schemas=dict(self._references))  # one that does not parse is refused
        self._read = fastavro.schemaless_reader
        self._cut: dict[tuple[str, ...], Any] = {}

    def cut(self, tokens: tuple[str, ...]):
        """The parsed schema cut after the field at ``tokens``."""
        return self._cut.get(tokens) or self._cut_after(tokens)

    def decode(self, value: bytes, tokens: tuple[str, ...]):
        """The record after the wire header, its fields up to the one at ``tokens``."""
        schema = self.cut(tokens)
        stream = io.BytesIO(value)
        stream.seek(WIRE_HEADER.size)
        try:
            return self._read(stream, schema, None)
        except Exception as error:  # fastavro raises EOFError, ValueError, UnicodeDecodeError, IndexError…
            raise UndecodableValue(f"not Avro of its writer schema: {type(error).__name__}: {error}") from None

    def _cut_after(self, tokens: tuple[str, ...]):
        import fastavro

        cut = avro_prefix(self._schema, tokens)
        self._cut[tokens] = parsed = fastavro.parse_schema(cut, named_schemas=dict(self._references))
        return parsed


def avro_prefix(schema, tokens: tuple[str, ...]):
    """``schema`` cut after the field at ``tokens``: in each inline record on the path (a union's too), the
    fields after the path's are dropped, and a record without the path's field keeps none. What a cut part
    defines, nothing kept can use: Avro names a type before any use of it. Maps, arrays and named references
    on the path are kept whole."""
    if isinstance(schema, list):
        return [avro_prefix(branch, tokens) for branch in schema]
    if not tokens or not isinstance(schema, dict) or schema.get("type") != "record":
        return schema
    fields = schema["fields"]
    for index, field in enumerate(fields):
        if field["name"] == tokens[0]:
            kept = {**field, "type": avro_prefix(field["type"], tokens[1:])}
            return {**schema, "fields": [*fields[:index], kept]}
    return {**schema, "fields": []}


class _ProtobufSchema:
    def __init__(self, file) -> None:
        self._file = file
        self._classes: dict[tuple[int, ...], Any] = {}

    def decode(self, value: bytes, tokens: tuple[str, ...]):
        """The whole message after the wire header: its fields come in any order, so ``tokens`` cannot cut it."""
        from confluent_kafka.schema_registry.common.serde import SchemaId
        from google.protobuf.message import DecodeError

        stream = io.BytesIO(value)
        stream.seek(WIRE_HEADER.size)
        try:
            indexes = tuple(SchemaId._read_index_array(stream, zigzag=True))
        except Exception as error:  # EOFError, SerializationError
            raise UndecodableValue(f"bad Protobuf message indexes: {error}") from None
        message_class = self._classes.get(indexes) or self._message_class(indexes)
        message = message_class()
        try:
            message.ParseFromString(stream.read())
        except DecodeError as error:
            raise UndecodableValue(f"not a {message.DESCRIPTOR.full_name}: {error}") from None
        return message

    def _message_class(self, indexes: tuple[int, ...]):
        from google.protobuf.message_factory import GetMessageClass

        try:
            descriptor = self._file.message_types_by_name[list(self._file.message_types_by_name)[indexes[0]]]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
        except IndexError:
            raise UndecodableValue(f"message indexes {list(indexes)} name no message of {self._file.name}") from None
        self._classes[indexes] = found = GetMessageClass(descriptor)
        return found


class WireDecoder:
    """Decodes values of one ``SchemaSource``, each writer schema fetched and parsed once per process."""

    def __init__(self, source: SchemaSource) -> None:
        self.source = source
        self._schemas: dict[int, Any] = {
            schema_id: _parse_file(source.value_format, name, data) for schema_id, name, data in source.files
        }
        self._client = None
        self.registry_calls = 0  # schema fetches this process made

    def check(self, value: bytes | None) -> None:
        """The value's wire-format header and that its schema id is known; its payload is not read (a record
        whose id is in its key or a header). ``UndecodableValue`` or ``UnknownSchema`` otherwise."""
        schema = self._schema_of(value)
        if isinstance(schema, _Unknown):
            raise UnknownSchema(schema.detail)

    def decode(self, value: bytes | None, tokens: tuple[str, ...]):
        """The value's record as far as the field at ``tokens`` (a dict for Avro, a message for Protobuf);
        ``UndecodableValue`` or ``UnknownSchema`` when it has none."""
        return self._schema_of(value).decode(value, tokens)

    def avro_fields(self, values: Sequence[bytes | None], tokens: tuple[str, ...]) -> list:
        """Each value's field at ``tokens``, for a batch of Avro values whose ids are in them: ``decode`` and
        ``field_at`` in one loop, without a call per layer. None or ``MISSING`` wherever that read is not plain
        (not the wire format, a schema not fetched yet, a payload that does not decode, no such field, a record
        that is not an object): ``decode`` then says why, one value at a time."""
        if self.source.value_format != "avro":
            return [None] * len(values)
        import fastavro

        read, unpack, new_stream = fastavro.schemaless_reader, WIRE_HEADER.unpack_from, io.BytesIO
        (token,) = tokens if len(tokens) == 1 else (None,)
        fields: list = []
        append = fields.append
        known_id, cut = None, None
        for value in values:
            try:
                magic, schema_id = unpack(value)
                if magic != MAGIC_BYTE:
                    append(None)
                    continue
                if schema_id != known_id:
                    schema = self._schemas.get(schema_id)
                    if not isinstance(schema, _AvroSchema):
                        append(None)
                        continue
                    known_id, cut = schema_id, schema.cut(tokens)
                stream = new_stream(value)
                stream.seek(WIRE_HEADER.size)
                record = read(stream, cut, None)
                append(record.get(token) if token is not None else field_at(record, tokens))
            except Exception:  # the value's fault, not the loop's: decode names it
                append(None)
        return fields

    def _schema_of(self, value: bytes | None):
        if value is None:
            raise UndecodableValue("value is null")
        if len(value) < WIRE_HEADER.size or value[0] != MAGIC_BYTE:
            what = f"magic byte {value[0]}" if value else "an empty value"
            raise UndecodableValue(f"not the Confluent wire format ({what}, not 0 and a schema id)")
        _, schema_id = WIRE_HEADER.unpack_from(value)
        return self._schemas.get(schema_id) or self._fetch(schema_id)

    def _fetch(self, schema_id: int):
        if self.source.registry_url is None:
            raise UnknownSchema(f"schema id {schema_id} is in no --schema-file")
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        from reconcile.broker_retry import RetryPolicy, with_retries

        what = f"schema registry {self.source.registry_url}: fetching schema id {schema_id}"
        policy = RetryPolicy(
            bound_s=self.source.retry_for,
            advice="check the schema registry and the network; a restart resumes where the worker stopped",
        )
        try:
            schema = with_retries(
                lambda: self._registry_schema(schema_id),
                what,
                policy,
                transient=_registry_transient,
                service="the schema registry",
                error=SchemaRegistryUnavailableError,
            )
        except SchemaRegistryError as error:
            if error.error_code == UNKNOWN_SCHEMA_CODE:
                self._schemas[schema_id] = _Unknown(schema_id, self.source.registry_url)
                return self._schemas[schema_id]
            if error.http_status_code in (401, 403):
                raise ConfigError(
                    f"schema registry {self.source.registry_url} refused the credentials ({error.error_message})",
                    "check --schema-registry-setting basic.auth.user.info",
                ) from None
            raise ConfigError(f"{what}: {error.error_message} (HTTP {error.http_status_code})") from None
        self._schemas[schema_id] = schema
        return schema

    def _registry_schema(self, schema_id: int):
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            # the client's own retries are off: with_retries is the one bound and the one log line per retry
            settings = {"max.retries": 0, **dict(self.source.registry_settings), "url": self.source.registry_url}
            self._client = SchemaRegistryClient(settings)
        self.registry_calls += 1
        if self.source.value_format == "avro":
            return _registry_avro(self._client, schema_id)
        return _registry_protobuf(self._client, schema_id)


class _Unknown:
    """A schema id the registry said it does not hold: asked once, each of its records a dead letter."""

    def __init__(self, schema_id: int, url: str) -> None:
        self.detail = f"schema id {schema_id} is not in the schema registry {url}"

    def decode(self, value: bytes, tokens: tuple[str, ...]):
        raise UnknownSchema(self.detail)


def _registry_avro(client, schema_id: int) -> _AvroSchema:
    import fastavro

    schema = client.get_schema(schema_id)
    named: dict = {}
    for reference in schema.references or ():  # named types another subject defines
        referenced = client.get_version(reference.subject, reference.version).schema
        fastavro.parse_schema(json.loads(referenced.schema_str), named_schemas=named)
    return _AvroSchema(json.loads(schema.schema_str), named)


def _registry_protobuf(client, schema_id: int) -> _ProtobufSchema:
    from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
    from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto
    from google.protobuf.descriptor_pool import DescriptorPool

    schema = client.get_schema(schema_id, fmt="serialized")  # a FileDescriptorProto: no .proto parser needed
    pool = DescriptorPool()
    _init_pool(pool)
    _resolve_named_schema(schema, client, pool)
    proto = _str_to_proto(f"schema-{schema_id}.proto", schema.schema_str)
    pool.Add(proto)
    return _ProtobufSchema(pool.FindFileByName(proto.name))


def _registry_transient(error: BaseException) -> bool:
    """No answer, a timeout or a server error: the registry may come back. A 4xx will not change by itself."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx  # httpx or httpx2, as the client uses
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(error, SchemaRegistryError):
        return error.http_status_code >= 500 or error.http_status_code in (408, 429)
    return isinstance(error, httpx.TransportError | OSError)


@lru_cache(maxsize=8)
def decoder_for(source: SchemaSource) -> WireDecoder:
    """The process's decoder for ``source``: its schema cache is shared by every batch, plan and UDF call."""
    return WireDecoder(source)


def pointer_tokens(id_field: str) -> tuple[str, ...]:
    """``id_field`` as the path of names to follow: one name, or a JSON Pointer's unescaped tokens."""
    if not id_field.startswith("/"):
        return (id_field,)
    return tuple(token.replace("~1", "/").replace("~0", "~") for token in id_field[1:].split("/"))


def field_at(record, tokens: tuple[str, ...]):
    """The value at ``tokens`` in a decoded Avro record (dicts, lists) or Protobuf message; ``MISSING`` when
    there is none (no such field, an unset field with presence, a null)."""
    found = record
    for token in tokens:
        if isinstance(found, dict):
            found = found.get(token, MISSING)
        elif isinstance(found, list | tuple) or _is_repeated(found):
            found = found[int(token)] if token.isdigit() and int(token) < len(found) else MISSING
        elif hasattr(found, "DESCRIPTOR"):
            found = _message_field(found, token)
        else:
            return MISSING
        if found is MISSING or found is None:
            return MISSING
    return found


def _is_repeated(value) -> bool:
    from collections.abc import Sequence

    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _message_field(message, name: str):
    descriptor = message.DESCRIPTOR
    field = descriptor.fields_by_name.get(name) or descriptor.fields_by_camelcase_name.get(name)
    if field is None:
        return MISSING
    if field.has_presence and not message.HasField(field.name):
        return MISSING
    return getattr(message, field.name)
