"""Start-up loads only the CLI: importing the app, and asking any command for --help or the version, imports
none of the modules that talk to Kafka, S3, Spark or RocksDB (a command loads those when it runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("confluent_kafka", "boto3", "botocore", "numpy", "pyspark", "rocksdict", "dedupectl.worker")

# in a fresh interpreter: what the CLI's start-up left in sys.modules
_PROBE = """
import json, sys
from typer.testing import CliRunner
import typer
from dedupectl.cli.app import app
asked = json.loads(sys.argv[1])
if asked == ["--every-help"]:
    def paths(command, prefix=()):
        for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
            yield (*prefix, name)
            yield from paths(sub, (*prefix, name))
    runs = [[*path, "--help"] for path in paths(typer.main.get_command(app))] + [["--help"], ["--version"]]
elif asked:
    runs = [asked]
else:
    runs = []
for args in runs:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0 or asked == args, (args, result.output)
heavy = json.loads(sys.argv[2])
print(json.dumps(sorted(name for name in heavy if name in sys.modules)))
"""


def _loaded_after(args: list[str]) -> list[str]:
    return _loaded_after_named(args, HEAVY)


def _loaded_after_named(args: list[str], names: tuple[str, ...]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("args", [[], ["--every-help"]], ids=["import", "every --help and --version"])
def test_start_up_imports_no_heavy_module(args: list[str]) -> None:
    assert _loaded_after(args) == []


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_load_no_type_coercion(args: list[str]) -> None:
    # Typer converts any option value but a flag's with pydantic: the global options seen before --help or
    # --version exits are flags (--log-format, the one that is not, is processed after them)
    assert "pydantic" not in _loaded_after_named(args, ("pydantic",))


def test_the_probe_sees_a_heavy_import() -> None:
    # the check itself: a command that really runs loads what it needs
    assert "rocksdict" in _loaded_after(["stats", "-d", "/nonexistent-dedupectl-data"])


def test_status_help_names_the_fleets_default_lag() -> None:
    from dedupectl.cli.commands.status import MAX_LAG_HELP
    from dedupectl.fleet import DEFAULT_MAX_LAG

    assert f"(default {DEFAULT_MAX_LAG})" in MAX_LAG_HELP


def test_the_endpoint_help_names_the_backends_variable() -> None:
    from dedupectl.cli import options
    from snapshots.backends.aws import S3_ENDPOINT_ENV

    assert options.S3_ENDPOINT_ENV == S3_ENDPOINT_ENV


def test_the_defaults_named_in_help_are_the_cores() -> None:
    from dedupectl.cli.commands import dev, spark
    from dedupectl.devbroker import DEFAULT_STATE_DIR
    from dedupectl.spark.session import DEFAULT_MASTER

    assert (dev.DEFAULT_STATE_DIR, spark.DEFAULT_MASTER) == (DEFAULT_STATE_DIR, DEFAULT_MASTER)
