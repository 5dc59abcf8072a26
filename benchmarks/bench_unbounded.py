"""What a duplicate costs in a store without an aging bound, against one bounded at the same size.

    python benchmarks/bench_unbounded.py [--ids 4000000] [--batch 5000]

Two stores are grown to ``--ids`` ids through the worker's write path (``benchmarks/bench_scale.py``'s
``grow``), under the worker's memtable budget: one opened as a worker without ``max_keys`` opens it (its id
filter sized for twice the ids held, and grown as the store fills it), one as a worker with ``max_keys`` =
``--ids`` does (its filter sized once). For each it prints its generations and their stretches, the id
filter's stretch, and how many generations the group of a held id covers on average: a duplicate's lookup asks
each of them. Then 100,000 held ids of each go through ``contains_many`` in batches of ``--batch``, the two
stores taking turns batch by batch in random order (3 rounds): present ids/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_scale import grow, message_id, quiet  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.memory import limit_heap_retention  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
SAMPLE = 100_000
ROUNDS = 3


def generations_per_group(store: DedupStore) -> float:
    """Generations a held id's filter group covers, averaged over the numbers held: the groups start at
    multiples of the filter's stretch, and a lookup the filter routes asks every generation its group's
    stretch meets."""
    stretch = store.generation_ids()
    families = store.id_families()
    low, high = families[0][1], families[-1][2]
    numbers = asked = 0
    for group in range(low // stretch * stretch, high, stretch):
        held = min(group + stretch, high) - max(group, low)
        numbers += held
        asked += held * sum(1 for _, first, end in families if first < group + stretch and end > group)
    return asked / numbers


def present_rates(stores: dict[str, DedupStore], count: int, batch: int) -> dict[str, float]:
    rng = random.Random(1)
    seconds = dict.fromkeys(stores, 0.0)
    for _ in range(ROUNDS):
        drawn = [rng.randrange(count) for _ in range(SAMPLE)]
        for at in range(0, SAMPLE, batch):
            turns = list(stores)
            rng.shuffle(turns)
            for name in turns:
                ids = [message_id(n) for n in drawn[at : at + batch]]
                started = time.perf_counter()
                found = stores[name].contains_many(ids)
                seconds[name] += time.perf_counter() - started
                if not all(found):
                    raise SystemExit(f"the {name} store lost held ids")
    return {name: ROUNDS * SAMPLE / spent for name, spent in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=4_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    args = parser.parse_args()
    limit_heap_retention()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-unbounded-"))
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)
    try:
        with (
            DedupStore.open(scratch / "unbounded-0", topic="unbounded", partition=0, shared=shared) as unbounded,
            DedupStore.open(
                scratch / "bounded-0", topic="bounded", partition=0, shared=shared, window_ids=args.ids
            ) as bounded,
        ):
            stores = {"without max_keys": unbounded, f"max_keys {args.ids:,}": bounded}
            for name, store in stores.items():
                with console.status(f"growing the store {name} to {args.ids:,} ids"):
                    grow(store, args.ids, args.batch)
                    quiet(store)
            with console.status("present lookups, the stores taking turns"):
                rates = present_rates(stores, args.ids, args.batch)
            table = Table(title=f"{args.ids:,} ids held, batches of {args.batch:,}", title_justify="left")
            columns = (
                "store",
                "generations",
                "their stretches",
                "filter stretch",
                "generations asked",
                "present ids/s",
            )
            for column in (*columns, "ratio"):
                table.add_column(column, justify="right")
            baseline = rates[f"max_keys {args.ids:,}"]
            for name, store in stores.items():
                stretches = sorted({end - first for _, first, end in store.id_families()[:-1]})
                table.add_row(
                    name,
                    str(len(store.id_families())),
                    ", ".join(f"{s:,}" for s in stretches),
                    f"{store.generation_ids():,}",
                    f"{generations_per_group(store):.2f}",
                    f"{rates[name] / 1e3:.1f}k",
                    f"{rates[name] / baseline:.2f}",
                )
            console.print(table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
