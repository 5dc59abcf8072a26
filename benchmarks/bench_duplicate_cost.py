"""Where a duplicate's lookup spends its time, in a store of ``--size`` ids against a store of 1M ids: which part
of its cost grows with the store.

    python benchmarks/bench_duplicate_cost.py [--size 100000000] [--batch 5000]

Both stores are grown as ``bench_scale.py`` grows them (the worker's write path, bounded as a worker with
``max_keys`` is: the 1M store at 1M ids, the other at ``--size``), kept open in one process and sharing the
worker's block cache, and their files synced (else the kernel writes them back during the first rounds). Then
100,000 ids each store holds go through ``contains_many`` in batches of ``--batch``, the two stores taking turns
on each batch (median of 5 rounds, ``bench_scale.py``'s ``turn_rates``). Each round draws its ids anew: a worker
asks about a duplicate once, and ids asked again round after round find more of what they read in the CPU's
caches. They are drawn these ways:

- **all**: at random over every live id, as ``bench_scale.py`` draws its present ids;
- **sealed**: over the generations older than the newest (in their sealed arrays, ``store/generation_arrays.py``);
- **newest**: over the newest generation (written, its blocks kept in the block cache);
- **a full newest generation's share**: over the sealed generations, but for the share of the ids a full
  newest generation would hold (its stretch over the ids held, about 7%), drawn over the newest;
- **own work**: as **all**, with RocksDB's reads left out (every id the filter routes is answered as found
  without asking its generation): the store's own work per duplicate, the id filter and the Python around
  each batch.

Before each draw is timed, a batch of it is asked as measured: every id must be found, with its number.

Prints µs per duplicate in each store (the median of the rounds' rates), the median of the rounds' ratios of the
two rates (present lookups are held to 0.8 of the 1M store's rate at 100M ids) and each round's ratio, and what
share of the live ids each store's newest generation holds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_scale import (  # noqa: E402
    PRESENT_SAMPLE,
    REFERENCE_IDS,
    bounded_store,
    grow,
    quiet,
    turn_rates,
)
from benchmarks.bench_store import MIX, message_id  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.codec import encode_ids  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.memory import limit_heap_retention  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
FOUND = (1).to_bytes(8, "big")


@dataclass(frozen=True)
class Row:
    label: str
    draw: str  # all, sealed, newest or full (see drawn)
    reads: str  # store (as the store reads them), none (the store's own work)


ROWS = (
    Row("all", "all", "store"),
    Row("sealed", "sealed", "store"),
    Row("newest", "newest", "store"),
    Row("a full newest generation's share", "full", "store"),
    Row("own work", "all", "none"),
)


@contextmanager
def own_work_only(store: DedupStore) -> Iterator[None]:
    """``store``'s lookups with every key a generation is asked about answered as found without reading: the
    store's own work."""

    def ask(generation, keys, indexes, values, per_call):
        for index in indexes:
            values[index] = FOUND
        return []

    with mock.patch.object(store, "_ask", ask):
        yield


def number_of(message_id: bytes) -> int:
    """The number ``bench_store.message_id`` made ``message_id`` of."""
    return int(message_id[4:], 16) * pow(MIX, -1, 1 << 128) % (1 << 128)


def newest_first_seq(store: DedupStore) -> int:
    return store.id_families()[-1][1]


def full_newest_share(store: DedupStore) -> float:
    """The share of ``store``'s live ids a full newest generation holds: its stretch over the ids held."""
    return min(1.0, store.generation_ids() / store.state.live_ids)


def drawn(store: DedupStore, how: str, rng: random.Random) -> list[bytes]:
    """``PRESENT_SAMPLE`` ids ``store`` holds: over all its live ids, over the generations older than the
    newest (sealed), over the newest, or (full) over the sealed ones but for the share a full newest generation
    would have of the store's ids (its stretch over the ids held), drawn over the newest."""
    low, high = store.state.first_live_seq, store.state.next_seq
    newest = newest_first_seq(store)
    if how == "full":
        from_newest = round(PRESENT_SAMPLE * full_newest_share(store))
        ids = [message_id(rng.randrange(newest, high)) for _ in range(from_newest)]
        ids += [message_id(rng.randrange(low, newest)) for _ in range(PRESENT_SAMPLE - from_newest)]
        rng.shuffle(ids)
        return ids
    if how == "sealed":
        high = newest
    elif how == "newest":
        low = newest
    return [message_id(rng.randrange(low, high)) for _ in range(PRESENT_SAMPLE)]


def fresh_draws(store: DedupStore, how: str, rng: random.Random) -> Callable[[], list[bytes]]:
    """Ids ``drawn`` anew for each round: a worker asks about a duplicate once, and ids asked again find their
    memory in the CPU's caches more often."""
    return lambda: drawn(store, how, rng)


def newest_share(store: DedupStore) -> float:
    state = store.state
    return (state.next_seq - newest_first_seq(store)) / (state.next_seq - state.first_live_seq)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--scratch", type=Path, help="directory for the stores (default: a temporary one)")
    args = parser.parse_args()
    if args.size <= REFERENCE_IDS:
        raise SystemExit(f"--size must be above {REFERENCE_IDS:,}")
    limit_heap_retention()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-duplicate-", dir=args.scratch))
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)
    rows = ROWS
    rates = {}
    try:
        with (
            bounded_store(scratch, "reference", shared, REFERENCE_IDS) as reference,
            bounded_store(scratch, "bench", shared, args.size) as store,
            Progress(console=console, transient=True) as progress,
        ):
            for name, grown, size in (("1M store", reference, REFERENCE_IDS), ("store", store, args.size)):
                task = progress.add_task(f"growing the {name}", total=size)
                grow(grown, size, args.batch, progress, task)
                quiet(grown)
            os.sync()  # else the kernel writes the files back while the first rounds are timed
            rng = random.Random(args.size)
            for seed, row in enumerate(rows):
                progress.add_task(f"looking up: {row.label}", total=None)
                asked = {"store": store, "reference": reference}
                with ExitStack() as reads:
                    for grown in asked.values():
                        if row.reads == "none":
                            reads.enter_context(own_work_only(grown))
                    for grown in asked.values():  # every id held, with its own number
                        if row.reads != "none":
                            ids = drawn(grown, row.draw, rng)[: args.batch]
                            answers = grown.live_seqs(encode_ids(ids))
                            assert answers == [number_of(i) for i in ids], f"{row.label}: wrong answers"
                    rates[row.label] = turn_rates(
                        {
                            name: (grown.contains_many, fresh_draws(grown, row.draw, rng))
                            for name, grown in asked.items()
                        },
                        PRESENT_SAMPLE,
                        args.batch,
                        seed,
                    )
            shares = (newest_share(reference), newest_share(store))
            full = (full_newest_share(reference), full_newest_share(store))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(title=f"a duplicate's lookup, {PRESENT_SAMPLE:,} ids in batches of {args.batch:,}")
    columns = ("ids drawn over", "1M store, µs", f"{args.size:,} ids, µs", "ratio of the rates", "rounds' ratios")
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        figures = rates[row.label]
        table.add_row(
            row.label,
            f"{1e6 / figures['reference_per_s']:.2f}",
            f"{1e6 / figures['per_s']:.2f}",
            f"{figures['ratio_vs_reference']:.3f}",
            " ".join(f"{ratio:.2f}" for ratio in figures["round_ratios"]),
        )
    console.print(table)
    console.print(
        f"share of the live ids in the newest generation: {shares[0]:.1%} (1M store), {shares[1]:.1%}; "
        f"a full one's: {full[0]:.1%}, {full[1]:.1%}"
    )


if __name__ == "__main__":
    main()
