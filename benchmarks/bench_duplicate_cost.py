"""Where a duplicate's lookup spends its time, in a store of ``--size`` ids against a store of 1M ids: which part
of its cost grows with the store.

    python benchmarks/bench_duplicate_cost.py [--size 100000000] [--batch 5000]

Both stores are grown as ``bench_scale.py`` grows them (the worker's write path, bounded as a worker with
``max_keys`` is: the 1M store at 1M ids, the other at ``--size``), kept open in one process and sharing the
worker's block cache. Then 100,000 ids each store holds go through ``contains_many`` in batches of
``--batch``, the two stores taking turns on each batch (median of 5 rounds, ``bench_scale.py``'s
``turn_rates``), drawn four ways:

- **all**: at random over every live id, as ``bench_scale.py`` draws its present ids;
- **sealed**: over the generations older than the newest (sealed runs, read without filling the block cache);
- **newest**: over the newest generation (written, its blocks kept in the block cache);
- **own work**: as **all**, with RocksDB's reads left out (every id the filter routes is answered as found
  without asking its generation): the store's own work per duplicate, the id filter and the Python around
  each batch.

Prints µs per duplicate in each store, and the ratio of the two rates (the issue's bar: 0.8), and what share
of the ids drawn at random over all falls in each store's newest generation.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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
    held_rates,
    quiet,
)
from benchmarks.bench_store import message_id  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.memory import limit_heap_retention  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
DRAWS = ("all", "sealed", "newest", "own work")
FOUND = (1).to_bytes(8, "big")


@contextmanager
def without_reads() -> Iterator[None]:
    """Lookups that skip RocksDB: every key a generation is asked about is answered as found."""

    def found(generation, keys, indexes, values, per_call):
        for index in indexes:
            values[index] = FOUND
        return []

    with mock.patch.object(DedupStore, "_ask", staticmethod(found)):
        yield


def newest_first_seq(store: DedupStore) -> int:
    return store.id_families()[-1][1]


def drawn(store: DedupStore, how: str, rng: random.Random) -> list[bytes]:
    """``PRESENT_SAMPLE`` ids ``store`` holds, drawn as ``how`` says (see the module docstring)."""
    low, high = store.state.first_live_seq, store.state.next_seq
    if how == "sealed":
        high = newest_first_seq(store)
    elif how == "newest":
        low = newest_first_seq(store)
    return [message_id(rng.randrange(low, high)) for _ in range(PRESENT_SAMPLE)]


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
            rng = random.Random(args.size)
            for seed, how in enumerate(DRAWS):
                progress.add_task(f"looking up ids drawn over {how}", total=None)
                draw = "all" if how == "own work" else how
                mine, theirs = drawn(store, draw, rng), drawn(reference, draw, rng)
                assert all(store.contains_many(mine[: args.batch]) + reference.contains_many(theirs[: args.batch]))
                with without_reads() if how == "own work" else nullcontext():
                    rates[how] = held_rates(store, reference, mine, theirs, args.batch, seed)
            shares = (newest_share(reference), newest_share(store))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(title=f"a duplicate's lookup, {PRESENT_SAMPLE:,} ids in batches of {args.batch:,}")
    for column in ("ids drawn over", "1M store, µs", f"{args.size:,} ids, µs", "ratio of the rates"):
        table.add_column(column, justify="right")
    for how in DRAWS:
        figures = rates[how]
        table.add_row(
            how,
            f"{1e6 / figures['reference_per_s']:.2f}",
            f"{1e6 / figures['per_s']:.2f}",
            f"{figures['ratio_vs_reference']:.3f}",
        )
    console.print(table)
    console.print(f"share of the live ids in the newest generation: {shares[0]:.1%} (1M store), {shares[1]:.1%}")


if __name__ == "__main__":
    main()
