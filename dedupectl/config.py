"""Configuration, resolved in one place: defaults < TOML file < environment (``DEDUPECTL_…``) < flags.

File layout::

    bootstrap_servers = "broker-1:9092"
    input_topic = "events"
    output_topic = "events-deduped"
    data_dir = "/var/lib/dedupectl"

    [kafka]                      # any librdkafka setting, passed to every client
    "security.protocol" = "SASL_SSL"
    "sasl.password" = "…"        # secrets never appear in logs, errors or --json output

``timeout_s`` bounds every Kafka call (connecting, metadata, commits): an unreachable broker is reported after it.

Environment: ``DEDUPECTL_<FIELD>`` for a field, ``DEDUPECTL_KAFKA_<NAME>`` for a librdkafka setting
(``DEDUPECTL_KAFKA_SASL_PASSWORD`` → ``sasl.password``), ``DEDUPECTL_CONFIG`` for the file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from store.errors import ConfigError
from store.sizes import parse_duration

if TYPE_CHECKING:
    from dedupectl.schemas import SchemaSource
    from reconcile.kafka import KafkaConfig


def __getattr__(name: str) -> Any:
    # KafkaConfig's module loads confluent_kafka: imported on first use, so the CLI's --help never pays for it
    if name == "KafkaConfig":
        from reconcile.kafka import KafkaConfig

        return KafkaConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ENV_PREFIX = "DEDUPECTL_"
ENV_KAFKA_PREFIX = "DEDUPECTL_KAFKA_"
# Variables read elsewhere (scripts, the local broker's jars and version, the S3 endpoint, the tests), not
# configuration fields: everything else under DEDUPECTL_ must be a field, so a typo is an error, not a no-op.
ENV_RESERVED = frozenset(
    {
        "DEDUPECTL_CONFIG",
        "DEDUPECTL_CACHE_DIR",
        "DEDUPECTL_CRASHPOINT",
        "DEDUPECTL_VENV",
        "DEDUPECTL_S3_ENDPOINT_URL",
        "DEDUPECTL_LOG_FORMAT",
        "DEDUPECTL_DEV_KAFKA_VERSION",
        "DEDUPECTL_TEST_KAFKA_VERSION",
    }
)
DEFAULT_DATA_DIR = Path("dedupectl-data")
OBSERVER_SUFFIX = ".observe"  # of an observer's group and data directory, after the worker's
# The flag that sets a field, where it is not --<field with dashes>: errors name what the operator typed.
FIELD_FLAGS = {
    "input_topic": "--topic",
    "schema_registry_url": "--schema-registry",
    "schema_files": "--schema-file",
    "schema_registry_settings": "--schema-registry-setting",
}
# Tables of a config file that are not fields of their own: schema id to file, and the registry client's settings.
SCHEMA_TABLES = {"schema_files": "schema_files", "schema_registry": "schema_registry_settings"}


def flag_for(key: str) -> str:
    """The command-line flag that sets the config field ``key``."""
    return FIELD_FLAGS.get(key, "--" + key.replace("_", "-"))


# librdkafka settings the worker must own for exactly-once to hold.
KAFKA_KEYS_OWNED = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "group.instance.id",
        "transactional.id",
        "enable.idempotence",
        "acks",
        "isolation.level",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "transaction.timeout.ms",  # set from transaction_timeout_ms
        "session.timeout.ms",  # set from session_timeout_ms
    }
)

VALUE_FORMATS = ("json", "raw", "avro", "protobuf")
# the names of dedupectl.partitioner.PARTITIONERS, spelt out: resolving a config must not load numpy
PARTITIONER_CHOICES = ("auto", "murmur2", "crc32", "any")
MISROUTED_ACTIONS = ("publish", "dead-letter", "forward")


DEFAULT_MEMTABLE_BUDGET = 64 * 1024 * 1024
DEFAULT_BROKER_RETRY_FOR = 300.0
DEFAULT_STOP_TIMEOUT = 60.0  # below the 90 s grace period of the deployment files
MIN_MEMTABLE_BUDGET = 4 * 1024 * 1024
# The bound a partition's store is sized for when none is given: 10M ids take about 250 MB of disk and a 24 MB
# id filter (docs/reference/configuration.md); the effective-window alert says when it is too small.
DEFAULT_MAX_KEYS = 10_000_000
BOUND_BYTES_PER_ID = 25  # max_bytes to ids: a store at scale takes at most this many bytes per id


@dataclass(frozen=True)
class WorkerConfig:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str | None  # None only for an observer, which publishes nothing
    dead_letter_topic: str
    group_id: str
    data_dir: Path
    worker_id: str
    batch_max_messages: int = 20_000
    batch_max_bytes: int = 16 * 1024 * 1024
    batch_max_ms: int = 100
    value_format: str = "json"
    id_field: str = "messageId"  # a top-level name, or a JSON Pointer (/context/messageId) for a nested field
    id_header: str | None = None  # the id is this record header's value, and only it (dedupectl.messages)
    schemas: SchemaSource | None = None  # writer schemas, for value_format avro and protobuf (dedupectl.schemas)
    # what each keyed record's partition is checked against (dedupectl.worker.routing); any: not checked
    partitioner: str = "auto"
    # a record in the wrong partition: published as usual, a dead letter, or sent on to its partition's worker
    misrouted: str = "publish"
    duplicates_topic: str | None = None  # every dropped copy goes there, in its batch's transaction (None: off)
    # decide as a worker would, against a store and group of its own, and publish nothing (dedupectl.worker)
    observe: bool = False
    transaction_timeout_ms: int = 60_000
    session_timeout_ms: int = 10_000
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"
    # the bound: at most this many ids per partition (oldest go first); it sizes each store's id filter and
    # generations. Given max_bytes alone, max_bytes / BOUND_BYTES_PER_ID; given neither, DEFAULT_MAX_KEYS
    max_keys: int = DEFAULT_MAX_KEYS
    max_bytes: int | None = None  # aging: keep at most this many bytes of store files per partition too
    memtable_budget: int = DEFAULT_MEMTABLE_BUDGET  # bytes: the memtables of all held partitions together
    # seconds between periodic snapshots of every held partition (None: on request only)
    snapshot_every: float | None = None
    snapshot_to: str | None = None  # destination: a directory, s3://bucket/prefix or ebs:vol-… (None: data_dir)
    snapshot_keep: int | None = None  # prune to the newest N per partition after each scheduled round
    broker_retry_for: float = DEFAULT_BROKER_RETRY_FOR  # seconds transient Kafka faults are ridden out
    # seconds from the first SIGTERM to a forced exit: below the supervisor's grace period (90 s in deploy/)
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    # a dynamic group member (no group.instance.id): its stop moves its partitions at once (scale-in)
    leave_group_on_stop: bool = False

    @property
    def transactional_id(self) -> str:
        # Stable across restarts: a restarted worker fences its previous incarnation at once and aborts its
        # open transaction, instead of waiting out transaction.timeout.ms.
        return f"{self.transactional_id_prefix}{self.worker_id}"

    @property
    def transactional_id_prefix(self) -> str:
        """What every worker of the group's transactional id starts with: the name of its prefixed ACL."""
        return f"dedupectl-{self.group_id}-"

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view with secrets redacted."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "kafka"}
        fields["data_dir"] = str(self.data_dir)
        fields["schemas"] = None if self.schemas is None else self.schemas.describe()
        return {"kafka": self.kafka.describe(), **fields, "transactional_id": self.transactional_id}


# Fields a file, the environment or a flag may set, with their parsers.
_WORKER_FIELDS: dict[str, type] = {
    "bootstrap_servers": str,
    "input_topic": str,
    "output_topic": str,
    "dead_letter_topic": str,
    "duplicates_topic": str,
    "group_id": str,
    "data_dir": Path,
    "worker_id": str,
    "batch_max_messages": int,
    "batch_max_bytes": int,
    "batch_max_ms": int,
    "value_format": str,
    "id_field": str,
    "id_header": str,
    "schema_registry_url": str,
    "partitioner": str,
    "misrouted": str,
    "transaction_timeout_ms": int,
    "session_timeout_ms": int,
    "metrics_port": int,
    "metrics_host": str,
    "timeout_s": float,
    "max_keys": int,
    "max_bytes": str,
    "memtable_budget": str,
    "snapshot_every": str,
    "broker_retry_for": str,
    "snapshot_to": str,
    "snapshot_keep": int,
    "stop_timeout": str,
    "leave_group_on_stop": bool,
    "observe": bool,
}


def _load_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as error:
        raise ConfigError(f"config file {path} does not exist", "check --config / DEDUPECTL_CONFIG") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from error
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error


def _parse(name: str, kind: type, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    try:
        if kind is int:
            if isinstance(raw, bool):
                raise ValueError
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is bool:
            return _boolean(raw)
        if kind is Path:
            return Path(str(raw)).expanduser()
        return str(raw)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {name} must be {kind.__name__}, got {raw!r}") from error


def _collect(
    config_file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any], origins: dict[str, str] | None = None
) -> tuple[dict, dict]:
    """Merge the three sources into (fields, kafka settings), checking every key; later sources win.
    ``origins`` receives, per field, the name the operator gave it: a flag, a variable or the file's key."""
    fields: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    origins = {} if origins is None else origins
    file_path = config_file or (Path(env["DEDUPECTL_CONFIG"]) if env.get("DEDUPECTL_CONFIG") else None)
    if file_path is not None:
        _from_file(file_path, fields, kafka)
    _from_env(env, fields, kafka, origins)
    _from_flags(flags, fields, kafka, origins)
    owned = sorted(set(kafka) & KAFKA_KEYS_OWNED)
    if owned:
        raise ConfigError(
            f"librdkafka setting(s) {', '.join(owned)} are set by dedupectl itself",
            "remove them from [kafka] / DEDUPECTL_KAFKA_*; use bootstrap_servers, group_id, worker_id instead",
        )
    return fields, kafka


def _from_file(file_path: Path, fields: dict[str, Any], kafka: dict[str, str]) -> None:
    for key, value in _load_file(file_path).items():
        if key == "kafka":
            if not isinstance(value, dict):
                raise ConfigError(f"{file_path}: [kafka] must be a table of librdkafka settings")
            kafka.update({str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()})
        elif key in SCHEMA_TABLES:
            if not isinstance(value, dict):
                raise ConfigError(f"{file_path}: [{key}] must be a table of key = value")
            table = fields.setdefault(SCHEMA_TABLES[key], {})
            table.update({_schema_key(key, k, file_path): str(v) for k, v in value.items()})
        elif key in _WORKER_FIELDS:
            fields[key] = _parse(key, _WORKER_FIELDS[key], value, str(file_path))
        else:
            raise ConfigError(
                f"{file_path}: unknown config key {key!r}",
                f"known keys: {', '.join(sorted([*_WORKER_FIELDS, 'kafka', *SCHEMA_TABLES]))}",
            )


def _from_env(env: Mapping[str, str], fields: dict[str, Any], kafka: dict[str, str], origins: dict[str, str]) -> None:
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in ENV_RESERVED:
            continue
        if name.startswith(ENV_KAFKA_PREFIX):
            kafka[name[len(ENV_KAFKA_PREFIX) :].lower().replace("_", ".")] = value
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in _WORKER_FIELDS:
            raise ConfigError(f"unknown environment variable {name}", "unset it or fix its spelling")
        fields[key] = _parse(key, _WORKER_FIELDS[key], value, name)
        origins[key] = name


def _from_flags(
    flags: Mapping[str, Any], fields: dict[str, Any], kafka: dict[str, str], origins: dict[str, str]
) -> None:
    for key, value in flags.items():
        if value is None:
            continue
        if key == "kafka":
            kafka.update(value)
        elif key in SCHEMA_TABLES.values():  # parsed by the command (--schema-file, --schema-registry-setting)
            fields.setdefault(key, {}).update(value)
            origins[key] = flag_for(key)
        elif key in _WORKER_FIELDS:
            fields[key] = _parse(key, _WORKER_FIELDS[key], value, flag_for(key))
            origins[key] = flag_for(key)
        else:  # a programming error in a command, not an operator one
            raise ConfigError(f"unknown option {key!r}")


def _kafka_config(fields: dict[str, Any], kafka: dict[str, str]) -> KafkaConfig:
    bootstrap = fields.get("bootstrap_servers")
    if not bootstrap:
        raise ConfigError(
            "no Kafka bootstrap servers given",
            "pass --bootstrap-servers, set DEDUPECTL_BOOTSTRAP_SERVERS, or bootstrap_servers in the config file",
        )
    from reconcile.kafka import KafkaConfig

    timeout = fields.get("timeout_s")
    timeout = 15.0 if timeout is None else timeout
    if timeout <= 0:
        raise ConfigError(f"timeout_s must be positive, got {timeout}")
    return KafkaConfig(bootstrap_servers=bootstrap, settings=MappingProxyType(dict(kafka)), timeout_s=timeout)


def resolve_kafka_config(
    config_file: Path | None = None, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
) -> KafkaConfig:
    """The Kafka connection alone, for commands that do not run the worker."""
    fields, kafka = _collect(config_file, os.environ if env is None else env, flags or {})
    return _kafka_config(fields, kafka)


def resolve_worker_config(
    config_file: Path | None = None, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
) -> WorkerConfig:
    """The worker's whole configuration; raises ConfigError naming the first problem found (by the flag,
    variable or config key that set it)."""
    origins: dict[str, str] = {}
    fields, kafka = _collect(config_file, os.environ if env is None else env, flags or {}, origins)
    kafka_config = _kafka_config(fields, kafka)
    named = _Named(origins)
    observe = bool(fields.get("observe"))
    for required in ("input_topic",) if observe else ("input_topic", "output_topic"):
        if not fields.get(required):
            raise ConfigError(f"no {required} given", f"pass {flag_for(required)} or set {required} in the config file")
    input_topic, output_topic = fields["input_topic"], fields.get("output_topic") or None
    dead_letter_topic = fields.get("dead_letter_topic") or f"{input_topic}.dead-letter"
    if len({input_topic, output_topic, dead_letter_topic}) != 3:
        raise ConfigError("input, output and dead-letter topics must be three different topics")
    duplicates_topic = fields.get("duplicates_topic") or None
    if duplicates_topic is not None and duplicates_topic in (input_topic, output_topic, dead_letter_topic):
        raise ConfigError(
            f"{named('duplicates_topic')} {duplicates_topic!r} is also the input, output or dead-letter topic",
            "give the dropped copies a topic of their own",
        )
    group_id = fields.get("group_id") or f"dedupectl.{input_topic}"
    data_dir = fields.get("data_dir") or DEFAULT_DATA_DIR
    config = WorkerConfig(
        kafka=kafka_config,
        input_topic=input_topic,
        output_topic=output_topic,
        dead_letter_topic=dead_letter_topic,
        duplicates_topic=duplicates_topic,
        group_id=observer_group(group_id) if observe else group_id,
        data_dir=observer_data_dir(data_dir) if observe else data_dir,
        worker_id=fields.get("worker_id") or socket.gethostname(),
        **{
            key: fields[key]
            for key in (
                "batch_max_messages",
                "batch_max_bytes",
                "batch_max_ms",
                "value_format",
                "id_field",
                "id_header",
                "partitioner",
                "misrouted",
                "transaction_timeout_ms",
                "session_timeout_ms",
                "metrics_port",
                "metrics_host",
            )
            if fields.get(key) is not None
        },
        max_keys=_bound(fields.get("max_keys"), _size(fields.get("max_bytes"), named("max_bytes"))),
        max_bytes=_size(fields.get("max_bytes"), named("max_bytes")),
        memtable_budget=_size(fields.get("memtable_budget"), named("memtable_budget")) or DEFAULT_MEMTABLE_BUDGET,
        snapshot_every=_duration(fields.get("snapshot_every"), named("snapshot_every")),
        broker_retry_for=_duration(fields.get("broker_retry_for"), named("broker_retry_for"))
        or DEFAULT_BROKER_RETRY_FOR,
        snapshot_to=fields.get("snapshot_to"),
        snapshot_keep=fields.get("snapshot_keep"),
        stop_timeout=_duration(fields.get("stop_timeout"), named("stop_timeout")) or DEFAULT_STOP_TIMEOUT,
        leave_group_on_stop=bool(fields.get("leave_group_on_stop")),
        observe=observe,
    )
    _validate(config, named)
    from dedupectl.schemas import schema_source  # loads fastavro and protobuf when a schema source is given

    config = dataclasses.replace(
        config,
        schemas=schema_source(
            config.value_format,
            fields.get("schema_files"),
            fields.get("schema_registry_url"),
            fields.get("schema_registry_settings"),
            config.broker_retry_for,
        ),
    )
    if fields.get("id_header") is not None and fields.get("id_field") is not None:
        raise ConfigError(
            f"{named('id_header')} and {named('id_field')} are two places for the id, given together",
            "give one: with id_header the id is that header's value and the value's fields are not read",
        )
    return config


def _schema_key(table: str, key: Any, source: Path) -> Any:
    """A [schema_files] key is a schema id; a [schema_registry] key a client setting (its url is
    schema_registry_url's)."""
    if table == "schema_registry":
        if key == "url":
            raise ConfigError(f"{source}: [schema_registry] url is set by schema_registry_url", "move it there")
        return str(key)
    if not str(key).isdigit():
        raise ConfigError(f"{source}: [schema_files] key {key!r} is not a schema id", 'write it as "7" = "event.avsc"')
    return int(key)


def observer_group(group_id: str) -> str:
    """An observer's consumer group: its own, beside the worker's it stands in for, so it never takes their
    partitions or moves their offsets (its transactional ids follow from it)."""
    return f"{group_id}{OBSERVER_SUFFIX}"


def observer_data_dir(data_dir: Path) -> Path:
    """An observer's data directory: beside the worker's (``/var/lib/dedupectl`` -> ``/var/lib/dedupectl.observe``),
    never in it, so no store command takes its stores for the worker's."""
    name = data_dir.absolute().name
    if not name:
        raise ConfigError(f"data_dir {data_dir} has no name to derive an observer's directory from", "give another")
    return data_dir.absolute().with_name(f"{name}{OBSERVER_SUFFIX}")


class _Named:
    """A field's name as the operator gave it: the flag or variable that set it, else its config key."""

    def __init__(self, origins: Mapping[str, str]) -> None:
        self._origins = origins

    def __call__(self, key: str) -> str:
        return self._origins.get(key, key)


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


def _size(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    from store.sizes import parse_size

    return parse_size(text, what=what)


def _bound(max_keys: int | None, max_bytes: int | None) -> int:
    """The ids a partition's store keeps at most: ``max_keys``, else ``max_bytes`` turned into ids at
    ``BOUND_BYTES_PER_ID``, else ``DEFAULT_MAX_KEYS``."""
    if max_keys is not None:
        return max_keys
    if max_bytes is not None:
        return max(1, max_bytes // BOUND_BYTES_PER_ID)
    return DEFAULT_MAX_KEYS


def _duration(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    return parse_duration(text, what=what, positive=True)


def _validate_choices(config: WorkerConfig, named: _Named) -> None:
    choices = (("value_format", VALUE_FORMATS), ("partitioner", PARTITIONER_CHOICES), ("misrouted", MISROUTED_ACTIONS))
    for name, allowed in choices:
        if getattr(config, name) not in allowed:
            raise ConfigError(f"{named(name)} must be one of {', '.join(allowed)}, got {getattr(config, name)!r}")
    if config.misrouted == "forward" and config.partitioner not in ("murmur2", "crc32"):
        raise ConfigError(  # auto judges nothing until it settles: records before that would stay where they are
            f"{named('misrouted')} forward needs partitioner murmur2 or crc32, got {config.partitioner!r}",
            f"pass {flag_for('partitioner')} with the partitioner the repartition plan found",
        )
    if config.misrouted == "forward" and config.observe:
        raise ConfigError(f"{named('misrouted')} forward writes to the input topic; an observer writes nothing")


def _validate(config: WorkerConfig, named: _Named) -> None:
    for name in (
        "batch_max_messages",
        "batch_max_bytes",
        "batch_max_ms",
        "transaction_timeout_ms",
        "session_timeout_ms",
    ):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{named(name)} must be positive, got {getattr(config, name)}")
    _validate_choices(config, named)
    from dedupectl.messages import id_field_problem  # loads simdjson: not for every command's --help

    problem = id_field_problem(config.id_field)
    if problem:
        raise ConfigError(f"{named('id_field')} {problem}")
    if config.id_header is not None and not config.id_header:
        raise ConfigError(f"{named('id_header')} is empty: give the name of the header that holds the id")
    if config.max_keys < 1:
        raise ConfigError(f"{named('max_keys')} must be at least 1, got {config.max_keys}")
    if config.memtable_budget < MIN_MEMTABLE_BUDGET:
        raise ConfigError(
            f"{named('memtable_budget')} must be at least 4MiB, got {config.memtable_budget} bytes",
            "memtables smaller than that flush files of a few thousand ids",
        )
    if config.snapshot_keep is not None and config.snapshot_keep < 1:
        raise ConfigError(f"{named('snapshot_keep')} must be at least 1, got {config.snapshot_keep}")
    if config.snapshot_every is None and (config.snapshot_to is not None or config.snapshot_keep is not None):
        present = [named(name) for name in ("snapshot_to", "snapshot_keep") if getattr(config, name) is not None]
        # in the words the operator used: flags point to the flag, the file or environment to the key
        every = flag_for("snapshot_every") if all(name.startswith("--") for name in present) else "snapshot_every"
        raise ConfigError(
            f"{' and '.join(present)} applies to scheduled snapshots, which are off without {every}",
            "add --snapshot-every (e.g. 1h), or drop it",
        )
    if config.metrics_port is not None and not 0 <= config.metrics_port <= 65535:
        raise ConfigError(f"{named('metrics_port')} must be 0-65535, got {config.metrics_port}")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", config.worker_id):
        raise ConfigError(f"{named('worker_id')} {config.worker_id!r} may hold only letters, digits, '.', '_' and '-'")
