"""``dedupectl snapshot create|list|verify|restore|prune``."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import typer

from dedupectl.cli.helpformat import Typer
from dedupectl.cli.json_errors import JsonErrorsCommand, json_errors
from dedupectl.cli.options import (
    DataDirOption,
    EndpointOption,
    JsonOption,
    RegionOption,
    RestoreDataDirOption,
    StoreTopicOption,
    given_once,
)
from dedupectl.cli.output import console, print_json, print_table
from dedupectl.cli.progress import transfers
from dedupectl.errors import ConfigError
from store.sizes import format_duration, format_size, parse_duration

# snapshots.* load boto3 and RocksDB: each command imports what it uses when it runs, not for --help

snapshot_app = Typer(help="Snapshots of partition stores: create, list, verify, restore, prune.", no_args_is_help=True)

# --from and --to are a range of offsets or times (reconcile, trace, audit, replay); a snapshot's place is
# its --location, and the spellings the snapshot commands shipped with stay accepted, hidden
LocationOption = typer.Option(
    None,
    "--location",
    help="Where snapshots are: a directory (default <data-dir>/snapshots), s3://bucket/prefix, ebs:.",
)
FromAliasOption = typer.Option(None, "--from", hidden=True)
OnePartitionOption = typer.Option(None, "--partition", "-p", help="Only this partition.")


@snapshot_app.command("create", cls=JsonErrorsCommand)
def create(
    partition: list[int] | None = typer.Option(None, "--partition", "-p", help="Partition to snapshot (repeatable)."),
    all_partitions: bool = typer.Option(
        False, "--all", metavar="", help="Snapshot every partition store in the data directory."
    ),
    location: str | None = typer.Option(
        None,
        "--location",
        help="Destination: an existing directory (default <data-dir>/snapshots), s3://bucket/prefix, ebs:vol-….",
    ),
    to: str | None = typer.Option(None, "--to", hidden=True),
    mkdir: bool = typer.Option(
        False, "--mkdir", metavar="", help="Create the --location directory if it does not exist."
    ),
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    wait: float = typer.Option(60.0, "--wait", help="Seconds to wait for a live worker to take the checkpoint."),
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """Checkpoint partition stores (while their worker runs) and publish them with a manifest.

    A live worker takes the checkpoint itself between batches; an idle store is checkpointed here.

    Example: dedupectl snapshot create -d /var/lib/dedupectl --partition 3 --location s3://backups/dedupectl
    """
    from snapshots.backends import AwsOptions
    from snapshots.create import create_snapshots

    with json_errors(json_output), transfers() as progress:
        if bool(partition) == all_partitions:
            raise ConfigError(
                "pass --partition P (repeatable) or --all", "e.g. dedupectl snapshot create --partition 3"
            )
        created = create_snapshots(
            data_dir,
            topic=topic,
            partitions=None if all_partitions else list(partition or []),
            destination=given_once(location, to, "--location", "--to"),
            create_destination=mkdir,
            aws=AwsOptions(region=region, endpoint_url=endpoint_url),
            wait_s=wait,
            progress=progress,
        )
    if json_output:
        print_json(created)
        return
    print_table(
        "snapshots created",
        ["id", "partition", "offsets (in / out)", "ids", "size", "window", "location"],
        [
            (
                c.snapshot_id,
                c.partition,
                f"{c.input_offset} / {c.output_offset}",
                f"{c.id_count:,}",
                format_size(c.total_bytes),
                format_duration(c.effective_window_s),
                c.location,
            )
            for c in created
        ],
        whole=("id", "location"),
    )


@snapshot_app.command("list", cls=JsonErrorsCommand)
def list_(
    location: str | None = LocationOption,
    source: str | None = FromAliasOption,
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: int | None = OnePartitionOption,
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """List complete snapshots, oldest first per partition.

    Example: dedupectl snapshot list --location s3://backups/dedupectl --partition 3
    """
    from snapshots.backends import AwsOptions
    from snapshots.catalog import empty_location_note, list_snapshots

    source = given_once(location, source, "--location", "--from")

    aws = AwsOptions(region=region, endpoint_url=endpoint_url)
    with json_errors(json_output):
        infos = list_snapshots(source, data_dir=data_dir, topic=topic, partition=partition, aws=aws)
        note = None
        if not infos:
            note = empty_location_note(source, data_dir=data_dir, aws=aws)
            if topic is not None or partition is not None:
                shown = f"{topic or ''}{f'[{partition}]' if partition is not None else ''}"
                found = list_snapshots(source, data_dir=data_dir, aws=aws)
                note = f"no snapshots of {shown} ({len(found)} of others)" if found else note
    if json_output:
        print_json(infos)
        return
    if note is not None:
        console.print(note, highlight=False, markup=False, soft_wrap=True)
        return
    now = time.time()
    print_table(
        f"snapshots in {source or data_dir / 'snapshots'}",
        ["id", "offsets in / out", "ids", "size", "age", "state"],  # the id names topic and partition
        [
            (
                i.snapshot_id,
                f"{i.input_offset} / {i.output_offset}",
                f"{i.id_count:,}",
                format_size(i.total_bytes),
                format_duration(max(now - i.created_ms / 1000, 0)),  # a snapshot host whose clock runs ahead
                _state(i),
            )
            for i in infos
        ],
        whole=("id",),
    )


def _state(info) -> str:
    if info.problem is not None:
        return f"{info.state}: {info.problem}"
    return f"{info.state} ({info.location})" if info.location.startswith("snap-") else info.state


@snapshot_app.command("verify", cls=JsonErrorsCommand)
def verify(
    snapshot_id: str = typer.Argument(..., help="Snapshot id (see snapshot list)."),
    location: str | None = LocationOption,
    source: str | None = FromAliasOption,
    data_dir: Path = DataDirOption,
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """Re-check every file of a snapshot against its manifest (size and SHA-256); exit 2 naming a bad file.

    Example: dedupectl snapshot verify events-3-20260101T120000.000Z --location s3://backups/dedupectl
    """
    from snapshots.backends import AwsOptions
    from snapshots.catalog import require_ok, verify_snapshot

    source = given_once(location, source, "--location", "--from")

    with json_errors(json_output), transfers() as progress:
        report = verify_snapshot(
            source,
            snapshot_id,
            data_dir=data_dir,
            aws=AwsOptions(region=region, endpoint_url=endpoint_url),
            progress=progress,
        )
    if json_output:
        print_json({**asdict(report), "ok": report.ok})
    else:
        rows = [
            ("snapshot", report.snapshot_id),
            ("location", report.location),
            ("files checked", report.files_checked),
            ("bytes checked", format_size(report.bytes_checked)),
            ("result", "ok" if report.ok else f"{len(report.problems)} problem(s)"),
            *(("problem", problem) for problem in report.problems),
        ]
        if report.note:
            rows.append(("note", report.note))
        print_table("snapshot verify", ["check", "value"], rows)
    require_ok(report)


@snapshot_app.command("restore", cls=JsonErrorsCommand)
def restore(
    snapshot_id: str = typer.Argument(..., help="Snapshot id (see snapshot list)."),
    location: str | None = LocationOption,
    source: str | None = FromAliasOption,
    data_dir: Path | None = RestoreDataDirOption,
    replace: bool = typer.Option(
        False, "--replace", metavar="", help="Move an existing (stopped) store aside and replace it."
    ),
    availability_zone: str | None = typer.Option(
        None, "--availability-zone", help="EBS snapshots: create a volume from it in this zone."
    ),
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """Verify a snapshot and place it as its partition's store; the worker's recovery then catches it up.

    Refuses while a live worker serves the partition; never changes anything when a file is bad.

    Example: dedupectl snapshot restore events-3-20260101T120000.000Z --location s3://backups/dedupectl -d /data
    """
    from snapshots.backends import AwsOptions
    from snapshots.restore import restore_snapshot, restore_volume

    source = given_once(location, source, "--location", "--from")

    aws = AwsOptions(region=region, endpoint_url=endpoint_url)
    if availability_zone is not None:
        with json_errors(json_output):
            volume = restore_volume(source or "ebs:", snapshot_id, availability_zone, aws=aws)
        if json_output:
            print_json(volume)
            return
        print_table(
            "volume created from snapshot",
            ["snapshot", "EBS snapshot", "volume", "zone", "next"],
            [
                (
                    volume.snapshot_id,
                    volume.ebs_snapshot_id,
                    volume.volume_id,
                    volume.availability_zone,
                    f"attach it (dedupectl reattach --volume {volume.volume_id} …), mount it, then "
                    f"snapshot restore {snapshot_id} --location <mount>/snapshots",
                )
            ],
            whole=("snapshot", "EBS snapshot", "volume"),
        )
        return
    with json_errors(json_output):
        if data_dir is None:
            raise ConfigError("restore needs --data-dir (or DEDUPECTL_DATA_DIR)", "where to place the store")
        with transfers() as progress:
            result = restore_snapshot(source, snapshot_id, data_dir, replace=replace, aws=aws, progress=progress)
    if json_output:
        print_json(result)
        return
    rows = [
        ("snapshot", result.snapshot_id),
        ("store", result.store_path),
        ("partition", f"{result.topic}[{result.partition}]"),
        ("ids", f"{result.id_count:,}"),
        ("files verified", f"{result.files} ({format_size(result.total_bytes)})"),
        ("output offset", f"{result.output_offset}: the worker recovers from here on start"),
        ("seconds", f"{result.seconds:.1f}"),
    ]
    if result.moved_aside is not None:
        rows.append(("previous store kept at", result.moved_aside))
    print_table("snapshot restored", ["", ""], rows)


@snapshot_app.command("prune", cls=JsonErrorsCommand)
def prune(
    location: str | None = LocationOption,
    source: str | None = FromAliasOption,
    keep: int | None = typer.Option(None, "--keep", help="Keep the newest N snapshots of each partition."),
    older_than: str | None = typer.Option(None, "--older-than", help="Delete snapshots older than this (7d, 12h)."),
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: int | None = OnePartitionOption,
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="Show what would be deleted; delete nothing."),
    endpoint_url: str | None = EndpointOption,
    region: str | None = RegionOption,
    json_output: bool = JsonOption,
) -> None:
    """Delete old snapshots; the newest of each partition is always kept.

    Also removes uploads that never finished (no manifest) once they are a day old.

    With both --keep and --older-than, a snapshot goes only when it is beyond the newest N and that old.

    Example: dedupectl snapshot prune --location s3://backups/dedupectl --keep 24 --older-than 7d
    """
    from snapshots.backends import AwsOptions
    from snapshots.catalog import prune_snapshots

    source = given_once(location, source, "--location", "--from")

    with json_errors(json_output):
        result = prune_snapshots(
            source,
            keep=keep,
            older_than_s=None if older_than is None else parse_duration(older_than, what="--older-than", positive=True),
            data_dir=data_dir,
            topic=topic,
            partition=partition,
            dry_run=dry_run,
            aws=AwsOptions(region=region, endpoint_url=endpoint_url),
        )
    if json_output:
        print_json(result)
        return
    verb = "would delete" if dry_run else "deleted"
    rows = [(verb, i.snapshot_id, i.partition, i.location) for i in result.deleted]
    rows += [(f"{verb} (incomplete)", name, "", "") for name in result.incomplete_deleted]
    rows += [("kept", i.snapshot_id, i.partition, i.location) for i in result.kept]
    title = f"snapshot prune: {len(result.deleted)} {verb}"
    print_table(title, ["action", "id", "partition", "location"], rows, whole=("id", "location"))


def register(app: typer.Typer) -> None:
    app.add_typer(snapshot_app, name="snapshot")
