"""``dedupectl reattach``: move a partition's EBS volume to another instance."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dedupectl.cli.json_errors import JsonErrorsCommand, json_errors
from dedupectl.cli.options import CheckedDataDirOption, EndpointOption, JsonOption, RegionOption
from dedupectl.cli.output import err_console, print_json, print_table

if TYPE_CHECKING:  # snapshots.* load boto3 and RocksDB: imported when the command runs, not for --help
    from snapshots.reattach import Step


def _print_step(step: Step) -> None:
    mark = {"done": "[green]✓[/]", "planned": "[cyan]…[/]", "skipped": "[yellow]-[/]"}.get(step.status, "")
    err_console.print(f"{mark} {step.name} ({step.seconds:.1f}s): {step.detail}", highlight=False)


def reattach(
    partition: int = typer.Option(..., "--partition", "-p", help="The partition the volume holds."),
    volume: str = typer.Option(..., "--volume", help="EBS volume id (vol-…)."),
    to_instance: str = typer.Option(..., "--to-instance", help="Instance to attach it to (i-…)."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="Input topic (checked against the volume's tag)."),
    data_dir: Path | None = CheckedDataDirOption,
    device: str = typer.Option("/dev/sdf", "--device", help="Device name on the target instance."),
    stop_worker: bool = typer.Option(
        False, "--stop-worker", metavar="", help="SIGTERM the partition's live worker and wait."
    ),
    unmount: bool = typer.Option(
        False, "--unmount", metavar="", help="umount the data directory's filesystem before detaching."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", metavar="", help="Run the checks and print the plan; change nothing."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for each detach/attach."),
    poll_interval: float = typer.Option(2.0, "--poll-interval", help="Seconds between EC2 state checks."),
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """Move a partition's EBS volume to another instance: check, (stop the worker,) detach, attach.

    Example: dedupectl reattach --partition 3 --volume vol-0abc --to-instance i-0def -d /var/lib/dedupectl
    """
    from snapshots.backends import AwsOptions
    from snapshots.reattach import ReattachRequest, reattach_volume

    request = ReattachRequest(
        partition=partition,
        volume_id=volume,
        to_instance=to_instance,
        topic=topic,
        data_dir=data_dir,
        device=device,
        stop_worker=stop_worker,
        unmount=unmount,
        dry_run=dry_run,
        timeout_s=timeout,
        poll_s=poll_interval,
    )
    with json_errors(json_output):
        result = reattach_volume(request, aws=AwsOptions(region=region, endpoint_url=endpoint_url), on_step=_print_step)
    if json_output:
        print_json(result)
        return
    title = "reattach plan (dry run)" if result.dry_run else f"reattached in {result.total_seconds:.1f}s"
    print_table(
        f"{title}: {result.volume_id} {result.from_instance or '-'} -> {result.to_instance}",
        ["step", "status", "seconds", "detail"],
        [(s.name, s.status, f"{s.seconds:.2f}", s.detail) for s in result.steps],
    )


def register(app: typer.Typer) -> None:
    app.command("reattach", cls=JsonErrorsCommand)(reattach)
