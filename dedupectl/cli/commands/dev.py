"""``dedupectl dev …``: the project's local Kafka broker for the demo, tests and benchmarks.

A thin shell over ``dedupectl.devbroker``: parse options, call one function, render the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dedupectl.cli.helpformat import Typer
from dedupectl.cli.options import JsonOption
from dedupectl.cli.output import console, print_json, print_table
from dedupectl.cli.progress import status_line

if TYPE_CHECKING:
    from dedupectl.devbroker import BrokerStatus

# dedupectl.devbroker (processes, jars, TLS) is imported when a command runs, not for --help; its
# DEFAULT_STATE_DIR is named here (a test holds the two together)
DEFAULT_STATE_DIR = Path(".dedupectl") / "broker"

dev_app = Typer(help="Developer tools: a local Kafka broker for demos, tests and benchmarks.", no_args_is_help=True)
broker_app = Typer(help="Run a single-node Kafka broker (KRaft) on 127.0.0.1.", no_args_is_help=True)
dev_app.add_typer(broker_app, name="broker")

StateDirOption = typer.Option(
    DEFAULT_STATE_DIR, "--state-dir", help="Folder holding the broker's config, data, logs and broker.json."
)
VERSION_HELP = "Kafka release, e.g. 3.9.1 (default: $DEDUPECTL_DEV_KAFKA_VERSION, else tools/kafka/pom.xml's)."


def register(app: typer.Typer) -> None:
    """Add the ``dev`` command group to ``app``."""
    app.add_typer(dev_app, name="dev")


@broker_app.command("start")
def start(
    state_dir: Path = StateDirOption,
    heap_mb: int = typer.Option(512, "--heap-mb", min=128, help="JVM heap of the broker, in MiB."),
    timeout: float = typer.Option(90, "--timeout", min=1, help="Seconds to wait for the broker to serve."),
    kafka_version: str | None = typer.Option(
        None, "--kafka-version", help=VERSION_HELP + " A state dir keeps the version that formatted it."
    ),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="SASL_SSL (SCRAM-SHA-512) and mTLS listeners, TLS from a CA made on the fly, and an authorizer that "
        "denies what no ACL allows; connect as its super user with the printed DEDUPECTL_CONFIG.",
    ),
    json_output: bool = JsonOption,
) -> None:
    """Start the broker in the background (or find it running) and print its bootstrap servers.

    The broker keeps running after this command exits. Its jars are fetched with Maven on first use.

    Data survives `stop`; a restart reuses the previous port when it is free. A state dir keeps the mode
    (plain or --secure) it was first started in.

    Example: eval "$(dedupectl dev broker start | tail -n 1)"
    """
    from dedupectl.devbroker import LocalBroker

    broker = LocalBroker(state_dir, heap_mb=heap_mb, kafka_version=kafka_version, secure=secure or None)
    if json_output:
        broker.start(timeout=timeout)
        print_json(broker.status())
        return
    with status_line(f"starting the local Kafka broker in {state_dir}"):
        bootstrap = broker.start(timeout=timeout)
    status = broker.status()
    console.print(
        f"Kafka {status.kafka_version} broker running on [bold]{bootstrap}[/] (pid {status.pid}, state dir {state_dir})"
    )
    if status.secure:
        console.print(f"mTLS listener on [bold]{status.mtls_bootstrap}[/]; CA certificate {broker.security.ca_path}")
        # the admin's password stays in the config file: never on a command line or in this output
        typer.echo(f"export DEDUPECTL_BOOTSTRAP_SERVERS={bootstrap} DEDUPECTL_CONFIG={status.client_config}")
        return
    typer.echo(f"export DEDUPECTL_BOOTSTRAP_SERVERS={bootstrap}")


@broker_app.command("stop")
def stop(
    state_dir: Path = StateDirOption,
    timeout: float = typer.Option(30, "--timeout", min=1, help="Seconds to wait before killing the broker."),
) -> None:
    """Stop the broker cleanly (SIGTERM, then SIGKILL after --timeout); its data is kept.

    Example: dedupectl dev broker stop --state-dir .dedupectl/broker
    """
    from dedupectl.devbroker import LocalBroker

    broker = LocalBroker.from_state_dir(state_dir)
    was_running = broker.status().running
    broker.stop(timeout=timeout)
    console.print("Kafka broker stopped" if was_running else f"no broker was running in {state_dir}")


@broker_app.command("status")
def status(state_dir: Path = StateDirOption, json_output: bool = JsonOption) -> None:
    """Show whether the broker runs, its pid and bootstrap servers; exits 1 when it does not run.

    Example: dedupectl dev broker status --json
    """
    from dedupectl.devbroker import LocalBroker

    current = LocalBroker.from_state_dir(state_dir).status()
    if json_output:
        print_json(current)
    else:
        _print_status(current)
    if not current.running:
        raise typer.Exit(code=1)


@dev_app.command("fetch-kafka")
def fetch_kafka(
    kafka_version: str | None = typer.Option(None, "--kafka-version", help=VERSION_HELP),
    json_output: bool = JsonOption,
) -> None:
    """Resolve the broker's jars from Maven Central into the local cache (done by `start` when needed).

    Example: dedupectl dev fetch-kafka --kafka-version 3.9.1
    """
    from dedupectl.kafka_jars import ensure_kafka_libs

    if json_output:
        print_json({"libs_dir": ensure_kafka_libs(kafka_version)})
        return
    with status_line("checking the Kafka jars") as step:
        libs = ensure_kafka_libs(kafka_version, progress=step)
    console.print(f"Kafka jars ready in {libs}")


def _print_status(current: BrokerStatus) -> None:
    rows = [
        ("running", "yes" if current.running else "no"),
        ("pid", current.pid),
        ("bootstrap servers", current.bootstrap),
        ("kafka version", current.kafka_version),
        ("secure", "yes" if current.secure else "no"),
        ("state dir", current.state_dir),
    ]
    print_table("Local Kafka broker", ("field", "value"), rows)
