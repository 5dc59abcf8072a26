"""``dedupectl status``: the whole fleet in one table, for on-call (dedupectl.fleet does the work)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dedupectl.cli.options import (
    BootstrapOption,
    ConfigOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    OutputTopicOption,
    given_once,
    parse_kafka_settings,
)
from dedupectl.cli.output import console, print_json, print_table
from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError
from store.sizes import format_duration, format_size, parse_duration

if TYPE_CHECKING:
    from dedupectl.fleet import FleetStatus, PartitionStatus, StatusRequest

# dedupectl.fleet loads Kafka and RocksDB: imported when the command runs, not for --help; its
# DEFAULT_MAX_LAG is named in --max-lag's help (a test holds the two together)
MAX_LAG_HELP = "More records behind than this: LAGGING (default 1000)."

COLUMNS = ("partition", "owner", "lag", "msg/s", "window", "store", "last commit", "verdict")


def status(
    metrics: list[str] | None = typer.Option(
        None,
        "--metrics",
        "-m",
        help="A worker's metrics endpoint, host:port or URL (repeatable): window, store size, last commit.",
    ),
    data_dir: list[Path] | None = typer.Option(
        None,
        "--data-dir",
        "-d",
        help="A data directory readable from here (repeatable): window and store size from the stores, hosts "
        "from the status files (default: the config's data_dir, if it exists here).",
    ),
    minimum: str = typer.Option("24h", "--min", help="The effective window's floor: below it, exit 1."),
    stall: str = typer.Option("5m", "--stall", help="No commit for this long while records wait: STALLED (exit 1)."),
    max_lag: int | None = typer.Option(None, "--max-lag", min=0, help=MAX_LAG_HELP),
    watch: bool = typer.Option(False, "--watch", "-w", help="Refresh in place until Ctrl-C."),
    interval: str = typer.Option("5s", "--interval", help="Time between refreshes with --watch."),
    group_id: str | None = typer.Option(None, "--group-id", help="The workers' group (default: dedupectl.<input>)."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    json_output: bool = JsonOption,
) -> None:
    """Is everything OK? Per input partition: owner, lag, messages/s, effective window vs floor, store size,
    last commit age and a verdict.

    Lag, rate and owners come from Kafka; window, store size and last commit from the workers' --metrics
    endpoints or --data-dir. Figures it cannot get are left empty and named under the table.

    Exit 0: no partition fails; 1: a partition is REFUSED, BELOW FLOOR, has NO OWNER, its ENDPOINT DOWN or is
    STALLED; 2: error.

    Example: dedupectl status -c /etc/dedupectl/dedupectl.toml -m worker-1:9464 -m worker-2:9464
    """
    from dedupectl.fleet import DEFAULT_MAX_LAG, StatusRequest, fleet_status

    if watch and json_output:
        raise ConfigError("--watch and --json do not go together", "use --json alone, once per look")
    worker = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "group_id": group_id,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    dirs = tuple(data_dir) if data_dir else ((worker.data_dir,) if Path(worker.data_dir).is_dir() else ())
    request = StatusRequest(
        kafka=worker.kafka,
        input_topic=worker.input_topic,
        group_id=worker.group_id,
        output_topic=worker.output_topic,
        data_dirs=dirs,
        metrics=tuple(metrics or ()),
        floor_s=parse_duration(minimum, what="--min"),
        stall_s=parse_duration(stall, what="--stall", positive=True),
        max_lag=DEFAULT_MAX_LAG if max_lag is None else max_lag,
    )
    if watch:
        _watch(request, parse_duration(interval, what="--interval", positive=True))
        return
    report = fleet_status(request)
    if json_output:
        print_json({"exit_code": report.exit_code, **_as_dict(report)})
    else:
        _print(report)
    raise typer.Exit(report.exit_code)


def _watch(request: StatusRequest, interval_s: float) -> None:
    from dedupectl.fleet import FleetProbe

    with FleetProbe(request) as probe:
        probe.sample()
        try:
            with Live(console=console, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(interval_s)
                    live.update(render(probe.status()), refresh=True)
        except KeyboardInterrupt:
            return


def _as_dict(report: FleetStatus) -> dict:
    return {
        "input_topic": report.input_topic,
        "group_id": report.group_id,
        "group_state": report.group_state,
        "floor_seconds": report.floor_seconds,
        "taken_at": report.taken_at,
        "seconds": report.seconds,
        "partitions": list(report.partitions),
        "unavailable": list(report.unavailable),
    }


def _verdict(p: PartitionStatus) -> str:
    from dedupectl.fleet import FAILING, WARNINGS

    if p.verdict in FAILING:
        return f"[bold red]{p.verdict}[/]"
    return f"[yellow]{p.verdict}[/]" if p.verdict in WARNINGS else "[green]ok[/]"


def _owner(p: PartitionStatus) -> str:
    if p.worker_id is None:
        return "-"
    return escape(f"{p.worker_id} @ {p.host}" if p.host else p.worker_id)


def _row(p: PartitionStatus) -> list[str]:
    window = "-" if p.store_figures_from is None else "empty" if p.window_seconds is None else None
    return [
        str(p.partition),
        _owner(p),
        "-" if p.lag is None else f"{p.lag:,}",
        "-" if p.messages_per_s is None else f"{p.messages_per_s:,.0f}",
        window or format_duration(p.window_seconds),
        format_size(p.store_bytes),
        "-" if p.last_commit_age_s is None else f"{format_duration(p.last_commit_age_s)} ago",
        _verdict(p),
    ]


def _title(report: FleetStatus) -> str:
    from dedupectl.fleet import FAILING

    failing = sum(p.verdict in FAILING for p in report.partitions)
    when = time.strftime("%H:%M:%SZ", time.gmtime(report.taken_at))
    return (
        f"{report.input_topic}: group {report.group_id} ({report.group_state}), {len(report.partitions)} partitions, "
        f"{failing} failing, window floor {format_duration(report.floor_seconds)}, at {when}"
    )


def _notes(report: FleetStatus) -> list[Text]:
    lines = [Text(f"partition {p.partition}: refused: {p.refused}") for p in report.partitions if p.refused]
    lines += [Text(f"partition {p.partition}: {note}") for p in report.partitions for note in _routing_notes(p)]
    return lines + [Text(f"not available: {note}", style="dim") for note in report.unavailable]


def _routing_notes(p: PartitionStatus) -> list[str]:
    notes, since = [], "since its worker started"
    if p.misrouted:
        notes.append(f"{p.misrouted:,} records in the wrong partition {since}: give the producers one partitioner")
    if p.unkeyed:
        notes.append(f"{p.unkeyed:,} records without a key {since}: key them by their id")
    return notes


def render(report: FleetStatus) -> Group:
    """The table and the notes under it as one renderable, for Live (the terminal's width)."""
    table = Table(title=escape(_title(report)), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for p in report.partitions:
        table.add_row(*_row(p))
    return Group(table, *_notes(report))


def _print(report: FleetStatus) -> None:
    print_table(escape(_title(report)), COLUMNS, [_row(p) for p in report.partitions], whole=COLUMNS)
    for line in _notes(report):
        console.print(line, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("status")(status)
