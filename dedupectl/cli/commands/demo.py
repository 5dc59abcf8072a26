"""``dedupectl demo``: the whole job end to end on a local broker."""

from __future__ import annotations

import logging

import typer
from rich.table import Table

from dedupectl.cli.options import JsonOption
from dedupectl.cli.output import console, print_json
from dedupectl.cli.progress import DemoSteps, ProgressDisplay

# What each figure is called for people, grouped by where it was counted; --json keeps the field names.
SECTIONS = (
    (
        "input",
        (
            ("messages_in", "events produced"),
            ("distinct_valid_ids_in", "distinct valid ids"),
            ("duplicates_in", "client retries (duplicates)"),
            ("invalid_in", "unusable records"),
        ),
    ),
    (
        "worker",
        (
            ("published", "published"),
            ("duplicates_dropped", "duplicates dropped"),
            ("dead_letters", "sent to the dead-letter topic"),
            ("messages_per_second", "messages per second"),
        ),
    ),
    (
        "output",
        (
            ("output_records", "records in the output topic"),
            ("output_ids_published_twice", "ids published twice"),
            ("valid_ids_missing_from_output", "valid ids missing"),
            ("dead_letter_topic_records", "records in the dead-letter topic"),
            ("exactly_once", "exactly once"),
        ),
    ),
)


def _readable(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_summary(figures: dict[str, object]) -> None:
    """The demo's figures as a person reads them: labels, thousands separators, yes/no."""
    table = Table(title="dedupectl demo", title_justify="left", show_header=False)
    table.add_column("where", style="bold")
    table.add_column("figure", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    for section, rows in SECTIONS:
        for index, (key, label) in enumerate(rows):
            table.add_row(section if index == 0 else "", label, _readable(figures[key]))
        table.add_section()
    console.print(table)


def demo(
    count: int = typer.Option(100_000, "--count", "-n", help="Events to produce."),
    duplicates: float = typer.Option(0.006, "--duplicates", help="Share of events that are client retries."),
    invalid: float = typer.Option(0.001, "--invalid", help="Share of records with no usable id or bad JSON."),
    json_output: bool = JsonOption,
) -> None:
    """Run the whole pipeline on a local broker and prove the output is exactly once.

    Fetches Kafka from Maven Central (once), starts a broker on 127.0.0.1, produces Segment-like events with
    duplicates (retried right away and long after) and a few unusable records, runs the worker until the
    input is drained, reads the output back, prints the summary and stops the broker. Exit 1 if the output
    is not exactly once.

    Example: dedupectl demo --count 200000
    """
    from dedupectl.demo import run_demo  # the worker, Kafka and RocksDB: only when the demo runs

    with ProgressDisplay() as display:
        steps = DemoSteps(display, count)
        result = run_demo(
            count, duplicate_ratio=duplicates, invalid_ratio=invalid, step=steps.step, on_progress=steps.advance
        )
    figures = result.figures()
    if json_output:
        print_json(figures)
    else:
        print_summary(figures)
        verdict = "[green]exactly once[/]" if result.exactly_once else "[red]NOT exactly once[/]"
        console.print(f"Output check: {verdict}")
    if not result.exactly_once:
        raise typer.Exit(1)
    logging.shutdown()


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
