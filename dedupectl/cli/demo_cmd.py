"""``dedupectl demo``: the whole job end to end on a local broker."""

from __future__ import annotations

import logging

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dedupectl.cli.common import JsonOption, setup_logging
from dedupectl.cli.output import console, err_console, print_json, print_table
from dedupectl.demo import run_demo


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
    setup_logging("warning")
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task("deduplicating", total=count, visible=False)

        def step(text: str) -> None:
            progress.console.print(f"• {text}")

        def advance(summary) -> None:
            progress.update(task, completed=summary.consumed, visible=True)

        result = run_demo(count, duplicate_ratio=duplicates, invalid_ratio=invalid, step=step, on_progress=advance)
    figures = {
        "messages_in": result.sample.produced,
        "distinct_valid_ids_in": result.sample.distinct_ids,
        "duplicates_in": result.sample.duplicates,
        "invalid_in": result.sample.invalid,
        "published": result.run.published,
        "duplicates_dropped": result.run.duplicates,
        "dead_letters": result.run.dead_letters,
        "output_records": result.output.records,
        "output_ids_published_twice": result.output.duplicated_ids,
        "valid_ids_missing_from_output": result.output.missing_ids,
        "dead_letter_topic_records": result.dead_letters_in_topic,
        "messages_per_second": round(result.run.consumed / result.run.busy_seconds, 1)
        if result.run.busy_seconds
        else 0.0,
        "exactly_once": result.exactly_once,
    }
    if json_output:
        print_json(figures)
    else:
        print_table("dedupectl demo", ["figure", "value"], figures.items())
        verdict = "[green]exactly once[/]" if result.exactly_once else "[red]NOT exactly once[/]"
        console.print(f"Output check: {verdict}")
    if not result.exactly_once:
        raise typer.Exit(1)
    logging.shutdown()


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
