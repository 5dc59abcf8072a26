"""Logging set-up for the commands that log: level, and the handler on stderr."""

from __future__ import annotations

import logging

from rich.logging import RichHandler

from dedupectl.cli.output import err_console
from dedupectl.errors import ConfigError


def setup_logging(level: str) -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"unknown log level {level!r}", "use debug, info, warning or error")
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False, markup=False)
    logging.basicConfig(level=numeric, handlers=[handler], format="%(message)s", force=True)
    # librdkafka's retry chatter only at debug: errors reach the operator as dedupectl's own messages
    logging.getLogger("dedupectl.librdkafka").setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.CRITICAL)
