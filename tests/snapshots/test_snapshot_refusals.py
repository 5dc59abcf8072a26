"""What is not a backup is never reported as one: mistyped or missing destinations, volumes that do not hold the
store, snapshots stored under another snapshot's name, and errors that say what they are (credentials or a
permission, a bad endpoint), with the same line and exit code under --debug and an error object under --json."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import boto3
import pytest
import requests

from dedupectl.errors import ConfigError
from snapshots.schedule import ScheduleConfig, SnapshotSchedule
from store.dedup_store import DedupStore
from store.layout import store_path

MISTYPED = ["s3:/backups/x", "S3://backups/x", "gs://backups/x", "ebs://vol-0abc", "EBS:vol-0abc", "backup:2024"]


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def ids_of(path: Path) -> list[tuple[int, bytes]]:
    with DedupStore.open_secondary(path) as store:
        return list(store.iter_by_seq())


@pytest.fixture
def bucket(aws_env, unique_name) -> str:
    name = unique_name("refusals")
    boto3.client("s3", endpoint_url=aws_env).create_bucket(Bucket=name)
    return name


# -- destinations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("destination", MISTYPED)
def test_mistyped_destination_is_refused_with_the_accepted_forms(cli, tmp_path, make_store, monkeypatch, destination):
    monkeypatch.chdir(tmp_path)  # where a mistyped destination used to land as a relative directory
    data_dir = tmp_path / "data"
    make_store(data_dir, "typo", 0, 100)
    result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", destination)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert f"snapshot destination {destination!r}" in line
    assert "s3://bucket/prefix" in line and "ebs:vol-" in line and "file:///path" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"], "nothing written under the mistyped name"
    assert sorted(p.name for p in data_dir.iterdir()) == ["typo-0"], "no checkpoint taken"

    listing = cli("snapshot", "list", "--from", destination)
    assert listing.exit_code == 2 and f"snapshot destination {destination!r}" in one_error_line(listing.stderr)

    with pytest.raises(ConfigError, match="--snapshot-to"):
        SnapshotSchedule(data_dir, "typo", ScheduleConfig(every_s=3600, destination=destination))


def test_a_local_destination_must_exist_unless_mkdir(cli, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "dest", 0, 100)
    missing = tmp_path / "backup-disk" / "dedupectl"
    result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(missing))
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"error: snapshot destination {missing} does not exist: check the path and that its disk is mounted; "
        "create it (mkdir -p) or pass --mkdir"
    )
    assert not (tmp_path / "backup-disk").exists() and sorted(p.name for p in data_dir.iterdir()) == ["dest-0"]

    created = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(missing), "--mkdir", "--json")
    assert created.exit_code == 0, created.stderr
    assert (missing / json.loads(created.stdout)[0]["snapshot_id"] / "manifest.json").is_file()
    relative = cli("snapshot", "list", "--from", f"file://{missing}", "--json")
    assert len(json.loads(relative.stdout)) == 1


def test_worker_checks_its_snapshot_options_at_start(cli, tmp_path):
    data_dir = tmp_path / "data"
    base = ["run", "-b", "127.0.0.1:9", "-i", "in", "-o", "out", "-d", str(data_dir), "--log-level", "error"]
    missing = tmp_path / "not-mounted"
    cases = [
        (["--snapshot-every", "1h", "--snapshot-to", str(missing)], f"--snapshot-to {missing}: snapshot destination"),
        (["--snapshot-every", "1h", "--snapshot-to", "s3:/backups/x"], "is not a valid s3://bucket/prefix"),
        (
            ["--snapshot-keep", "3"],
            "--snapshot-keep applies to scheduled snapshots, which are off without --snapshot-every",
        ),
        (["--snapshot-to", str(tmp_path)], "--snapshot-to applies to scheduled snapshots"),
    ]
    for extra, message in cases:
        result = cli(*base, *extra)
        assert result.exit_code == 2, (extra, result)
        assert message in one_error_line(result.stderr), (extra, result.stderr)
    assert not missing.exists()


# -- EBS: only the volume that holds the store ----------------------------------------------------------


def test_ebs_snapshot_only_of_a_volume_that_holds_the_store(cli, ec2, tmp_path, make_store, unique_name):
    topic = unique_name("vol")
    data_dir = tmp_path / "data"
    make_store(data_dir, topic, 0, 100)
    endpoint = ["--endpoint-url", ec2.endpoint_url]
    instance = ec2.instance()

    def refused(volume: str) -> str:
        result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"ebs:{volume}", *endpoint)
        assert result.exit_code == 2, result
        found = ec2.client.describe_snapshots(OwnerIds=["self"], Filters=[{"Name": "volume-id", "Values": [volume]}])
        assert found["Snapshots"] == [], "no EBS snapshot of it"
        assert sorted(p.name for p in data_dir.iterdir()) == [f"{topic}-0"], "no checkpoint, no leftovers"
        return one_error_line(result.stderr)

    loose = ec2.volume({})
    assert f"volume {loose} is not attached to any instance (it is available)" in refused(loose)
    tagged_loose = ec2.volume({"dedupectl:topic": topic, "dedupectl:partition": "0"})
    assert f"volume {tagged_loose} is not attached to any instance" in refused(tagged_loose)
    other_disk = ec2.volume({}, attach_to=instance)
    line = refused(other_disk)
    assert f"the store in {data_dir} is not on volume {other_disk}" in line and "a tag is not proof" in line
    assert f"{data_dir} is on the root filesystem" in line and "is attached as /dev/sdf" in line
    tagged_other_disk = ec2.volume({"dedupectl:topic": topic, "dedupectl:partition": "0"}, attach_to=instance)
    assert f"the store in {data_dir} is not on volume {tagged_other_disk}" in refused(tagged_other_disk)

    def schedule(volume: str) -> SnapshotSchedule:  # a worker's --snapshot-to, checked at its start
        config = ScheduleConfig(every_s=3600, destination=f"ebs:{volume}", aws=_aws(ec2.endpoint_url))
        return SnapshotSchedule(data_dir, topic, config)

    with pytest.raises(ConfigError, match=f"--snapshot-to ebs:{loose}: volume {loose} is not attached"):
        schedule(loose)
    for volume in (other_disk, tagged_other_disk):
        with pytest.raises(ConfigError, match=f"the store in {data_dir} is not on volume {volume}"):
            schedule(volume)


def test_ebs_snapshot_and_reattach_refuse_a_tagged_volume_by_the_same_check(cli_process, ec2, tmp_path, make_store):
    """The data directory on the root filesystem, the volume tagged for its partition and attached beside it:
    both commands, run as the operator runs them, refuse with the same line, and nothing is snapshotted."""
    data_dir = tmp_path / "data"
    make_store(data_dir, "events", 3, 50)
    instance, target = ec2.instance(), ec2.instance()
    volume = ec2.volume({"dedupectl:topic": "events", "dedupectl:partition": "3"}, attach_to=instance)
    endpoint = ["--endpoint-url", ec2.endpoint_url]
    snapshot = cli_process("snapshot", "create", "-d", str(data_dir), "-p", "3", "--to", f"ebs:{volume}", *endpoint)
    reattach = cli_process(
        "reattach", "-p", "3", "--volume", volume, "--to-instance", target, "-d", str(data_dir), "--dry-run", *endpoint
    )
    assert snapshot.exit_code == 2 and reattach.exit_code == 2, (snapshot, reattach)
    line = one_error_line(snapshot.stderr)
    assert reattach.stderr.strip().splitlines()[-1] == line, "one check, one answer"
    assert line.startswith(f"error: the store in {data_dir} ") and f"volume {volume}: " in line
    assert "a tag is not proof" in line and "findmnt -T" in line
    found = ec2.client.describe_snapshots(Filters=[{"Name": "volume-id", "Values": [volume]}])
    assert found["Snapshots"] == [] and ec2.attached_to(volume) == instance


def _aws(endpoint: str):
    from snapshots.backends import AwsOptions

    return AwsOptions(endpoint_url=endpoint)


# -- a snapshot stored under another snapshot's name ----------------------------------------------------


def test_restore_and_verify_refuse_a_snapshot_stored_under_another_id(cli, tmp_path, make_store, tree_digest):
    data_dir = tmp_path / "data"
    make_store(data_dir, "ev2", 1, 3_000)
    make_store(data_dir, "ev2", 2, 500)
    backups = tmp_path / "backups"
    backups.mkdir()
    created = json.loads(
        cli("snapshot", "create", "-d", str(data_dir), "-p", "1", "--to", str(backups), "--json").stdout
    )
    original = created[0]["snapshot_id"]
    impostor = original.replace("ev2-1-", "ev2-2-")
    shutil.copytree(backups / original, backups / impostor)
    before = {p: tree_digest(store_path(data_dir, "ev2", p)) for p in (1, 2)}

    restore = cli("snapshot", "restore", impostor, "--from", str(backups), "-d", str(data_dir), "--replace")
    assert restore.exit_code == 2
    assert one_error_line(restore.stderr).startswith(
        f"error: snapshot {backups / impostor} is not what its name says: stored as {impostor} (ev2[2]) but its "
        f"manifest is for {original} (ev2[1])"
    )
    assert {p: tree_digest(store_path(data_dir, "ev2", p)) for p in (1, 2)} == before, "neither store touched"
    verify = cli("snapshot", "verify", impostor, "--from", str(backups))
    assert verify.exit_code == 2 and "is not what its name says" in one_error_line(verify.stderr)

    listed = json.loads(cli("snapshot", "list", "--from", str(backups), "--json").stdout)
    assert [(i["snapshot_id"], i["partition"], i["state"]) for i in listed] == [
        (original, 1, "completed"),
        (impostor, 2, "invalid"),
    ], "each id once, the copy under its own name and marked"
    pruned = json.loads(cli("snapshot", "prune", "--from", str(backups), "--keep", "1", "--json").stdout)
    assert pruned["deleted"] == [] and (backups / impostor).exists(), "an invalid copy never counts as the newest"

    restored = cli("snapshot", "restore", original, "--from", str(backups), "-d", str(tmp_path / "fresh"), "--json")
    assert restored.exit_code == 0, restored.stderr


def test_s3_restore_refuses_a_snapshot_copied_under_another_id(cli, aws_env, bucket, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "ev3", 1, 1_000)
    destination = f"s3://{bucket}/snaps"
    endpoint = ["--endpoint-url", aws_env]
    created = cli("snapshot", "create", "-d", str(data_dir), "-p", "1", "--to", destination, *endpoint, "--json")
    original = json.loads(created.stdout)[0]["snapshot_id"]
    impostor = original.replace("ev3-1-", "ev3-2-")
    client = boto3.client("s3", endpoint_url=aws_env)
    for item in client.list_objects_v2(Bucket=bucket, Prefix=f"snaps/{original}/")["Contents"]:
        key = item["Key"].replace(original, impostor)
        client.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": item["Key"]})
    target = tmp_path / "new-host"
    restore = cli("snapshot", "restore", impostor, "--from", destination, "-d", str(target), *endpoint)
    assert restore.exit_code == 2 and "is not what its name says" in one_error_line(restore.stderr)
    assert not target.exists(), "a failed restore leaves no directory behind"


# -- errors that say what they are ----------------------------------------------------------------------


@pytest.fixture
def moto_auth(aws_env):
    """IAM users on the moto server, then its request authentication switched on for this test only."""
    iam = boto3.client("iam", endpoint_url=aws_env)
    users = {}

    def user(name: str, actions: list[str]) -> dict[str, str]:
        iam.create_user(UserName=name)
        if actions:
            policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
            iam.put_user_policy(UserName=name, PolicyName="snapshots", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        users[name] = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        return users[name]

    yield user, f"{aws_env}/moto-api/reset-auth"
    requests.post(f"{aws_env}/moto-api/reset-auth", data=b"inf", timeout=10)  # every other test: no auth


def test_rejected_credentials_are_told_apart_from_a_missing_permission(
    cli, aws_env, bucket, moto_auth, monkeypatch, tmp_path, make_store, unique_name
):
    make_user, reset_auth = moto_auth
    nothing = make_user(unique_name("nothing"), [])
    list_only = make_user(unique_name("lister"), ["s3:ListBucket"])
    data_dir = tmp_path / "data"
    make_store(data_dir, "cred", 0, 100)
    args = ["snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"s3://{bucket}/p", "--endpoint-url", aws_env]
    requests.post(reset_auth, data=b"0", timeout=10)

    def attempt(credentials: dict[str, str]) -> str:
        for name, value in credentials.items():
            monkeypatch.setenv(name, value)
        result = cli(*args)
        assert result.exit_code == 2, result
        assert sorted(p.name for p in data_dir.iterdir()) == ["cred-0"], "no checkpoint paid for"
        return one_error_line(result.stderr)

    unknown = attempt({"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000", "AWS_SECRET_ACCESS_KEY": "x"})
    assert unknown.startswith("error: AWS rejected the credentials (InvalidAccessKeyId)")
    wrong_secret = attempt({**nothing, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert wrong_secret.startswith("error: AWS rejected the credentials (SignatureDoesNotMatch)")
    denied = attempt(nothing)
    assert denied.startswith("error: permission denied: these AWS credentials (arn:aws:iam::")
    assert f"may not call s3:ListBucket on s3://{bucket}/p/" in denied and "grant s3:ListBucket" in denied
    cannot_write = attempt(list_only)
    assert f"may not call s3:PutObject on s3://{bucket}/p/.dedupectl-write-check" in cannot_write


def test_listing_says_what_a_location_holds(cli, aws_env, bucket, tmp_path, make_store):
    missing = cli("snapshot", "list", "--from", str(tmp_path / "nonexistent"))
    assert missing.exit_code == 2
    assert one_error_line(missing.stderr).startswith(f"error: snapshot location {tmp_path / 'nonexistent'} does not")

    empty = tmp_path / "empty"
    empty.mkdir()
    said = cli("snapshot", "list", "--from", str(empty))
    assert (said.exit_code, said.stdout.strip()) == (0, f"no snapshots in {empty} (it is empty)")
    assert json.loads(cli("snapshot", "list", "--from", str(empty), "--json").stdout) == []

    data_dir = tmp_path / "data"
    make_store(data_dir, "lst", 0, 10)
    first = cli("snapshot", "list", "-d", str(data_dir))
    assert first.stdout.strip() == f"no snapshots in {data_dir / 'snapshots'} (none taken yet)"

    endpoint = ["--endpoint-url", aws_env]
    nothing = cli("snapshot", "list", "--from", f"s3://{bucket}/nothing", *endpoint)
    assert nothing.stdout.strip() == f"no snapshots in s3://{bucket}/nothing/ (no object under that prefix)"
    client = boto3.client("s3", endpoint_url=aws_env)
    client.put_object(Bucket=bucket, Key="other/report.csv", Body=b"x")
    client.put_object(Bucket=bucket, Key="other/2026/data.bin", Body=b"x")
    other = cli("snapshot", "list", "--from", f"s3://{bucket}/other", *endpoint)
    assert other.exit_code == 0
    assert other.stdout.strip() == (
        f"no snapshots in s3://{bucket}/other/: it holds 2 other object(s) (other/2026/data.bin, other/report.csv) "
        "but no <id>/manifest.json: check the prefix"
    )


def test_endpoint_url_is_checked_as_an_option(cli, aws_env, monkeypatch):
    result = cli("snapshot", "list", "--from", "s3://any/p", "--endpoint-url", "notaurl")
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        "error: --endpoint-url 'notaurl' is not an endpoint URL: write it as http(s)://host[:port]"
    )
    monkeypatch.setenv("DEDUPECTL_S3_ENDPOINT_URL", "127.0.0.1:9000")
    from_env = cli("snapshot", "list", "--from", "s3://any/p")
    assert from_env.exit_code == 2 and "DEDUPECTL_S3_ENDPOINT_URL '127.0.0.1:9000' is not" in from_env.stderr


def test_debug_keeps_the_line_and_the_exit_code_and_adds_the_traceback(cli, tmp_path, make_store):
    data_dir = tmp_path / "data"
    make_store(data_dir, "dbg", 0, 10)
    args = ["snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", "s3:/x"]
    plain = cli(*args)
    debug = cli("--debug", *args)
    assert plain.exit_code == debug.exit_code == 2
    assert debug.stderr.splitlines()[0] == one_error_line(plain.stderr)
    assert "Traceback (most recent call last)" in debug.stderr and "ConfigError" in debug.stderr


def test_json_gives_an_error_object_on_failure(cli, tmp_path):
    result = cli("snapshot", "list", "--from", str(tmp_path / "nonexistent"), "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 2 and error["kind"] == "SnapshotError"
    assert error["message"] == f"snapshot location {tmp_path / 'nonexistent'} does not exist"
    assert one_error_line(result.stderr).startswith("error: snapshot location")


SNAPSHOT_ID = "ev-0-20260101T000000.000Z"
# every snapshot and reattach command, failing before its body runs (an option that does not parse, a missing
# one, an option's own check) and in its body: (args, kind, start of the message)
FAILURES = [
    (["snapshot", "create", "-p", "abc"], "usage", "Invalid value for '--partition'"),
    (["snapshot", "create", "-p", "0", "--endpoint-url", "notaurl"], "ConfigError", "--endpoint-url 'notaurl'"),
    (["snapshot", "create", "-d", "{tmp}", "-p", "0", "--to", "s3:/x"], "ConfigError", "snapshot destination 's3:/x'"),
    (["snapshot", "list", "--partition", "x"], "usage", "Invalid value for '--partition'"),
    (["snapshot", "list", "--from", "{tmp}/nonexistent"], "SnapshotError", "snapshot location {tmp}/nonexistent"),
    (["snapshot", "verify"], "usage", "Missing argument"),
    (["snapshot", "verify", SNAPSHOT_ID, "--from", "{tmp}"], "SnapshotNotFoundError", f"no snapshot {SNAPSHOT_ID}"),
    (["snapshot", "restore", SNAPSHOT_ID, "--nope"], "usage", "No such option: --nope"),
    (["snapshot", "restore", SNAPSHOT_ID, "--from", "{tmp}"], "ConfigError", "restore needs --data-dir"),
    (["snapshot", "restore", SNAPSHOT_ID, "--from", "s3:/x", "--availability-zone", "z"], "ConfigError", "snapshot"),
    (["snapshot", "prune", "--keep", "x"], "usage", "Invalid value for '--keep'"),
    (["snapshot", "prune", "--from", "{tmp}", "--older-than", "3 parsecs"], "ConfigError", "--older-than"),
    (["reattach", "--partition", "3", "--to-instance", "i-1"], "usage", "Missing option '--volume'"),
    (["reattach", "-p", "3", "--volume", "vol-1", "--to-instance", "i-1", "--timeout", "soon"], "usage", "Invalid"),
    (
        ["reattach", "-p", "3", "--volume", "vol-0123456789abcdef0", "--to-instance", "i-1"],
        "CloudError",
        "vol-0123456789abcdef0 does not exist",
    ),
]


@pytest.mark.parametrize(("args", "kind", "message"), FAILURES, ids=[" ".join(args) for args, _, _ in FAILURES])
def test_json_gives_one_error_object_for_every_failure(cli, ec2, tmp_path, monkeypatch, args, kind, message):
    monkeypatch.setenv("AWS_ENDPOINT_URL", ec2.endpoint_url)  # reattach's volume lookup gets a real answer
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = cli(*args, "--json")
    assert result.exit_code == 2, result
    document = json.loads(result.stdout)  # one document, nothing else on stdout
    assert list(document) == ["error"] and document["error"]["exit_code"] == 2
    assert document["error"]["kind"] == kind, document
    assert document["error"]["message"].startswith(message.replace("{tmp}", str(tmp_path))), document
    assert cli(*args).stdout == "", "without --json, nothing on stdout"


def test_json_with_help_is_help(cli):
    result = cli("snapshot", "list", "--json", "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout and '"error"' not in result.stdout


def test_a_failed_create_leaves_no_folder_it_made(cli, tmp_path, make_store):
    from store.dedup_store import DedupStore

    data_dir = tmp_path / "data"
    path = make_store(data_dir, "left", 0, 10)
    nested = tmp_path / "new-disk" / "dedupectl"
    with DedupStore.open_existing(path):  # held by a process that is no worker: create must refuse
        for destination in ([], ["--to", str(nested), "--mkdir"]):
            result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", *destination)
            assert result.exit_code == 2 and "is locked by a process that is not a worker" in result.stderr
            assert sorted(p.name for p in data_dir.iterdir()) == ["left-0"], "no empty snapshots/ in the data dir"
            assert not (tmp_path / "new-disk").exists()


@pytest.mark.parametrize(
    "command",
    [[], ["snapshot", "create"], ["snapshot", "list"], ["snapshot", "restore"], ["snapshot", "prune"], ["reattach"]],
)
def test_help_shows_flags_without_a_value(cli, command):
    text = cli(*command, "--help").stdout
    flags = [line for line in text.splitlines() if "<bool>" in line and "--help" not in line]
    assert flags == [], "a flag takes no value: --debug, --json, --dry-run are written alone"


# -- output when piped ----------------------------------------------------------------------------------


def test_piped_output_keeps_ids_whole_and_stderr_free_of_blank_lines(cli_process, tmp_path, make_store):
    data_dir = tmp_path / "data"
    topic = "a-rather-long-topic-name-for-wrapping"
    make_store(data_dir, topic, 0, 2_000)
    created = cli_process("snapshot", "create", "-d", str(data_dir), "-p", "0", env={"COLUMNS": "80"})
    assert created.exit_code == 0, created.stderr
    assert created.stderr == "", "no bar and no blank lines when stderr is not a terminal"
    listed = cli_process("snapshot", "list", "-d", str(data_dir), env={"COLUMNS": "80"})
    (snapshot,) = (data_dir / "snapshots").iterdir()
    assert snapshot.name in listed.stdout, listed.stdout
    assert "KiB" in listed.stdout and "completed" in listed.stdout


def test_ebs_snapshot_of_an_untagged_volume_that_the_mount_shows_holds_the_store(
    cli, ec2, make_store, unique_name, volume_mount
):
    topic = unique_name("mounted")
    data_dir = volume_mount.path
    make_store(data_dir, topic, 0, 200)
    volume = ec2.volume({}, attach_to=ec2.instance(), device=volume_mount.device)
    endpoint = ["--endpoint-url", ec2.endpoint_url]
    result = cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"ebs:{volume}", *endpoint, "--json")
    assert result.exit_code == 0, result.stderr
    (created,) = json.loads(result.stdout)
    (snapshot,) = ec2.client.describe_snapshots(SnapshotIds=[created["location"]])["Snapshots"]
    assert snapshot["VolumeId"] == volume
    assert sorted(p.name for p in data_dir.iterdir()) == sorted([f"{topic}-0", "lost+found"]), "no leftovers"


def test_ebs_snapshot_by_what_the_mount_table_shows_without_root(cli, ec2, tmp_path, make_store, fake_kernel):
    """The data directory's device decides, as on an instance: an untagged volume is taken when the mount is
    its device (Xen's xvdf for an sdf attachment) or its NVMe serial; a tagged one is refused when the
    serial shows the directory is on another volume."""
    instance = ec2.instance()
    endpoint = ["--endpoint-url", ec2.endpoint_url]

    def create(data_dir: Path, volume: str):
        return cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", f"ebs:{volume}", *endpoint, "--json")

    by_name = tmp_path / "xen"
    make_store(by_name, "mt", 0, 100)
    fake_kernel.mount(by_name, "/dev/xvdf")
    untagged = ec2.volume({}, attach_to=instance, device="/dev/sdf")
    result = create(by_name, untagged)
    assert result.exit_code == 0, result.stderr
    (created,) = json.loads(result.stdout)
    assert ec2.client.describe_snapshots(SnapshotIds=[created["location"]])["Snapshots"][0]["VolumeId"] == untagged

    by_serial = tmp_path / "nitro"
    make_store(by_serial, "mt", 0, 100)
    holder = ec2.volume({}, attach_to=instance, device="/dev/sdg")
    fake_kernel.nvme("nvme1n1", holder.replace("-", ""), partitions=("nvme1n1p1",))
    fake_kernel.mount(by_serial, "/dev/nvme1n1p1")
    result = create(by_serial, holder)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in by_serial.iterdir()) == ["mt-0"], "no leftovers"

    tagged_elsewhere = ec2.volume({"dedupectl:topic": "mt", "dedupectl:partition": "0"}, attach_to=instance)
    result = create(by_serial, tagged_elsewhere)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"error: the store in {by_serial} is not on volume {tagged_elsewhere}: {by_serial} is on {by_serial} "
        f"(/dev/nvme1n1p1, ext4), which is volume {holder}: pass the volume that holds it, or a data directory "
        f"on {tagged_elsewhere}'s mount"
    )
    found = ec2.client.describe_snapshots(Filters=[{"Name": "volume-id", "Values": [tagged_elsewhere]}])
    assert found["Snapshots"] == []

    def schedule(data_dir: Path, volume: str) -> SnapshotSchedule:  # a worker's --snapshot-to, at its start
        config = ScheduleConfig(every_s=3600, destination=f"ebs:{volume}", aws=_aws(ec2.endpoint_url))
        return SnapshotSchedule(data_dir, "mt", config)

    schedule(by_name, untagged)
    schedule(by_serial, holder)
    with pytest.raises(ConfigError, match=f"the store in {by_serial} is not on volume {tagged_elsewhere}"):
        schedule(by_serial, tagged_elsewhere)


def test_restore_reads_the_files_themselves_not_only_the_manifests_hashes(cli, tmp_path, make_store):
    # a file damaged before the snapshot was taken, its hash in the manifest taken over the damage: the
    # manifest agrees with the files, the store does not
    data_dir = tmp_path / "data"
    make_store(data_dir, "ev3", 0, 20_000)
    backups = tmp_path / "backups"
    backups.mkdir()
    created = json.loads(
        cli("snapshot", "create", "-d", str(data_dir), "-p", "0", "--to", str(backups), "--json").stdout
    )
    snapshot = backups / created[0]["snapshot_id"]
    table = max((snapshot / "store").glob("*.sst"), key=lambda file: file.stat().st_size)
    data = bytearray(table.read_bytes())
    data[16] ^= 0xFF  # a byte of its first data block
    table.write_bytes(bytes(data))
    manifest = json.loads((snapshot / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["name"] == table.name:
            entry["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    assert cli("snapshot", "verify", created[0]["snapshot_id"], "--from", str(backups)).exit_code == 0

    fresh = tmp_path / "fresh"
    restore = cli("snapshot", "restore", created[0]["snapshot_id"], "--from", str(backups), "-d", str(fresh))
    assert restore.exit_code == 2
    line = one_error_line(restore.stderr)
    assert "passed its checksums but is not a usable store" in line and table.name in line and "is damaged" in line
    assert not store_path(fresh, "ev3", 0).exists(), "nothing placed"
