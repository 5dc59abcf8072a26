"""Options that several commands take, each declared once, in one vocabulary (docs/reference/options.md).

An option that means the same to every command that takes it has one declaration here, with one default and
one help text. Where commands need a different default, there is one option per case, named for it.
Options only one command module takes are declared in that module.

A spelling that shipped and was renamed stays accepted, hidden from help, as a second option of the same
command (``…AliasOption`` here); the command takes whichever was given, through :func:`given_once`.
"""

from __future__ import annotations

from typing import Any

import typer

from dedupectl.config import DEFAULT_DATA_DIR
from dedupectl.errors import ConfigError

# snapshots.backends.aws's S3_ENDPOINT_ENV, named here: importing that package loads boto3 for every command
S3_ENDPOINT_ENV = "DEDUPECTL_S3_ENDPOINT_URL"

DATA_DIR_ENV = "DEDUPECTL_DATA_DIR"
# DEDUPECTL_* variables the CLI reads itself: the worker's config, which refuses names it does not know, never sees them

# -- the worker's configuration: flags over the config file and DEDUPECTL_* (dedupectl.config) ----------------

ConfigOption = typer.Option(
    None, "--config", "-c", help="TOML config file (or DEDUPECTL_CONFIG).", exists=False, dir_okay=False
)
BootstrapOption = typer.Option(
    None, "--bootstrap-servers", "-b", help="Kafka bootstrap servers (or DEDUPECTL_BOOTSTRAP_SERVERS)."
)
KafkaSettingOption = typer.Option(
    None,
    "--kafka-setting",
    "-X",
    help="A librdkafka setting for every client, as key=value (repeatable), e.g. -X security.protocol=SSL.",
)
InputTopicOption = typer.Option(
    None, "--topic", "-t", help="The worker's input topic: the one it deduplicates (it names the stores)."
)
# the input topic's spelling in run, status, trace, reconcile, topics create, audit, replay and rebuild
InputTopicAliasOption = typer.Option(None, "--input-topic", "-i", hidden=True)
OutputTopicOption = typer.Option(None, "--output-topic", "-o", help="The worker's output topic: where new ids go.")
DeadLetterTopicOption = typer.Option(
    None, "--dead-letter-topic", help="Where unusable records go (default: <input>.dead-letter)."
)
DuplicatesTopicOption = typer.Option(
    None,
    "--duplicates-topic",
    help="Also produce every dropped copy here, in its batch's transaction, with headers naming its original"
    " (default: off).",
)
ValueFormatOption = typer.Option(
    None,
    "--value-format",
    help="json (values must be JSON objects), raw, or avro / protobuf (Confluent wire format, with"
    " --schema-registry or --schema-file), as the worker runs.",
)
SchemaRegistryOption = typer.Option(
    None, "--schema-registry", help="Schema Registry URL for avro/protobuf values' writer schemas."
)
SchemaRegistrySettingOption = typer.Option(
    None,
    "--schema-registry-setting",
    help="A setting of the schema registry client, as key=value (repeatable), e.g. basic.auth.user.info=USER:KEY.",
)
SchemaFileOption = typer.Option(
    None,
    "--schema-file",
    help="A writer schema as ID=PATH (repeatable): an .avsc for avro, a FileDescriptorSet"
    " (protoc --include_imports --descriptor_set_out) for protobuf.",
)
IdFieldOption = typer.Option(
    None,
    "--id-field",
    help="JSON field of the id for a record without a key: a name, or a JSON Pointer such as /context/messageId"
    " (default messageId).",
)
IdHeaderOption = typer.Option(
    None, "--id-header", help="Take the id from this record header, and only from it (not the key or the value)."
)


def _positive_whole(flag: str):
    def check(value: int | None) -> int | None:
        # the flag's own error, before the store's (which knows the setting only by its config key)
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be a positive whole number, got {value}")
        return value

    return check


MaxKeysOption = typer.Option(
    None, "--max-keys", callback=_positive_whole("--max-keys"), help="Aging: keep at most this many ids per partition."
)
MaxBytesOption = typer.Option(
    None, "--max-bytes", help="Aging: keep at most this much data (SST files, sealed arrays) per partition, e.g. 40GiB."
)

# -- the data directory: where the partition stores live ---------------------------------------------------

# the store and snapshot commands read no config file: the environment, else the worker's default
DataDirOption = typer.Option(
    DEFAULT_DATA_DIR,
    "--data-dir",
    "-d",
    envvar=DATA_DIR_ENV,
    help="The worker's data directory (or DEDUPECTL_DATA_DIR).",
)
# commands that resolve the worker's config: None lets the config file, then the environment, decide
ConfigDataDirOption = typer.Option(
    None,
    "--data-dir",
    "-d",
    help="The worker's data directory (default: data_dir of the config, DEDUPECTL_DATA_DIR or dedupectl-data).",
)
# restore writes there: no default, so a store never lands in a directory nobody named
RestoreDataDirOption = typer.Option(
    None,
    "--data-dir",
    "-d",
    envvar=DATA_DIR_ENV,
    help="Data directory to restore the store into (or DEDUPECTL_DATA_DIR).",
)
# replay and reattach only look there when asked: None (not the environment's directory) skips the check
CheckedDataDirOption = typer.Option(
    None,
    "--data-dir",
    "-d",
    help="The worker's data directory: also check the partitions' stores there (default: no check).",
)

# -- which stores ------------------------------------------------------------------------------------------

StoreTopicOption = typer.Option(
    None, "--topic", "-t", help="Input topic of the stores (default: the only one in the data directory)."
)
GroupIdOption = typer.Option(None, "--group-id", help="The worker's consumer group (default: dedupectl.<input>).")
PartitionsOption = typer.Option(None, "--partition", "-p", help="A partition (repeatable); default: every partition.")

# -- AWS (S3 and EBS snapshots, volumes) -------------------------------------------------------------------


def _endpoint(value: str | None) -> str | None:
    # an option's error, not boto3's ValueError at the first call (which would surface as a bug, exit 70)
    from snapshots.backends.aws import check_endpoint_url

    return None if value is None else check_endpoint_url(value, "--endpoint-url")


EndpointOption = typer.Option(
    None,
    "--endpoint-url",
    callback=_endpoint,
    help=f"AWS endpoint for S3 and EC2, http(s)://host[:port] (or {S3_ENDPOINT_ENV} / AWS_ENDPOINT_URL).",
)
RegionOption = typer.Option(None, "--region", help="AWS region (or AWS_DEFAULT_REGION).")

# -- output and logs ---------------------------------------------------------------------------------------

JsonOption = typer.Option(False, "--json", metavar="", help="Print JSON for scripts instead of text for people.")
LOG_LEVEL_HELP = "debug, info, warning or error."
# the tools log only what goes wrong; the worker's log is also its record of recoveries and progress
LogLevelOption = typer.Option("warning", "--log-level", help=LOG_LEVEL_HELP)
WorkerLogLevelOption = typer.Option("info", "--log-level", help=LOG_LEVEL_HELP)


def given_once(value: Any, old: Any, flag: str, old_flag: str) -> Any:
    """An option's value, given under its name or under the spelling it shipped with (hidden, still read)."""
    if old is None:
        return value
    if value is not None and value != old:
        raise ConfigError(f"{flag} and {old_flag} are one option, given twice", f"pass {flag} once")
    return old


def parse_kafka_settings(pairs: list[str] | None) -> dict[str, str] | None:
    """``-X key=value`` pairs as librdkafka settings; None when none were given."""
    return _key_values(pairs, "-X", "security.protocol=SASL_SSL")


def parse_registry_settings(pairs: list[str] | None) -> dict[str, str] | None:
    """``--schema-registry-setting key=value`` pairs as the registry client's settings; None when none were given."""
    return _key_values(pairs, "--schema-registry-setting", "basic.auth.user.info=USER:KEY")


def parse_schema_files(pairs: list[str] | None) -> dict[int, str] | None:
    """``--schema-file ID=PATH`` pairs as schema id to path; None when none were given."""
    files = _key_values(pairs, "--schema-file", "7=event.avsc")
    if files is None:
        return None
    for key in files:
        if not key.isdigit():
            raise ConfigError(f"--schema-file {key}=… does not start with a schema id", "write it as 7=event.avsc")
    return {int(key): path for key, path in files.items()}


def schema_flags(
    registry: str | None, registry_settings: list[str] | None, schema_files: list[str] | None
) -> dict[str, Any]:
    """The schema options as config fields (dedupectl.config)."""
    return {
        "schema_registry_url": registry,
        "schema_registry_settings": parse_registry_settings(registry_settings),
        "schema_files": parse_schema_files(schema_files),
    }


def _key_values(pairs: list[str] | None, flag: str, example: str) -> dict[str, str] | None:
    if not pairs:
        return None
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {pair!r} is not key=value", f"write it as {flag} {example}")
        settings[key.strip()] = value
    return settings
