"""``dedupectl security grant``: a role's SCRAM credential and least-privilege ACLs, from ``dedupectl.acls``."""

from __future__ import annotations

from pathlib import Path

import typer

from dedupectl.cli.helpformat import Typer
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigOption,
    DeadLetterTopicOption,
    DuplicatesTopicOption,
    GroupIdOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    OutputTopicOption,
    parse_kafka_settings,
)
from dedupectl.cli.output import print_json, print_table
from dedupectl.config import observer_group, resolve_worker_config
from dedupectl.errors import ConfigError

security_app = Typer(help="Create the credentials and ACLs of dedupectl's roles.", no_args_is_help=True)


@security_app.command("grant")
def grant(
    role: str = typer.Option(
        ..., "--role", help="worker, observer, reconcile, status, audit, replay, rebuild or spark."
    ),
    principal: str = typer.Option(..., "--principal", help="Who is granted, User:<name>."),
    scram_password_file: Path | None = typer.Option(
        None, "--scram-password-file", help="Create (or reset) the user's SCRAM credential with this file's password."
    ),
    scram_mechanism: str = typer.Option("SCRAM-SHA-512", "--scram-mechanism", help="SCRAM-SHA-512 or SCRAM-SHA-256."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="Print what would be created; create nothing."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    output_topic: str | None = OutputTopicOption,
    dead_letter_topic: str | None = DeadLetterTopicOption,
    duplicates_topic: str | None = DuplicatesTopicOption,
    group_id: str | None = GroupIdOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    json_output: bool = JsonOption,
) -> None:
    """Create a role's ACLs for a principal (and its SCRAM credential), as an administrator: the ACLs are
    docs/reference/security.md's for the role, names filled from the topics and the group.

    Example: dedupectl security grant --role worker --principal User:dedupectl-worker -t events -o events-deduped \\
        --scram-password-file /run/secrets/worker-password --dry-run
    """
    from dedupectl.acls import MISROUTED_FORWARD, ScramUser, role_acls
    from dedupectl.acls import grant as create

    worker = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": topic,
            "output_topic": output_topic,
            "dead_letter_topic": dead_letter_topic,
            "duplicates_topic": duplicates_topic,
            "group_id": group_id,
            "observe": role == "observer",  # it publishes nothing: no output topic is needed
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    names = {"input_topic": worker.input_topic, "dead_letter_topic": worker.dead_letter_topic}
    if worker.observe:  # its config holds the observer's group, derived from the worker's
        names["observer_group"] = worker.group_id
    else:
        names |= {"output_topic": worker.output_topic, "group": worker.group_id}
        names["observer_group"] = observer_group(worker.group_id)
    if worker.duplicates_topic is not None:
        names["duplicates_topic"] = worker.duplicates_topic
    if worker.misrouted == "forward":
        names[MISROUTED_FORWARD] = "on"
    acls = role_acls(role, principal, names)
    scram = None
    if scram_password_file is not None:
        scram = ScramUser(principal.removeprefix("User:"), _password(scram_password_file), scram_mechanism)
    if not dry_run:
        create(worker.kafka, acls, scram)
    verb = "would create" if dry_run else "created"
    if json_output:
        print_json({"dry_run": dry_run, "scram": None if scram is None else str(scram), "acls": [str(a) for a in acls]})
        return
    rows = [(verb, str(item)) for item in ([scram] if scram else []) + acls]
    print_table(f"{role} for {principal}", ["", "what"], rows)


def _password(path: Path) -> str:
    try:
        password = path.read_text().strip()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}", "give a readable password file") from None
    if not password:
        raise ConfigError(f"{path} is empty", "write the user's password in it")
    return password


def register(app: typer.Typer) -> None:
    app.add_typer(security_app, name="security")
