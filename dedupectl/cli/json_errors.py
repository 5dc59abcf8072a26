"""``--json`` failures: a command that fails still prints one JSON document on stdout (an error object), then
exits as without ``--json``: the same line on stderr and the same exit code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from dedupectl.cli.helpformat import HelpCommand
from dedupectl.cli.output import print_json
from dedupectl.errors import DedupeError

# click's base of usage errors, from whichever click typer runs on (recent typer carries its own copy)
_USAGE_ERROR = next(base for base in typer.BadParameter.__mro__ if base.__name__ == "ClickException")


def error_object(error: BaseException) -> dict[str, Any]:
    """The JSON a failed command prints with --json: what the error line says, split, and the exit code."""
    from store.damage import corruption_of  # here: only a failing command pays for the import

    if not isinstance(error, DedupeError):  # RocksDB's report of a damaged file is the operator's, not a bug
        error = corruption_of(error) or error
    if isinstance(error, DedupeError):
        kind, message, hint, code = type(error).__name__, error.message, error.hint, error.exit_code
    elif isinstance(error, _USAGE_ERROR):  # an option or argument that does not parse
        kind, message, hint, code = "usage", error.format_message(), None, error.exit_code
    else:
        kind, message, hint, code = "bug", f"unexpected {type(error).__name__}: {error}", None, 70
    return {"error": {"message": message, "hint": hint, "kind": kind, "exit_code": code}}


@contextmanager
def json_errors(json_output: bool) -> Iterator[None]:
    """With --json, print the error object of a failure in the block, then let the failure go on."""
    try:
        yield
    except (typer.Exit, typer.Abort):  # --help, or a stop: not a failure
        raise
    except Exception as error:
        if json_output:
            print_json(error_object(error))
            error.json_printed = True  # the entry point prints it only where no command did
        raise


class JsonErrorsCommand(HelpCommand):
    """A command whose options fail to parse (a bad value, a missing option, a callback's refusal) before its
    body runs: with --json on the command line, the error object is printed all the same."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        options = args[: args.index("--")] if "--" in args else args
        with json_errors("--json" in options):
            return super().parse_args(ctx, args)
