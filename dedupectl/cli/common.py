"""Options shared by several commands, and logging set-up."""

from __future__ import annotations

import logging

import typer
from rich.logging import RichHandler

from dedupectl.cli.output import err_console
from dedupectl.errors import ConfigError

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
JsonOption = typer.Option(False, "--json", metavar="", help="Print JSON for scripts instead of tables.")


def parse_kafka_settings(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X {pair!r} is not key=value", "write it as -X security.protocol=SASL_SSL")
        settings[key.strip()] = value
    return settings


def setup_logging(level: str) -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"unknown log level {level!r}", "use debug, info, warning or error")
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False, markup=False)
    logging.basicConfig(level=numeric, handlers=[handler], format="%(message)s", force=True)
    # librdkafka's retry chatter only at debug: errors reach the operator as dedupectl's own messages
    logging.getLogger("dedupectl.librdkafka").setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.CRITICAL)
