"""Local-directory snapshots: create, list, verify, restore, prune; corruption and refusals; the schedule."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from dedupectl.errors import ConfigError
from snapshots.backends import SnapshotInfo
from snapshots.catalog import select_for_pruning
from snapshots.checkpoint import take_checkpoint
from snapshots.ids import new_snapshot_id, parse_snapshot_id
from snapshots.schedule import ScheduleConfig, SnapshotSchedule
from store.dedup_store import DedupStore
from store.layout import store_path
from store.sizes import parse_duration


def create(cli, data_dir: Path, *args: str) -> list[dict]:
    result = cli("snapshot", "create", "-d", str(data_dir), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def ids_of(path: Path) -> list[tuple[int, bytes]]:
    with DedupStore.open_secondary(path) as store:
        return list(store.iter_by_seq())


def sst_name(snapshot_dir: Path) -> str:
    return sorted(p.name for p in (snapshot_dir / "store").iterdir() if p.suffix == ".sst")[-1]


def test_create_list_verify_restore_round_trip(cli, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "orders", 0, 12_000)
    make_store(data_dir, "orders", 1, 3_000)

    created = create(cli, data_dir, "--all")
    summary = [(c["partition"], c["id_count"], c["output_offset"]) for c in created]
    assert summary == [(0, 12_000, 12_000), (1, 3_000, 3_000)]
    assert all(c["taken_by"].startswith("this process") for c in created)
    assert all(Path(c["location"]).parent == data_dir / "snapshots" for c in created)
    assert all(c["state"] == "completed" for c in created), "one word for a usable snapshot"
    assert sorted(p.name for p in data_dir.iterdir()) == ["orders-0", "orders-1", "snapshots"], "no empty leftovers"

    listed = json.loads(cli("snapshot", "list", "-d", str(data_dir), "--json").stdout)
    assert [item["snapshot_id"] for item in listed] == [c["snapshot_id"] for c in created]
    table = cli("snapshot", "list", "-d", str(data_dir))
    assert "12,000" in table.stdout and "3,000" in table.stdout and "complete" in table.stdout

    first = created[0]["snapshot_id"]
    verified = json.loads(cli("snapshot", "verify", first, "-d", str(data_dir), "--json").stdout)
    assert verified["ok"] and verified["problems"] == [] and verified["files_checked"] >= 4

    target = tmp_path / "new-host"
    restored = cli("snapshot", "restore", first, "--from", str(data_dir / "snapshots"), "-d", str(target), "--json")
    assert restored.exit_code == 0, restored.stderr
    assert json.loads(restored.stdout)["output_offset"] == 12_000
    assert ids_of(store_path(target, "orders", 0)) == ids_of(store_path(data_dir, "orders", 0))


def test_checkpoint_is_hard_links_but_the_published_snapshot_is_a_copy(cli, tmp_path, make_store):
    data_dir = tmp_path / "data"
    live = make_store(data_dir, "links", 0, 20_000)
    with DedupStore.open_existing(live) as store:
        facts = take_checkpoint(store, tmp_path / "checkpoint")
        assert facts.next_seq == 20_000 and facts.output_offset == 20_000
    live_inodes = {p.stat().st_ino for p in live.glob("*.sst")}
    checkpoint_inodes = {p.stat().st_ino for p in (tmp_path / "checkpoint").glob("*.sst")}
    assert checkpoint_inodes and checkpoint_inodes <= live_inodes, "the checkpoint links the live SSTs"

    (created,) = create(cli, data_dir, "-p", "0")
    snapshot_inodes = {p.stat().st_ino for p in (Path(created["location"]) / "store").glob("*.sst")}
    assert snapshot_inodes and not snapshot_inodes & live_inodes, "a snapshot must not share the live store's fate"


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "missing"])
def test_damaged_file_is_named_by_verify_and_refused_by_restore(cli, tmp_path, damage, make_store, tree_digest):
    data_dir = tmp_path / "data"
    make_store(data_dir, "pay", 0, 8_000)
    (created,) = create(cli, data_dir, "-p", "0", "--to", str(tmp_path / "backups"), "--mkdir")
    snapshot_id = created["snapshot_id"]
    snapshot_dir = tmp_path / "backups" / snapshot_id
    name = sst_name(snapshot_dir)
    victim = snapshot_dir / "store" / name
    data = victim.read_bytes()
    if damage == "corrupt":
        victim.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "truncated":
        victim.write_bytes(data[: len(data) // 2])
    else:
        victim.unlink()

    verify = cli("snapshot", "verify", snapshot_id, "--from", str(tmp_path / "backups"))
    assert verify.exit_code == 2
    assert f"file store/{name} is {damage}" in verify.stderr
    assert len(verify.stderr.strip().splitlines()) == 1

    # restoring over an existing (stopped) store with --replace: refused, and that store is left as it was
    live = store_path(data_dir, "pay", 0)
    before = tree_digest(live)
    restore = cli(
        "snapshot", "restore", snapshot_id, "--from", str(tmp_path / "backups"), "-d", str(data_dir), "--replace"
    )
    assert restore.exit_code == 2
    assert f"file store/{name} is {damage}" in restore.stderr and "nothing was placed" in restore.stderr
    assert tree_digest(live) == before
    assert sorted(p.name for p in data_dir.iterdir()) == ["pay-0"], "no partial restore left"


def test_restore_refuses_a_store_served_by_a_live_worker(cli, tmp_path, make_store, tree_digest):
    data_dir = tmp_path / "data"
    make_store(data_dir, "live", 0, 1_000)
    (created,) = create(cli, data_dir, "-p", "0")
    status = {
        "pid": os.getpid(),  # this test process stands for the worker: alive and started before the file
        "host": socket.gethostname(),
        "worker_id": "w7",
        "input_topic": "live",
        "partitions": [0],
        "updated_at": time.time(),
    }
    (data_dir / "worker-w7.json").write_text(json.dumps(status))
    before = tree_digest(store_path(data_dir, "live", 0))
    result = cli("snapshot", "restore", created["snapshot_id"], "-d", str(data_dir), "--replace")
    assert result.exit_code == 2
    assert "refusing to restore over a live store: worker 'w7'" in result.stderr
    assert result.stderr.rstrip().endswith("stop that worker first; nothing was changed"), "no store it holds"
    assert tree_digest(store_path(data_dir, "live", 0)) == before

    (data_dir / "worker-w7.json").unlink()  # the worker stopped
    refused = cli("snapshot", "restore", created["snapshot_id"], "-d", str(data_dir))
    assert refused.exit_code == 2 and "a store already exists" in refused.stderr and "--replace" in refused.stderr
    replaced = cli("snapshot", "restore", created["snapshot_id"], "-d", str(data_dir), "--replace", "--json")
    assert replaced.exit_code == 0, replaced.stderr
    aside = Path(json.loads(replaced.stdout)["moved_aside"])
    assert aside.name.startswith("live-0.replaced-") and (aside / "CURRENT").exists()


def test_bad_input_gives_one_line_errors(cli, cli_process, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "bad", 0, 100)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    cases = [
        (("snapshot", "verify", "bad-0-20260101T000000.000Z", "-d", str(data_dir)), "no snapshot bad-0-20260101"),
        (("snapshot", "restore", "garbage", "-d", str(data_dir)), "'garbage' is not a snapshot id"),
        (("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(blocker / "x")), "x does not exist"),
        (("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(blocker / "x"), "--mkdir"), "cannot be"),
        (("snapshot", "create", "-d", str(data_dir), "-p", "5"), "no store for partition(s) 5 of bad"),
        (("snapshot", "create", "-d", str(data_dir)), "pass --partition P (repeatable) or --all"),
        (("snapshot", "prune", "-d", str(data_dir)), "prune needs --keep N and/or --older-than"),
        (("snapshot", "prune", "-d", str(data_dir), "--older-than", "soon"), "is not a duration"),
    ]
    for args, message in cases:
        result = cli(*args)
        assert result.exit_code == 2, (args, result)
        assert message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (blocker.parent / "data" / "snapshots").exists(), "no checkpoint taken for a bad destination"

    # and through the real console entry point, in its own process
    result = cli_process("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(blocker / "x"), "--mkdir")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: snapshot destination") and "Not a directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_prune_keeps_the_newest_per_partition(cli, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "pr", 0, 500)
    make_store(data_dir, "pr", 1, 500)
    ids = [create(cli, data_dir, "-p", "0")[0]["snapshot_id"] for _ in range(3)]
    only_p1 = create(cli, data_dir, "-p", "1")[0]["snapshot_id"]

    dry = json.loads(cli("snapshot", "prune", "-d", str(data_dir), "--keep", "1", "--dry-run", "--json").stdout)
    assert [d["snapshot_id"] for d in dry["deleted"]] == ids[:2] and dry["dry_run"]
    assert len(json.loads(cli("snapshot", "list", "-d", str(data_dir), "--json").stdout)) == 4

    # leftovers of publishes that died: no manifest; removed once a day old, never listed
    abandoned = str(new_snapshot_id("pr", 0, int(time.time() * 1000) - 2 * 86_400_000))
    (data_dir / "snapshots" / f".{abandoned}.partial" / "store").mkdir(parents=True)
    recent = str(new_snapshot_id("pr", 1, int(time.time() * 1000) - 60_000))
    (data_dir / "snapshots" / recent / "store").mkdir(parents=True)

    nothing_old = json.loads(cli("snapshot", "prune", "-d", str(data_dir), "--older-than", "1d", "--json").stdout)
    assert nothing_old["deleted"] == [] and nothing_old["incomplete_deleted"] == [abandoned]
    assert not (data_dir / "snapshots" / f".{abandoned}.partial").exists()
    assert (data_dir / "snapshots" / recent).exists(), "a recent incomplete one may still be uploading"
    pruned = json.loads(cli("snapshot", "prune", "-d", str(data_dir), "--keep", "2", "--json").stdout)
    assert [d["snapshot_id"] for d in pruned["deleted"]] == ids[:1]
    remaining = [i["snapshot_id"] for i in json.loads(cli("snapshot", "list", "-d", str(data_dir), "--json").stdout)]
    assert remaining == [*ids[1:], only_p1]
    assert not (data_dir / "snapshots" / ids[0]).exists()


def test_prune_selection_by_age_never_takes_the_newest():
    day = 86_400_000
    now = 100 * day

    def info(partition: int, age_days: float) -> SnapshotInfo:
        created = now - int(age_days * day)
        return SnapshotInfo(str(new_snapshot_id("t", partition, created)), "t", partition, 0, 0, 0, 0, created, "x")

    infos = [info(0, 30), info(0, 10), info(0, 1), info(1, 40)]
    by_age = select_for_pruning(infos, keep=None, older_than_s=7 * 86400, now_ms=now)
    assert [(i.partition, round((now - i.created_ms) / day)) for i in by_age] == [(0, 30), (0, 10)]
    both = select_for_pruning(infos, keep=2, older_than_s=7 * 86400, now_ms=now)
    assert [round((now - i.created_ms) / day) for i in both] == [30]
    with pytest.raises(ConfigError, match="at least 1"):
        select_for_pruning(infos, keep=0, older_than_s=None, now_ms=now)


def test_schedule_snapshots_between_batches_and_survives_failures(tmp_path, make_store):
    data_dir = tmp_path / "data"
    clock = [1000.0]
    path = make_store(data_dir, "sched", 0, 2_000)
    destination = tmp_path / "hourly"
    destination.mkdir()
    published: list[int] = []
    schedule = SnapshotSchedule(
        data_dir,
        "sched",
        ScheduleConfig(every_s=3600, destination=str(destination), keep=2),
        clock=lambda: clock[0],
        on_published=lambda: published.append(1),
    )
    with DedupStore.open_existing(path) as store:
        schedule.maybe_run({0: store})
        assert schedule.stats.rounds == 0, "not due before an hour has passed"
        for round_ in range(3):
            clock[0] += 3600
            store.record([f"more-{round_}".encode()], [1], output_offset=2_001 + round_)  # processing goes on
            schedule.maybe_run({0: store})
            assert schedule.wait(60)
    schedule.close()
    assert schedule.stats.published == 3 and schedule.stats.failed == 0 and len(published) == 3
    kept = sorted(destination.iterdir())
    assert len(kept) == 2, "keep=2 prunes the oldest"
    manifest = json.loads((kept[-1] / "manifest.json").read_text())
    assert manifest["output_offset"] == 2_003 and manifest["id_count"] == 2_003

    # the backup disk goes away after the start: the round fails, takes no checkpoint, recreates nothing
    backup_disk = tmp_path / "backup-disk"
    backup_disk.mkdir()
    failed_steps: list[str] = []
    failing = SnapshotSchedule(
        data_dir,
        "sched",
        ScheduleConfig(every_s=60, destination=str(backup_disk)),
        clock=lambda: clock[0],
        on_failure=failed_steps.append,
    )
    backup_disk.rmdir()
    with DedupStore.open_existing(path) as store:
        clock[0] += 60
        failing.maybe_run({0: store})  # must not raise into the worker
        assert failing.wait(60)
        store.record([b"after-failure"], [1])
    failing.close()
    assert failing.stats.failed == 1 and failing.stats.published == 0
    assert failed_steps == ["round"], "told to the worker, which counts it in its metrics"
    assert f"snapshot destination {backup_disk} does not exist (any more)" in failing.stats.last_error
    assert not backup_disk.exists(), "a vanished destination is not recreated on the data disk"
    assert not (data_dir / ".snapshot-staging").exists(), "no checkpoint taken for nowhere to go"


def test_snapshot_ids_sort_by_time_and_parse_back():
    earlier = new_snapshot_id("my-topic.v2", 12, 1_767_225_600_000)
    later = new_snapshot_id("my-topic.v2", 12, 1_767_225_600_001)
    assert str(earlier) == "my-topic.v2-12-20260101T000000.000Z"
    assert str(earlier) < str(later)
    assert parse_snapshot_id(str(later)) == later
    assert parse_duration("90s") == 90 and parse_duration("1h") == 3600 and parse_duration("7d") == 604_800
    with pytest.raises(ConfigError):
        parse_duration("-1h")
