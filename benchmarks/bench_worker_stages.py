"""Where a batch's wall time goes in ``dedupectl run``, stage by stage, against the plain transactional copy.

    python benchmarks/bench_worker_stages.py [--count 1000000] [--repeat 2]

Produces ``--count`` Segment-like events (0.6% duplicates, 4 partitions) on the project's local broker, then
alternates, ``--repeat`` times: the plain transactional copy (``benchmarks/peers/copy_floor.py``, its own
process) and the worker run in this process with a wall-clock timer around each stage of a batch:

- collect: ``consume`` calls until the batch is full (waiting for the broker included);
- plan: the ids parsed from the values (``extract_ids``), packed (``encode_ids``), asked of the store
  (``DedupStore.contains_keys``: the id filter, then RocksDB), and the rest of the plan (in-batch repeats);
- transaction: ``produce`` of every record into librdkafka's queue, the wait for the offsets sent to the
  group coordinator (sent on a thread while producing), and the rest (begin, bookkeeping);
- the wait for the commit: the commit runs on a thread of its own while the next batch is collected and
  planned (librdkafka delivers what is queued, then the broker commits); this is what is left of it when
  the worker needs its outcome;
- the store write (``DedupStore.record``, the id filter's insert included), aging, recovery (a partition's
  first batch), and the rest of the batch (grouping by partition, bookkeeping).

The run's throughput is from the first record consumed to the last commit, as ``dedupectl run --json``
reports it; the timers add about a microsecond per call, a few per batch. Prints each stage's seconds and
share of the busy time (median run), and the worker's rate against the copy's.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import dedupectl.worker as worker_module  # noqa: E402
from dedupectl.config import KafkaConfig, resolve_worker_config  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402
from dedupectl.verify import check_output  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402

console = Console()
PARTITIONS = 4

# (stage, owner, attribute): each wrapped with a timer for the worker's run in this process
TIMED = [
    ("collect", worker_module.Worker, "_collect"),
    ("batch", worker_module.Worker, "_process"),
    ("batch", worker_module.Worker, "_finish_in_flight"),  # the last batch's settle and store write, when idle
    ("plan", worker_module.Worker, "_plan"),
    ("plan: parse ids", worker_module, "extract_ids"),
    ("plan: pack ids", worker_module, "encode_ids"),
    ("plan: store lookups", DedupStore, "contains_keys"),
    ("transaction", worker_module.Worker, "_publish"),
    ("transaction: produce", worker_module.Worker, "_produce_batch"),
    ("transaction: wait for offsets", worker_module.Worker, "_offsets_outcome"),
    ("wait for the commit", worker_module.Worker, "_settle"),
    ("store write", DedupStore, "record"),
    ("aging", worker_module.Worker, "_age"),
    ("recovery", worker_module.Worker, "_recover"),
]
# what each row is part of: its parent's "rest" is the parent's time less its children's
PARENT = {
    "plan": "batch",
    "plan: parse ids": "plan",
    "plan: pack ids": "plan",
    "plan: store lookups": "plan",
    "transaction": "batch",
    "transaction: produce": "transaction",
    "transaction: wait for offsets": "transaction",
    "wait for the commit": "batch",
    "store write": "batch",
    "aging": "batch",
    "recovery": "batch",
}


class StageTimers:
    """Wall seconds per stage, on the worker's thread only (the offsets are sent on another)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._originals: list[tuple[object, str, object]] = []
        self._thread = threading.get_ident()
        self.last_batch_end: float | None = None
        self.collections: dict[int, int] = defaultdict(int)  # by generation
        self._collection_began = 0.0

    def _time_collection(self, phase: str, info: dict) -> None:
        """Python's cyclic garbage collector, across every stage (it runs inside whichever allocates)."""
        if phase == "start":
            self._collection_began = time.perf_counter()
            return
        self.seconds["garbage collector"] += time.perf_counter() - self._collection_began
        self.collections[info["generation"]] += 1

    def install(self) -> None:
        gc.callbacks.append(self._time_collection)
        for stage, owner, attribute in TIMED:
            original = getattr(owner, attribute)
            self._originals.append((owner, attribute, original))
            setattr(owner, attribute, self._timed(stage, original))

    def remove(self) -> None:
        gc.callbacks.remove(self._time_collection)
        for owner, attribute, original in reversed(self._originals):
            setattr(owner, attribute, original)
        self._originals.clear()

    def _timed(self, stage: str, call):
        seconds, thread = self.seconds, self._thread

        def timed(*args, **kwargs):
            if threading.get_ident() != thread:
                return call(*args, **kwargs)
            # the busy time starts when the first collect returns and ends at the last commit: a collect before
            # it, or one that found nothing (the idle end), is outside it
            counted = stage != "collect" or args[0].summary.first_consumed_at is not None
            # an idle loop's finish with no batch committing is not a batch
            counted = counted and (call.__name__ != "_finish_in_flight" or args[0]._in_flight is not None)
            started = time.perf_counter()
            result = call(*args, **kwargs)
            if counted and (stage != "collect" or result):
                seconds[stage] += time.perf_counter() - started
            if stage == "batch" and counted:
                self.last_batch_end = time.monotonic()
            return result

        return timed


def worker_run(kafka: KafkaConfig, data_dir: Path, output: str, name: str) -> dict:
    create_topics(kafka, [output], PARTITIONS)
    config = resolve_worker_config(
        None,
        flags={
            "bootstrap_servers": kafka.bootstrap_servers,
            "input_topic": "in",
            "output_topic": output,
            "group_id": f"stages-{name}",
            "worker_id": f"stages-{name}",
            "data_dir": data_dir,
        },
    )
    timers = StageTimers()
    timers.install()
    try:
        summary = worker_module.Worker(config).run(exit_on_idle_s=3)
    finally:
        timers.remove()
    return {
        "consumed": summary.consumed,
        "busy_seconds": summary.busy_seconds,
        # the stages' window: to the end of the last batch, whose store write comes after its commit
        "timed_seconds": timers.last_batch_end - summary.first_consumed_at,
        "stages": dict(timers.seconds),
        "collections": dict(timers.collections),
    }


def copy_run(kafka: KafkaConfig, output: str) -> dict:
    create_topics(kafka, [output], PARTITIONS)
    command = [sys.executable, str(ROOT / "benchmarks/peers/copy_floor.py"), kafka.bootstrap_servers, "in", output]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"the copy failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def rows_of(run: dict) -> list[tuple[str, float]]:
    """(stage, seconds) in reading order, each parent followed by its parts and its rest, then the time
    outside batches."""
    stages = run["stages"]
    parts: dict[str, list[str]] = defaultdict(list)
    for stage, parent in PARENT.items():
        parts[parent].append(stage)
    rows = [("collect (consume)", stages.get("collect", 0.0))]
    for stage in parts["batch"]:
        rows.append((stage, stages.get(stage, 0.0)))
        if parts[stage]:
            rows += [(f"  {part}", stages.get(part, 0.0)) for part in parts[stage]]
            rest = stages.get(stage, 0.0) - sum(stages.get(part, 0.0) for part in parts[stage])
            rows.append((f"  {stage}: rest", rest))
    rows.append(("rest of the batch", stages.get("batch", 0.0) - sum(stages.get(s, 0.0) for s in parts["batch"])))
    outside = run["timed_seconds"] - stages.get("collect", 0.0) - stages.get("batch", 0.0)
    rows.append(("outside batches (idle checks, maintenance, status)", outside))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="dedupectl-bench-stages-") as scratch,
        LocalBroker(Path(scratch) / "broker") as broker,
    ):
        kafka = KafkaConfig(broker.bootstrap_servers)
        create_topics(kafka, ["in", "in.dead-letter"], PARTITIONS)
        spec = SampleSpec(args.count, duplicate_ratio=0.006)
        with console.status(f"producing {args.count:,} events"):
            produce_sample(kafka, "in", spec)
        expected = {record.key for record in generate(spec) if record.kind == "new"}
        copies, workers = [], []
        for round_ in range(args.repeat):
            with console.status(f"round {round_ + 1}/{args.repeat}: the plain transactional copy"):
                copies.append(copy_run(kafka, f"out-copy-{round_}"))
            with console.status(f"round {round_ + 1}/{args.repeat}: dedupectl run, timed by stage"):
                run = worker_run(kafka, Path(scratch) / f"data-{round_}", f"out-dedup-{round_}", str(round_))
                run["check"] = check_output(kafka, f"out-dedup-{round_}", expected)
                workers.append(run)
    for run in copies + workers:
        run["messages_per_second"] = run["consumed"] / run["busy_seconds"]
    copy = sorted(copies, key=lambda run: run["messages_per_second"])[len(copies) // 2]
    worker = sorted(workers, key=lambda run: run["messages_per_second"])[len(workers) // 2]
    if not all(run["check"].exactly_once for run in workers):
        raise SystemExit(f"an output was not exactly once: {[run['check'] for run in workers]}")
    table = Table(title=f"dedupectl run, {args.count:,} events, {PARTITIONS} partitions: where the time goes")
    for column in ("stage", "seconds", "share"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, seconds in rows_of(worker):
        table.add_row(stage, f"{seconds:.2f}", f"{seconds / worker['timed_seconds']:.1%}")
    table.add_row("first record consumed to the end of the last batch", f"{worker['timed_seconds']:.2f}", "100%")
    collector = worker["stages"].get("garbage collector", 0.0)
    runs = ", ".join(f"{count:,} of generation {gen}" for gen, count in sorted(worker["collections"].items()))
    table.add_row(
        f"of all the above: Python's garbage collector ({runs})",
        f"{collector:.2f}",
        f"{collector / worker['timed_seconds']:.1%}",
    )
    console.print(table)
    rates = ", ".join(f"{run['messages_per_second']:,.0f}" for run in workers)
    copy_rates = ", ".join(f"{run['messages_per_second']:,.0f}" for run in copies)
    console.print(
        f"dedupectl {worker['messages_per_second']:,.0f} msg/s (runs: {rates}), the copy "
        f"{copy['messages_per_second']:,.0f} (runs: {copy_rates}): "
        f"{worker['messages_per_second'] / copy['messages_per_second']:.2f}x; outputs exactly once "
        f"({statistics.median(run['check'].distinct_ids for run in workers):,.0f} ids)"
    )


if __name__ == "__main__":
    main()
