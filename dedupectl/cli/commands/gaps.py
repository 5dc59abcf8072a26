"""``accept-gap``, and the output gaps ``window`` shows under its table: a partition a worker refused, and the
gaps operators accepted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from dedupectl.cli.options import DataDirOption, JsonOption, StoreTopicOption
from dedupectl.cli.output import err_console, print_json, print_table, when
from store.codec import GAP_RETENTION, OutputGap
from store.selection import select_stores

if TYPE_CHECKING:
    from store.window import WindowInfo


def gap_text(gap: OutputGap) -> str:
    if gap.kind == GAP_RETENTION:
        return f"retention deleted output offsets {gap.covered}-{gap.low - 1}"
    return f"the output ends at offset {gap.end}, below offset {gap.covered} the store covered"


def print_gaps(infos: Sequence[WindowInfo], data_dir: Path) -> None:
    """Under the window table: partitions a worker refuses, and the gaps operators accepted."""
    for info in infos:
        if info.refused_gap is not None:
            err_console.print(
                f"partition {info.partition}: [red]REFUSED[/] by the worker since "
                f"{when(info.refused_gap.found_ms)}: {gap_text(info.refused_gap)}: restore a newer snapshot, "
                f"rebuild the store, or accept the gap (dedupectl accept-gap -d {escape(str(data_dir))} "
                f"-t {info.topic} -p {info.partition} --reason …): see docs/runbooks/worker-crashed.md",
                highlight=False,
                soft_wrap=True,
            )
        if info.accepted_gaps:
            last = info.accepted_gaps[-1]
            earlier = f" ({len(info.accepted_gaps) - 1} earlier)" if len(info.accepted_gaps) > 1 else ""
            err_console.print(
                f"partition {info.partition}: output gap accepted {when(last.accepted_ms)} by {escape(last.by)}"
                f"{earlier}: {gap_text(last.gap)} ({escape(last.reason)}); ids published in it may be published "
                "once more",
                highlight=False,
                soft_wrap=True,
            )


def accept_gap(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] = typer.Option(
        ..., "--partition", "-p", help="A partition the worker refused (repeatable; never every partition)."
    ),
    reason: str = typer.Option(..., "--reason", help="Why: kept in the store with the gap, who and when."),
    json_output: bool = JsonOption,
) -> None:
    """Accept the output gap a worker refused a partition for; recovery then resumes at the first offset the
    output holds. Not repeat-safe: ids published in the gap are not in the store, and a later copy of one
    of them is published once more.

    Prefer restoring a newer snapshot, or rebuilding the store from the output. Needs the worker stopped.

    Example: dedupectl accept-gap -d /var/lib/dedupectl -p 3 --reason "restored an old snapshot"
    """
    from store.operations import accept_gaps

    outcomes = accept_gaps(select_stores(data_dir, topic, partition), reason)
    if json_output:
        print_json(outcomes)
        return
    print_table(
        "output gaps accepted",
        ["partition", "gap", "covered output offset", "by", "reason"],
        [
            (
                o.partition,
                gap_text(o.accepted.gap),
                f"{o.covered_before} → {o.covered_after}",
                o.accepted.by,
                o.accepted.reason,
            )
            for o in outcomes
        ],
    )
    err_console.print(
        "recovery resumes at the covered output offset when the worker starts; ids published in the gap may be "
        "published once more (`dedupectl window` shows the acceptance)",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("accept-gap")(accept_gap)
