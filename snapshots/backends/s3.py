"""Snapshots in S3: ``s3://bucket/prefix/<snapshot id>/manifest.json`` and ``…/<snapshot id>/store/<file>``.

Files move through one s3transfer manager: several files at once, and large ones in concurrent multipart
parts. The manifest is uploaded last (a snapshot without one is incomplete and never listed) and deleted
first. Downloads are checked against the manifest: sizes from one listing before any byte moves (a truncated
object fails at once), then the SHA-256 of every downloaded file.
"""

from __future__ import annotations

import contextlib
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from s3transfer.subscribers import BaseSubscriber

from snapshots.backends.aws import FORBIDDEN, AwsOptions, aws_errors, error_code, explain_forbidden
from snapshots.backends.base import SnapshotInfo, VerifyReport
from snapshots.errors import CloudError, SnapshotCorruptError, SnapshotError, SnapshotNotFoundError
from snapshots.ids import is_snapshot_id
from snapshots.manifest import (
    HASH_CHUNK,
    MANIFEST_NAME,
    STORE_DIR,
    FileEntry,
    Manifest,
    check_file,
    check_identity,
    sha256_file,
)
from snapshots.progress import TransferProgress

MiB = 1024 * 1024
HASH_THREADS = 2
WRITE_CHECK = ".dedupectl-write-check"  # put and deleted under the prefix before each create


@dataclass(frozen=True)
class TransferSettings:
    multipart_threshold: int = 16 * MiB
    chunk_size: int = 16 * MiB
    concurrency: int = 10


class _Progress(BaseSubscriber):
    def __init__(self, progress: TransferProgress) -> None:
        self._progress = progress

    def on_progress(self, future, bytes_transferred, **kwargs) -> None:
        self._progress.advance(bytes_transferred)


class _KnownSize(BaseSubscriber):
    """Tell the download its size (we have it from the listing), saving one HEAD request per file."""

    def __init__(self, size: int) -> None:
        self._size = size

    def on_queued(self, future, **kwargs) -> None:
        future.meta.provide_transfer_size(self._size)


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix/")``."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise SnapshotError(f"{url!r} names no bucket", "write the destination as s3://bucket/prefix")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


class S3Backend:
    kind = "s3"

    def __init__(self, url: str, aws: AwsOptions, transfer: TransferSettings | None = None) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self._aws = aws
        self._transfer = transfer or TransferSettings()
        self._client = None

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def client(self):
        if self._client is None:
            self._client = self._aws.client("s3", max_pool_connections=self._transfer.concurrency + 4)
        return self._client

    def _key(self, snapshot_id: str, *parts: str) -> str:
        return "/".join([f"{self.prefix}{snapshot_id}", *parts])

    def _url(self, snapshot_id: str) -> str:
        return f"s3://{self.bucket}/{self._key(snapshot_id)}"

    def _manager(self):
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        settings = self._transfer
        config = TransferConfig(
            multipart_threshold=settings.multipart_threshold,
            multipart_chunksize=settings.chunk_size,
            max_concurrency=settings.concurrency,
            use_threads=True,
        )
        return create_transfer_manager(self.client, config)

    def check_writable(self) -> None:
        """List (the bucket exists, s3:ListBucket), then put and delete a small marker (s3:PutObject): what a
        publish needs, before any checkpoint is paid for. ListObjectsV2 rather than HeadBucket: a HEAD's 403
        has no body, so it cannot tell rejected credentials from a missing permission."""
        with self._explained("s3:ListBucket", self.describe()):
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        marker = f"{self.prefix}{WRITE_CHECK}"
        with self._explained("s3:PutObject", f"s3://{self.bucket}/{marker}"):
            self.client.put_object(Bucket=self.bucket, Key=marker, Body=b"dedupectl write check\n")
        with contextlib.suppress(Exception):  # a write-only role may not delete: the marker is then left, harmless
            self.client.delete_object(Bucket=self.bucket, Key=marker)

    @contextlib.contextmanager
    def _explained(self, action: str, resource: str):
        """aws_errors, and for a bare 403 or a denial: ask STS who the caller is, to tell rejected credentials
        from a missing permission."""
        from botocore.exceptions import ClientError

        try:
            with aws_errors(action, resource):
                yield
        except CloudError as error:
            cause = error.__cause__
            if isinstance(cause, ClientError) and error_code(cause) in FORBIDDEN:
                raise explain_forbidden(self._aws, action, resource) from cause
            raise

    def publish(self, checkpoint_dir: Path, manifest: Manifest, progress: TransferProgress) -> str:
        sid = manifest.snapshot_id
        progress.start(f"uploading {sid}", manifest.total_bytes)
        try:
            with aws_errors("s3:PutObject", self._url(sid)), self._manager() as manager:
                futures = [
                    manager.upload(
                        str(checkpoint_dir / entry.name),
                        self.bucket,
                        self._key(sid, STORE_DIR, entry.name),
                        extra_args={"Metadata": {"sha256": entry.sha256}},
                        subscribers=[_Progress(progress)],
                    )
                    for entry in manifest.files
                ]
                for future in futures:
                    future.result()
            with aws_errors("s3:PutObject", self._url(sid)):
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self._key(sid, MANIFEST_NAME),
                    Body=manifest.to_json().encode(),
                    ContentType="application/json",
                )
        except BaseException:
            self._delete_quietly(sid)
            raise
        finally:
            progress.finish()
        return self._url(sid)

    def read_manifest(self, snapshot_id: str, *, checked: bool = True) -> Manifest:
        """The manifest under ``<prefix><snapshot_id>/``; ``checked``: refuse one that names another snapshot."""
        from botocore.exceptions import ClientError

        key = self._key(snapshot_id, MANIFEST_NAME)
        try:
            with aws_errors("s3:GetObject", f"s3://{self.bucket}/{key}"):
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as error:
            cause = error.__cause__
            if isinstance(cause, ClientError) and error_code(cause) in {"NoSuchKey", "404"}:
                raise SnapshotNotFoundError(
                    f"no snapshot {snapshot_id} in {self.describe()}",
                    f"see `dedupectl snapshot list --location {self.describe()}`",
                ) from error
            raise
        manifest = Manifest.from_json(body, f"s3://{self.bucket}/{key}")
        if checked:
            check_identity(snapshot_id, manifest, self._url(snapshot_id))
        return manifest

    def _keys_under(self, prefix: str) -> dict[str, int]:
        sizes: dict[str, int] = {}
        with aws_errors("s3:ListBucket", f"s3://{self.bucket}/{prefix}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    sizes[item["Key"]] = int(item["Size"])
        return sizes

    def _store_sizes(self, snapshot_id: str) -> dict[str, int]:
        prefix = self._key(snapshot_id, STORE_DIR) + "/"
        return {key[len(prefix) :]: size for key, size in self._keys_under(prefix).items()}

    def _names(self) -> list[str]:
        names = []
        with aws_errors("s3:ListBucket", self.describe()):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"
            )
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    name = common["Prefix"][len(self.prefix) :].rstrip("/")
                    if is_snapshot_id(name):
                        names.append(name)
        return sorted(names)

    def _scan(self) -> tuple[list[SnapshotInfo], list[str]]:
        found, incomplete = [], []
        for name in self._names():
            try:
                manifest = self.read_manifest(name, checked=False)
                found.append(SnapshotInfo.from_manifest(manifest, self._url(name), listed_as=name))
            except SnapshotNotFoundError:
                incomplete.append(name)  # no manifest: an upload that never finished
        return found, incomplete

    def list(self) -> list[SnapshotInfo]:
        return self._scan()[0]

    def list_incomplete(self) -> list[str]:
        """Ids of uploads that never finished (objects without a manifest)."""
        return self._scan()[1]

    def empty_note(self) -> str:
        incomplete = self.list_incomplete()
        if incomplete:
            return (
                f"no complete snapshot in {self.describe()}: {len(incomplete)} incomplete "
                "(an upload that never finished)"
            )
        keys = sorted(key for key in self._keys_under(self.prefix) if not key.endswith(WRITE_CHECK))
        if not keys:
            return f"no snapshots in {self.describe()} (no object under that prefix)"
        shown = ", ".join(keys[:3]) + (", …" if len(keys) > 3 else "")
        return (
            f"no snapshots in {self.describe()}: it holds {len(keys)} other object(s) ({shown}) but no "
            f"<id>/{MANIFEST_NAME}: check the prefix"
        )

    def _hash_object(self, key: str, progress: TransferProgress) -> str:
        digest = hashlib.sha256()
        with aws_errors("s3:GetObject", f"s3://{self.bucket}/{key}"):
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(HASH_CHUNK):
                digest.update(chunk)
                progress.advance(len(chunk))
        return digest.hexdigest()

    def verify(self, snapshot_id: str, progress: TransferProgress) -> VerifyReport:
        """Stream every object through SHA-256 (nothing is written to disk)."""
        manifest = self.read_manifest(snapshot_id)
        sizes = self._store_sizes(snapshot_id)
        progress.start(f"verifying {snapshot_id}", manifest.total_bytes)
        problems: dict[str, str] = {}
        to_hash: list[FileEntry] = []
        for entry in manifest.files:
            problem = check_file(entry, sizes.get(entry.name), entry.sha256)  # sizes first: no download needed
            if problem is not None:
                problems[entry.name] = problem.describe(snapshot_id)
            else:
                to_hash.append(entry)
        with ThreadPoolExecutor(self._transfer.concurrency) as pool:
            digests = pool.map(
                lambda entry: self._hash_object(self._key(snapshot_id, STORE_DIR, entry.name), progress), to_hash
            )
            for entry, digest in zip(to_hash, digests, strict=True):
                problem = check_file(entry, entry.size, digest)
                if problem is not None:
                    problems[entry.name] = problem.describe(snapshot_id)
        progress.finish()
        ordered = tuple(problems[entry.name] for entry in manifest.files if entry.name in problems)
        checked = sum(entry.size for entry in to_hash)
        return VerifyReport(snapshot_id, self._url(snapshot_id), len(manifest.files), checked, ordered)

    def fetch(self, snapshot_id: str, target_dir: Path, progress: TransferProgress) -> Manifest:
        """Download into ``target_dir`` and check every file; raises SnapshotCorruptError naming the first
        bad one."""
        manifest = self.read_manifest(snapshot_id)
        sizes = self._store_sizes(snapshot_id)
        for entry in manifest.files:
            problem = check_file(entry, sizes.get(entry.name), entry.sha256)
            if problem is not None:
                raise SnapshotCorruptError(problem.describe(snapshot_id), "nothing was downloaded or placed")
        target_dir.mkdir(parents=True, exist_ok=True)
        progress.start(f"downloading {snapshot_id}", manifest.total_bytes)
        with aws_errors("s3:GetObject", self._url(snapshot_id)), self._manager() as manager:
            futures = [
                manager.download(
                    self.bucket,
                    self._key(snapshot_id, STORE_DIR, entry.name),
                    str(target_dir / entry.name),
                    subscribers=[_KnownSize(entry.size), _Progress(progress)],
                )
                for entry in manifest.files
            ]
            for future in futures:
                future.result()
        progress.finish()
        with ThreadPoolExecutor(HASH_THREADS) as pool:  # hashlib releases the GIL on large buffers
            digests = list(pool.map(lambda entry: sha256_file(target_dir / entry.name), manifest.files))
        for entry, digest in zip(manifest.files, digests, strict=True):
            problem = check_file(entry, (target_dir / entry.name).stat().st_size, digest)
            if problem is not None:
                raise SnapshotCorruptError(problem.describe(snapshot_id), "nothing was placed or changed")
        return manifest

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in chunk], "Quiet": True}
            )

    def delete(self, snapshot_id: str) -> None:
        with aws_errors("s3:DeleteObject", self._url(snapshot_id)):
            manifest_key = self._key(snapshot_id, MANIFEST_NAME)
            self.client.delete_object(Bucket=self.bucket, Key=manifest_key)  # first: what is left is incomplete
            self._delete_keys(sorted(self._keys_under(self._key(snapshot_id) + "/")))

    def _delete_quietly(self, snapshot_id: str) -> None:
        # best effort after a failed upload: without a manifest the snapshot reads as incomplete anyway
        with contextlib.suppress(Exception):
            self.delete(snapshot_id)
