"""Asking a live worker for a checkpoint of a partition it serves, through files in its data directory.

Only the process holding a store can checkpoint it consistently (see ``snapshots.checkpoint``), so
``dedupectl snapshot create`` on a live partition drops a request and the worker answers between batches:

    <data_dir>/.snapshot-requests/<id>.request   the CLI writes it (atomically, by rename)
                                  <id>.taken     the worker claims it by renaming (so a withdrawn request
                                                 and a claimed one can never both happen)
                                  <id>.done      the worker's answer: the checkpoint's facts, or the error

The checkpoint itself goes to ``<data_dir>/.snapshot-staging/<id>/store``: the same filesystem as the stores,
so its SST files are hard links and the worker is held up only for the memtable flush.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from snapshots.checkpoint import CheckpointFacts, take_checkpoint
from snapshots.errors import SnapshotError
from store.dedup_store import DedupStore
from store.errors import DedupeError

log = logging.getLogger(__name__)

REQUESTS_DIR = ".snapshot-requests"
STAGING_DIR = ".snapshot-staging"
CLAIM_GRACE_S = 120.0  # once claimed, a checkpoint finishes: wait this long beyond the caller's timeout


def staging_dir(data_dir: Path, snapshot_id: str) -> Path:
    return Path(data_dir) / STAGING_DIR / snapshot_id


def remove_staging(data_dir: Path, snapshot_id: str) -> None:
    """Remove a snapshot's staging, and the staging folder once nothing else is staged there."""
    shutil.rmtree(staging_dir(data_dir, snapshot_id), ignore_errors=True)
    remove_if_empty(Path(data_dir) / STAGING_DIR)


def remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (another snapshot is under way) or already gone
        folder.rmdir()


def _write_atomically(path: Path, document: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            temporary.write_text(json.dumps(document))
            break
        except FileNotFoundError:  # another requester removed the empty folder in between
            if attempt == 2:
                raise
    temporary.replace(path)


def request_checkpoint(
    data_dir: Path,
    topic: str,
    partition: int,
    snapshot_id: str,
    target: Path,
    *,
    timeout_s: float,
    worker: str,
    poll_s: float = 0.1,
) -> CheckpointFacts:
    """Ask the live worker serving ``topic[partition]`` to checkpoint it into ``target``; wait for it."""
    folder = Path(data_dir) / REQUESTS_DIR
    request, done = folder / f"{snapshot_id}.request", folder / f"{snapshot_id}.done"
    _write_atomically(
        request,
        {
            "snapshot_id": snapshot_id,
            "topic": topic,
            "partition": partition,
            "target": str(target),
            "requested_at": time.time(),
            "requester_pid": os.getpid(),
        },
    )
    deadline = time.monotonic() + timeout_s
    while not done.exists():
        if time.monotonic() >= deadline:
            try:
                request.unlink()  # withdrawn before the worker claimed it
                remove_if_empty(folder)
            except FileNotFoundError:  # claimed: the checkpoint is under way, it is quick: give it time
                if time.monotonic() < deadline + CLAIM_GRACE_S:
                    time.sleep(poll_s)
                    continue
            raise SnapshotError(
                f"{worker} did not take the checkpoint of {topic}[{partition}] within {timeout_s:.0f}s",
                "workers answer between batches: check its log; a worker started before snapshots existed "
                "cannot answer (restart it), or stop it and snapshot the idle store",
            )
        time.sleep(poll_s)
    answer = json.loads(done.read_text())
    done.unlink(missing_ok=True)
    remove_if_empty(folder)
    if not answer.get("ok"):
        raise SnapshotError(f"{worker} could not checkpoint {topic}[{partition}]: {answer.get('error')}")
    return CheckpointFacts.from_dict(answer["facts"])


def serve_requests(data_dir: Path, topic: str, stores: Mapping[int, DedupStore]) -> int:
    """The worker's side: checkpoint every requested partition it holds; returns how many it answered.
    Call it from the thread that owns the stores."""
    folder = Path(data_dir) / REQUESTS_DIR
    if not folder.is_dir():
        return 0
    answered = 0
    staging_root = (Path(data_dir) / STAGING_DIR).resolve()
    for request in sorted(folder.glob("*.request")):
        try:
            raw = json.loads(request.read_text())
        except (OSError, ValueError):
            continue  # withdrawn or being written
        if raw.get("topic") != topic or raw.get("partition") not in stores:
            continue
        claimed = request.with_suffix(".taken")
        try:
            request.rename(claimed)
        except FileNotFoundError:
            continue  # withdrawn meanwhile
        snapshot_id = str(raw["snapshot_id"])
        target = Path(raw["target"])
        answer: dict
        if target.resolve().parent.parent != staging_root:  # write only where snapshots are staged
            answer = {"ok": False, "error": f"refusing checkpoint target {target} outside {staging_root}"}
        else:
            try:
                facts = take_checkpoint(stores[raw["partition"]], target)
                answer = {"ok": True, "facts": facts.to_dict()}
                log.info("checkpointed %s[%d] for snapshot %s", topic, raw["partition"], snapshot_id)
            except Exception as error:  # always answer: the requester is waiting for this file
                message = str(error) if isinstance(error, DedupeError) else f"{type(error).__name__}: {error}"
                answer = {"ok": False, "error": message}
        _write_atomically(folder / f"{snapshot_id}.done", answer)
        claimed.unlink(missing_ok=True)
        answered += 1
    return answered
