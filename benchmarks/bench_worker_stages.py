"""Where a batch's wall time goes in ``dedupectl run``, stage by stage, against the plain transactional copy.

    python benchmarks/bench_worker_stages.py [--count 1000000] [--repeat 2] [--prefilled-ids N]

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
- the store write (``DedupStore.record``: the id filter's insert and its save when a generation was sealed
  are shown apart), aging, recovery (a partition's first batch), and the rest of the batch (grouping by
  partition, bookkeeping).

With ``--prefilled-ids N`` each round also times a run on stores that already hold N ids in all, bulk loaded
once (as ``benchmarks/bench_worker.py --prefilled-ids`` does; ``--prefilled-dir`` keeps them between
invocations) and hard-linked into a fresh data directory for each run: its stages beside the empty stores'.

The run's throughput is from the first record consumed to the last commit, as ``dedupectl run --json``
reports it; the timers add about a microsecond per call, a few per batch. Prints each stage's seconds and
share of the busy time (median run), and the worker's rate against the copy's.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
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

from benchmarks.bulk_stores import add_prefill_options, linked_copy, reuse_or_prefill  # noqa: E402
from dedupectl.config import KafkaConfig, resolve_worker_config  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402
from dedupectl.verify import check_output  # noqa: E402
from dedupectl.worker import Worker  # noqa: E402
from dedupectl.worker import plan as plan_module  # noqa: E402
from dedupectl.worker.partitions import Partitions  # noqa: E402
from dedupectl.worker.pipeline import Pipeline  # noqa: E402
from dedupectl.worker.publisher import TransactionalPublisher  # noqa: E402
from dedupectl.worker.recovery import Recovery  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.filter_keeper import FilterKeeper  # noqa: E402
from store.id_filter import IdFilter  # noqa: E402

console = Console(width=max(Console().width, 110))
PARTITIONS = 4

# (stage, owner, attribute): each wrapped with a timer for the worker's run in this process
TIMED = [
    ("collect", Pipeline, "collect"),
    ("batch", Pipeline, "process"),
    ("batch", Pipeline, "finish_in_flight"),  # the last batch's settle and store write, when idle
    ("plan", Pipeline, "plan"),
    ("plan: parse ids", plan_module, "extract_ids"),
    ("plan: pack ids", plan_module, "encode_ids"),
    ("plan: store lookups", DedupStore, "contains_keys"),
    ("plan: store lookups: id filter", IdFilter, "group_masks"),
    ("plan: store lookups: id filter read back (a store's first lookup)", FilterKeeper, "_read_back"),
    ("transaction", TransactionalPublisher, "publish"),
    ("transaction: produce", TransactionalPublisher, "_produce_batch"),
    ("transaction: wait for offsets", TransactionalPublisher, "_offsets_outcome"),
    ("wait for the commit", TransactionalPublisher, "settle"),
    ("store write", DedupStore, "record"),
    ("store write: id filter", FilterKeeper, "add"),
    ("store write: id filter saved", FilterKeeper, "save_if_due"),
    ("aging", Partitions, "age"),
    ("recovery", Recovery, "recover"),
]
# what each row is part of: its parent's "rest" is the parent's time less its children's
PARENT = {
    "plan": "batch",
    "plan: parse ids": "plan",
    "plan: pack ids": "plan",
    "plan: store lookups": "plan",
    "plan: store lookups: id filter": "plan: store lookups",
    "plan: store lookups: id filter read back (a store's first lookup)": "plan: store lookups",
    "transaction": "batch",
    "transaction: produce": "transaction",
    "transaction: wait for offsets": "transaction",
    "wait for the commit": "batch",
    "store write": "batch",
    "store write: id filter": "store write",
    "store write: id filter saved": "store write",
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
            counted = counted and (call.__name__ != "finish_in_flight" or args[0].in_flight is not None)
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
        summary = Worker(config).run(exit_on_idle_s=3)
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

    def below(parent: str, depth: int) -> list[tuple[str, float]]:
        rows = []
        for stage in parts[parent]:
            seconds = stages.get(stage, 0.0)
            rows.append(("  " * depth + stage.rsplit(": ", 1)[-1] if depth else stage, seconds))
            if parts[stage]:
                rows += below(stage, depth + 1)
                rest = seconds - sum(stages.get(part, 0.0) for part in parts[stage])
                rows.append(("  " * (depth + 1) + "rest", rest))
        return rows

    rows = [("collect (consume)", stages.get("collect", 0.0)), *below("batch", 0)]
    rows.append(("rest of the batch", stages.get("batch", 0.0) - sum(stages.get(s, 0.0) for s in parts["batch"])))
    outside = run["timed_seconds"] - stages.get("collect", 0.0) - stages.get("batch", 0.0)
    rows.append(("outside batches (idle checks, maintenance, status)", outside))
    return rows


def median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda run: run["messages_per_second"])[(len(runs) - 1) // 2]


def stage_table(title: str, variants: dict[str, dict]) -> Table:
    """Each stage's seconds and share of the busy time, a pair of columns per variant (its median run)."""
    table = Table(title=title)
    table.add_column("stage")
    for name in variants:
        table.add_column(f"{name}: seconds", justify="right")
        table.add_column("share", justify="right")
    rows = {name: rows_of(run) for name, run in variants.items()}
    first = next(iter(rows.values()))
    for index, (stage, _) in enumerate(first):
        cells = []
        for name, run in variants.items():
            seconds = rows[name][index][1]
            cells += [f"{seconds:.2f}", f"{seconds / run['timed_seconds']:.1%}"]
        table.add_row(stage, *cells)
    cells = []
    for run in variants.values():
        cells += [f"{run['timed_seconds']:.2f}", "100%"]
    table.add_row("first record consumed to the end of the last batch", *cells)
    cells = []
    for run in variants.values():
        collector = run["stages"].get("garbage collector", 0.0)
        cells += [f"{collector:.2f}", f"{collector / run['timed_seconds']:.1%}"]
    table.add_row("of all the above: Python's garbage collector", *cells)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    add_prefill_options(parser)
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
        prefilled = args.prefilled_dir or Path(scratch) / "prefilled"
        if args.prefilled_ids:
            with console.status(f"bulk loading {args.prefilled_ids:,} ids into {PARTITIONS} stores"):
                seconds = reuse_or_prefill(prefilled, "in", PARTITIONS, args.prefilled_ids)
            if seconds is not None:
                console.print(f"bulk loaded {args.prefilled_ids:,} ids in {seconds:.0f}s")
        copies: list[dict] = []
        runs: dict[str, list[dict]] = {"empty stores": []}
        if args.prefilled_ids:
            runs[f"{args.prefilled_ids:,} ids"] = []
        for round_ in range(args.repeat):
            with console.status(f"round {round_ + 1}/{args.repeat}: the plain transactional copy"):
                copies.append(copy_run(kafka, f"out-copy-{round_}"))
            for variant, (name, variant_runs) in enumerate(runs.items()):
                label = f"{round_}-{variant}"
                data_dir = Path(scratch) / f"data-{label}"
                if variant:
                    linked_copy(prefilled, data_dir)
                with console.status(f"round {round_ + 1}/{args.repeat}: dedupectl run on {name}, timed by stage"):
                    run = worker_run(kafka, data_dir, f"out-dedup-{label}", label)
                run["check"] = check_output(kafka, f"out-dedup-{label}", expected)
                variant_runs.append(run)
                shutil.rmtree(data_dir, ignore_errors=True)
    for run in copies + [run for variant_runs in runs.values() for run in variant_runs]:
        run["messages_per_second"] = run["consumed"] / run["busy_seconds"]
    failed = [run["check"] for variant_runs in runs.values() for run in variant_runs if not run["check"].exactly_once]
    if failed:
        raise SystemExit(f"an output was not exactly once: {failed}")
    copy = median_run(copies)
    medians = {name: median_run(variant_runs) for name, variant_runs in runs.items()}
    title = f"dedupectl run, {args.count:,} events, {PARTITIONS} partitions: where the time goes"
    console.print(stage_table(title, medians))
    copy_rates = ", ".join(f"{run['messages_per_second']:,.0f}" for run in copies)
    console.print(f"the copy {copy['messages_per_second']:,.0f} msg/s (runs: {copy_rates})")
    empty = medians["empty stores"]["messages_per_second"]
    for name, worker in medians.items():
        rates = ", ".join(f"{run['messages_per_second']:,.0f}" for run in runs[name])
        console.print(
            f"dedupectl on {name} {worker['messages_per_second']:,.0f} msg/s (runs: {rates}): "
            f"{worker['messages_per_second'] / copy['messages_per_second']:.2f}x the copy, "
            f"{worker['messages_per_second'] / empty:.2f}x empty stores; outputs exactly once "
            f"({statistics.median(run['check'].distinct_ids for run in runs[name]):,.0f} ids)"
        )


if __name__ == "__main__":
    main()
