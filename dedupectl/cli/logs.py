"""Log lines on stderr, one per event, in the format the global ``--log-format`` chose.

- ``auto`` (the default): rich on a terminal (it wraps to the window), ``text`` anywhere else;
- ``text``: one line per event, never wrapped, so a runbook's grep finds it whole under systemd, Kubernetes
  or a pipe: ``2026-11-24T12:30:08.123Z INFO dedupectl.worker: partition 0 recovered: …``;
- ``json``: one object per line for log shippers: ``time``, ``level``, ``logger``, ``message`` (and
  ``exception`` when there is one); a failed command's last line too (``error_event``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from enum import StrEnum

from rich.logging import RichHandler

from dedupectl.cli.output import err_console
from dedupectl.errors import ConfigError

LOG_FORMAT_ENV = "DEDUPECTL_LOG_FORMAT"


class LogFormat(StrEnum):
    AUTO = "auto"
    TEXT = "text"
    JSON = "json"


_chosen = {"format": LogFormat.AUTO}


class UtcTimes(logging.Formatter):
    """Times as ISO 8601 in UTC to the millisecond, ``2026-11-24T12:30:08.123Z``: one clock for every host."""

    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


class TextFormatter(UtcTimes):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


class JsonFormatter(UtcTimes):
    def format(self, record: logging.LogRecord) -> str:
        event = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            event["stack"] = self.formatStack(record.stack_info)
        return json.dumps(event, ensure_ascii=False)


class StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when the event is logged (the CLI's test runner swaps it)."""

    def __init__(self, formatter: logging.Formatter) -> None:
        logging.Handler.__init__(self)
        self.setFormatter(formatter)

    @property
    def stream(self):
        return sys.stderr


def error_event(line: str, error: dict, exception: str | None = None) -> str | None:
    """A failed command's last line as a log event, with ``--log-format json`` (else None: the plain line):
    ``message`` is the line, ``error`` its parts (as ``--json`` prints them), ``exception`` the traceback."""
    if _chosen["format"] is not LogFormat.JSON:
        return None
    record = logging.LogRecord("dedupectl", logging.ERROR, __file__, 0, line, None, None)
    event = {"time": UtcTimes().formatTime(record), "level": "ERROR", "logger": "dedupectl", "message": line}
    event["error"] = error
    if exception:
        event["exception"] = exception
    return json.dumps(event, ensure_ascii=False)


def use_log_format(log_format: LogFormat) -> None:
    """The format every later ``setup_logging`` uses (the global ``--log-format``)."""
    _chosen["format"] = LogFormat(log_format)


def setup_logging(level: str) -> None:
    """Log events of ``level`` and above to stderr, in the chosen format."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"unknown log level {level!r}", "use debug, info, warning or error")
    logging.basicConfig(level=numeric, handlers=[_handler(_chosen["format"])], force=True)
    # librdkafka's retry chatter only at debug: errors reach the operator as dedupectl's own messages
    logging.getLogger("dedupectl.librdkafka").setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.CRITICAL)


def _handler(log_format: LogFormat) -> logging.Handler:
    if log_format is LogFormat.JSON:
        return StderrHandler(JsonFormatter())
    if log_format is LogFormat.TEXT or not err_console.is_terminal:
        return StderrHandler(TextFormatter())
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False, markup=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler
