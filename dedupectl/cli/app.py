"""The ``dedupectl`` command: a thin Typer shell over the core.

Commands live in ``dedupectl.cli.commands``, a module each exposing ``register(app)``; this module wires
them together, takes the global options, and turns the package's own errors into one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import typer

import dedupectl
from dedupectl.cli.helpformat import Typer
from dedupectl.cli.json_errors import error_object
from dedupectl.cli.logs import LOG_FORMAT_ENV, LogFormat, error_event, setup_logging, use_log_format
from dedupectl.cli.output import print_error, print_json
from dedupectl.errors import DedupeError

# Each module adds its commands to the app; the order is the order in --help.
COMMAND_MODULES = (
    "dedupectl.cli.commands.run",
    "dedupectl.cli.commands.topics",
    "dedupectl.cli.commands.security",
    "dedupectl.cli.commands.demo",
    "dedupectl.cli.commands.snapshot",
    "dedupectl.cli.commands.reattach",
    "dedupectl.cli.commands.reconcile",
    "dedupectl.cli.commands.status",
    "dedupectl.cli.commands.trace",
    "dedupectl.cli.commands.store",
    "dedupectl.cli.commands.gaps",
    "dedupectl.cli.commands.spark",
    "dedupectl.cli.commands.repartition",
    "dedupectl.cli.commands.dev",
)

app = Typer(
    name="dedupectl",
    help="Exactly-once deduplication for Kafka, and the tools to operate it.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dedupectl {dedupectl.__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: bool = typer.Option(
        False, "--debug", metavar="", help="After an error's line, print its traceback (for bug reports)."
    ),
    # eager, and processed before --log-format: Typer converts a flag's value itself, any other with
    # pydantic, which --version need not load
    version: bool = typer.Option(
        False, "--version", metavar="", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    log_format: LogFormat = typer.Option(
        LogFormat.AUTO,
        "--log-format",
        envvar=LOG_FORMAT_ENV,
        case_sensitive=False,
        help="Log lines on stderr: rich on a terminal, else text (auto); text: one line per event; "
        "json: one object per line.",
    ),
) -> None:
    _state["debug"] = debug
    use_log_format(log_format)
    setup_logging("warning")  # commands with --log-level set their own level


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def _traceback_if_debug(error: BaseException) -> None:
    # --debug adds the traceback after the same line; the exit code stays the documented one
    if _state["debug"]:
        sys.stderr.write("".join(traceback.format_exception(error)))
        sys.stderr.flush()


def _json_asked() -> bool:
    """Whether the command line asks for --json (before any ``--``)."""
    args = sys.argv[1:]
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _fail(error: BaseException, line: str, exit_code: int) -> None:
    """The one line on stderr (with --json, the error object on stdout too, unless the command printed it)."""
    if _json_asked() and not getattr(error, "json_printed", False):
        print_json(error_object(error))
    traceback_text = "".join(traceback.format_exception(error)) if _state["debug"] else None
    event = error_event(line, error_object(error)["error"], traceback_text)
    if event is not None:  # --log-format json: the line is one more object among the logs, on stderr
        sys.stderr.write(event + "\n")
        sys.stderr.flush()
        sys.exit(exit_code)
    print_error(line)
    _traceback_if_debug(error)
    sys.exit(exit_code)


def main() -> None:
    """Console-script entry point: run the app, print known errors in one line (and with --debug the
    traceback after it), with the same exit code either way; with --json, the error as JSON on stdout too."""
    try:
        app()
    except DedupeError as error:
        _fail(error, str(error), error.exit_code)
    except Exception as error:  # a bug, not an operator error, unless RocksDB reports a damaged file
        from store.damage import corruption_of  # here: only a failing command pays for the import

        damage = corruption_of(error)
        if damage is not None:
            _fail(error, str(damage), damage.exit_code)
        hint = "" if _state["debug"] else " (rerun with --debug for the traceback)"
        _fail(error, f"unexpected {type(error).__name__}: {error}{hint}", 70)


if __name__ == "__main__":
    main()
