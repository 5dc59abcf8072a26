"""S3 snapshots against the session's moto server: upload, list, verify, restore, prune; damaged objects;
missing buckets and credentials."""

from __future__ import annotations

import json
import os
import time

import boto3
import pytest

from snapshots.backends import AwsOptions, S3Backend, TransferSettings
from snapshots.checkpoint import CheckpointFacts
from snapshots.create import build_manifest
from snapshots.ids import new_snapshot_id
from snapshots.progress import NO_PROGRESS
from store.dedup_store import DedupStore
from store.layout import store_path

MiB = 1024 * 1024


@pytest.fixture
def bucket(aws_env, unique_name) -> str:
    name = unique_name("snapshots")
    boto3.client("s3", endpoint_url=aws_env).create_bucket(Bucket=name)
    return name


def s3(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint)


def ids_of(path) -> list[tuple[int, bytes]]:
    with DedupStore.open_secondary(path) as store:
        return list(store.iter_by_seq())


def test_s3_upload_list_verify_restore_prune(cli, aws_env, bucket, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "clicks", 0, 20_000)
    make_store(data_dir, "clicks", 1, 4_000)
    destination = f"s3://{bucket}/prod/dedupectl"
    endpoint = ["--endpoint-url", aws_env]

    result = cli("snapshot", "create", "-d", str(data_dir), "--all", "--to", destination, *endpoint, "--json")
    assert result.exit_code == 0, result.stderr
    first = json.loads(result.stdout)
    assert [c["location"] for c in first] == [f"{destination}/{c['snapshot_id']}" for c in first]
    keys = {o["Key"] for o in s3(aws_env).list_objects_v2(Bucket=bucket, Prefix="prod/dedupectl/")["Contents"]}
    assert f"prod/dedupectl/{first[0]['snapshot_id']}/manifest.json" in keys
    assert any(key.endswith(".sst") and "/store/" in key for key in keys)

    second = json.loads(
        cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", destination, *endpoint, "--json").stdout
    )
    listed = json.loads(cli("snapshot", "list", "--from", destination, *endpoint, "--json").stdout)
    expected = [first[0]["snapshot_id"], second[0]["snapshot_id"], first[1]["snapshot_id"]]
    assert [i["snapshot_id"] for i in listed] == expected
    assert [i["id_count"] for i in listed] == [20_000, 20_000, 4_000]

    verified = cli("snapshot", "verify", second[0]["snapshot_id"], "--from", destination, *endpoint, "--json")
    report = json.loads(verified.stdout)
    assert verified.exit_code == 0 and report["ok"] and report["bytes_checked"] == second[0]["total_bytes"]

    target = tmp_path / "elsewhere"
    restored = cli(
        "snapshot", "restore", second[0]["snapshot_id"], "--from", destination, "-d", str(target), *endpoint, "--json"
    )
    assert restored.exit_code == 0, restored.stderr
    assert ids_of(store_path(target, "clicks", 0)) == ids_of(store_path(data_dir, "clicks", 0))

    abandoned = str(new_snapshot_id("clicks", 1, int(time.time() * 1000) - 3 * 86_400_000))
    s3(aws_env).put_object(Bucket=bucket, Key=f"prod/dedupectl/{abandoned}/store/000007.sst", Body=b"partial")

    pruned = json.loads(cli("snapshot", "prune", "--from", destination, "--keep", "1", *endpoint, "--json").stdout)
    assert [d["snapshot_id"] for d in pruned["deleted"]] == [first[0]["snapshot_id"]]
    assert pruned["incomplete_deleted"] == [abandoned], "an upload without a manifest, days old"
    left = s3(aws_env).list_objects_v2(Bucket=bucket, Prefix=f"prod/dedupectl/{first[0]['snapshot_id']}/")
    assert left["KeyCount"] == 0, "every object of a pruned snapshot is deleted"
    listed = json.loads(cli("snapshot", "list", "--from", destination, *endpoint, "--json").stdout)
    assert [i["snapshot_id"] for i in listed] == [second[0]["snapshot_id"], first[1]["snapshot_id"]]


def test_large_files_go_multipart_and_come_back_verified(aws_env, bucket, tmp_path):
    """Files over the threshold are uploaded in concurrent parts; the download is checked file by file."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "000042.sst").write_bytes(os.urandom(13 * MiB))
    (checkpoint / "CURRENT").write_bytes(b"MANIFEST-000001\n")
    facts = CheckpointFacts("big", 0, 1, 10, 0, 10, 10, None, 1_767_225_600_000)
    manifest = build_manifest("big-0-20260101T000000.000Z", facts, checkpoint)
    backend = S3Backend(
        f"s3://{bucket}/multi",
        AwsOptions(endpoint_url=aws_env),
        TransferSettings(multipart_threshold=5 * MiB, chunk_size=5 * MiB, concurrency=4),
    )
    backend.publish(checkpoint, manifest, NO_PROGRESS)
    head = s3(aws_env).head_object(Bucket=bucket, Key="multi/big-0-20260101T000000.000Z/store/000042.sst")
    assert head["ETag"].strip('"').endswith("-3"), "uploaded as a 3-part multipart object"
    assert head["Metadata"]["sha256"] == manifest.files[0].sha256

    fetched = backend.fetch(manifest.snapshot_id, tmp_path / "back", NO_PROGRESS)
    assert fetched == manifest
    assert (tmp_path / "back" / "000042.sst").read_bytes() == (checkpoint / "000042.sst").read_bytes()


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_damaged_object_is_named_by_verify_and_refused_by_restore(
    cli, aws_env, bucket, tmp_path, damage, make_store, tree_digest
):
    data_dir = tmp_path / "data"
    live = make_store(data_dir, "pay", 0, 10_000)
    destination = f"s3://{bucket}/snaps"
    endpoint = ["--endpoint-url", aws_env]
    created = json.loads(
        cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", destination, *endpoint, "--json").stdout
    )[0]
    snapshot_id = created["snapshot_id"]
    client = s3(aws_env)
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"snaps/{snapshot_id}/store/")["Contents"]
    victim = max((o for o in listing if o["Key"].endswith(".sst")), key=lambda o: o["Size"])
    name = victim["Key"].rsplit("/", 1)[1]
    body = client.get_object(Bucket=bucket, Key=victim["Key"])["Body"].read()
    damaged = body[:50] + bytes([body[50] ^ 0x01]) + body[51:] if damage == "corrupt" else body[:-10]
    client.put_object(Bucket=bucket, Key=victim["Key"], Body=damaged)

    verify = cli("snapshot", "verify", snapshot_id, "--from", destination, *endpoint)
    assert verify.exit_code == 2
    assert f"snapshot {snapshot_id}: file store/{name} is {damage}" in verify.stderr
    assert len(verify.stderr.strip().splitlines()) == 1

    before = tree_digest(live)
    restore = cli(
        "snapshot", "restore", snapshot_id, "--from", destination, "-d", str(data_dir), "--replace", *endpoint
    )
    assert restore.exit_code == 2
    assert f"file store/{name} is {damage}" in restore.stderr
    assert tree_digest(live) == before, "the store in place is not touched"
    assert not list(data_dir.glob(".restore-*")), "no partial download left behind"


def test_missing_bucket_and_credentials_are_one_line_errors(cli, cli_process, aws_env, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "nob", 0, 100)
    args = ["-d", str(data_dir), "-p", "0", "--to", "s3://no-such-bucket-x/p", "--endpoint-url", aws_env]
    missing = cli("snapshot", "create", *args)
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        "error: S3 bucket 'no-such-bucket-x' does not exist: create it first, or fix the s3:// destination"
    )
    assert not (data_dir / "snapshots").exists() and not any((data_dir / ".snapshot-staging").glob("*"))

    listing = cli("snapshot", "list", "--from", "s3://no-such-bucket-x/p", "--endpoint-url", aws_env)
    assert listing.exit_code == 2 and "S3 bucket 'no-such-bucket-x' does not exist" in listing.stderr

    no_credentials = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
    }
    args = ["--from", "s3://any-bucket/p", "--endpoint-url", aws_env]
    result = cli_process("snapshot", "list", *args, env=no_credentials)
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: no AWS credentials found:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_endpoint_from_the_environment(cli, aws_env, bucket, monkeypatch, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "envy", 0, 100)
    monkeypatch.setenv("DEDUPECTL_S3_ENDPOINT_URL", aws_env)
    created = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"s3://{bucket}", "--json")
    assert created.exit_code == 0, created.stderr
    (item,) = json.loads(cli("snapshot", "list", "--from", f"s3://{bucket}", "--json").stdout)
    assert item["snapshot_id"] == json.loads(created.stdout)[0]["snapshot_id"]
    assert item["location"] == f"s3://{bucket}/{item['snapshot_id']}"
