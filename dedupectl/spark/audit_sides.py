"""What ``dedupectl audit`` compares: each side a topic of the worker's configuration, or archived files.

With both sides in files no Kafka is involved, and the rules for valid ids come from the flags alone
(``value_format`` json and ``id_field`` messageId unless given). With one side in files, the other side's
topic, the Kafka connection and the id rules come from the worker's configuration as for any command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedupectl.config import DEFAULT_BROKER_RETRY_FOR, KafkaConfig, resolve_worker_config
from dedupectl.errors import ConfigError
from dedupectl.messages import id_field_problem
from dedupectl.schemas import SchemaSource, schema_source
from dedupectl.spark.sources import FILE_FORMATS, FileSource, Source, TopicSource

# The worker's configuration names both topics. A side read from files has none: it gets a name no topic can
# have (Kafka allows letters, digits, '.', '_' and '-'), so the configuration is complete and nothing reads it.
_NO_TOPIC = {"input_topic": "<input files>", "output_topic": "<output files>"}


@dataclass(frozen=True)
class AuditSides:
    input: Source
    output: Source
    kafka: KafkaConfig | None  # None: both sides are files
    value_format: str
    id_field: str
    id_header: str | None = None
    schemas: SchemaSource | None = None  # writer schemas, for value_format avro and protobuf


def audit_sides(
    config_file: Path | None,
    flags: Mapping[str, Any],
    *,
    input_files: str | None = None,
    output_files: str | None = None,
    files_format: str = "auto",
    env: Mapping[str, str] | None = None,
) -> AuditSides:
    """The two sides and the id rules; ``flags`` are the worker's configuration flags (``input_topic``,
    ``output_topic``, ``value_format``, ``id_field``, ``bootstrap_servers``, ``kafka``…)."""
    if files_format not in FILE_FORMATS:
        raise ConfigError(f"--files-format must be one of {', '.join(FILE_FORMATS)}, got {files_format!r}")
    if input_files and output_files:
        problem = id_field_problem(flags.get("id_field") or "messageId")
        if problem:  # no worker configuration is resolved here to say it
            raise ConfigError(f"--id-field {problem}")
        return AuditSides(
            input=FileSource(input_files, files_format),
            output=FileSource(output_files, files_format),
            kafka=None,
            value_format=flags.get("value_format") or "json",
            id_field=flags.get("id_field") or "messageId",
            id_header=flags.get("id_header"),
            schemas=schema_source(
                flags.get("value_format") or "json",
                flags.get("schema_files"),
                flags.get("schema_registry_url"),
                flags.get("schema_registry_settings"),
                DEFAULT_BROKER_RETRY_FOR,
            ),
        )
    read_from_files = {"input_topic": input_files, "output_topic": output_files}
    no_topics = {name: _NO_TOPIC[name] for name, files in read_from_files.items() if files}
    worker = resolve_worker_config(config_file, env=env, flags={**flags, **no_topics})
    return AuditSides(
        input=FileSource(input_files, files_format) if input_files else TopicSource(worker.input_topic),
        output=FileSource(output_files, files_format) if output_files else TopicSource(worker.output_topic),
        kafka=worker.kafka,
        value_format=worker.value_format,
        id_field=worker.id_field,
        id_header=worker.id_header,
        schemas=worker.schemas,
    )
