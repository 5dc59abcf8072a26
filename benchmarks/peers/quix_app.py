"""Quix Streams: an exactly-once Application with a stateful filter that keeps each messageId in RocksDB.

The input is keyed by messageId and Quix scopes a record's state to its message key, so "seen" in the state
of the current key means "this messageId was already published". The entry is written with the per-write
event-time TTL that ``State.set(key, value, ttl=)`` documents (quixstreams 3.28.1, pinned in
benchmarks/requirements-peers.txt), set to the dedup window: Quix bounds such state by time, sweeping
expired entries at each checkpoint. Everything else is Quix's defaults: JSON values, changelog topics for
state recovery, a checkpoint (one Kafka transaction) every ``commit_interval`` = 5 s, a random
``transactional.id`` per process. Stops after ``--idle-seconds`` without input (``Application.run(timeout=)``).

    python benchmarks/peers/quix_app.py BOOTSTRAP INPUT OUTPUT STATE_DIR [--group G] [--window-seconds S]

Instrumentation, not behaviour: ``Checkpoint.commit`` is wrapped to note when each transaction completed,
and ``on_message_processed`` counts records, so the app reports its own first-consumed/last-committed times.
Prints one JSON object (see ``_common.Progress``).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

import quixstreams
from quixstreams import Application, State
from quixstreams.checkpointing import checkpoint as quix_checkpoint

from benchmarks.peers._common import SESSION_TIMEOUT_MS, Progress, peer_arguments


def _time_commits(progress: Progress) -> None:
    """Note the end of every checkpoint commit (Quix commits only checkpoints that hold offsets)."""
    original = quix_checkpoint.Checkpoint.commit

    def commit(self: Any, *args: Any, **kwargs: Any) -> None:
        started = time.time()
        original(self, *args, **kwargs)
        last = progress.last_consumed_at
        if last is not None and started > last:
            # the closing commit waits out the idle timeout (or the rest of a checkpoint interval) after the
            # last record: counted as if it had begun right then, which favours Quix by at most that wait
            progress.last_committed_at = last + (time.time() - started)
        else:
            progress.committed()

    quix_checkpoint.Checkpoint.commit = commit


def build_app(
    bootstrap: str, input_topic: str, output_topic: str, state_dir: str, group: str, window: timedelta, progress
) -> Application:
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        consumer_extra_config={"session.timeout.ms": SESSION_TIMEOUT_MS},
        on_message_processed=lambda topic, partition, offset: progress.consumed_some(1),
        loglevel="WARNING",
    )
    source = app.topic(input_topic, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="bytes", value_serializer="json")

    def first_sighting(value: dict, state: State) -> bool:
        if state.exists("seen"):  # state is scoped to the message key, i.e. the messageId
            return False
        state.set("seen", 1, ttl=window)
        progress.published += 1
        return True

    app.dataframe(source).filter(first_sighting, stateful=True).to_topic(sink)
    return app


def main() -> None:
    parser = peer_arguments(__doc__, "state_dir")
    parser.add_argument("--group", default="")
    parser.add_argument("--window-seconds", type=int, default=24 * 3600, help="state TTL: how long an id is kept")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    args = parser.parse_args()
    progress = Progress()
    _time_commits(progress)
    app = build_app(
        args.bootstrap,
        args.input_topic,
        args.output_topic,
        args.state_dir,
        args.group or f"bench-quix-{args.output_topic}",
        timedelta(seconds=args.window_seconds),
        progress,
    )
    app.run(timeout=args.idle_seconds, collect=False)
    progress.emit(quixstreams_version=quixstreams.__version__)


if __name__ == "__main__":
    main()
