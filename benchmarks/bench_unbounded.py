"""What a duplicate costs in a store without an aging bound, against one bounded at the same size.

    python benchmarks/bench_unbounded.py [--ids 4000000] [--batch 5000]

Two stores are grown to ``--ids`` ids through the worker's write path (``benchmarks/bench_scale.py``'s
``grow``), under the worker's memtable budget: one opened as a worker without ``max_keys`` opens it (its id
filter sized for twice the ids held, and grown as the store fills it), one as a worker with ``max_keys`` =
``--ids`` does (its filter sized once). For each it prints its generations and their stretches, the id
filter's stretch, and how many generations the group of a held id covers on average: a duplicate's lookup asks
each of them, and the p99 and longest of its batches while it grew (lookup and record: the growths of the
filter, its catch-ups and the merges are taken on the writer's thread between batches). Then 100,000 held ids
go to each through ``contains_many`` in batches of ``--batch``, the two stores taking turns batch by batch in
random order (``bench_scale.held_rates``: median of 5 rounds; the ratio is the median of the rounds' ratios):
present ids/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_scale import bounded_store, grow, held_rates, message_id, quiet  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.memory import limit_heap_retention  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
SAMPLE = 100_000
MERGE_WAIT_S = 600


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
            bounded_store(scratch, "bounded", shared, args.ids) as bounded,
        ):
            stores = {"without max_keys": unbounded, f"max_keys {args.ids:,}": bounded}
            latencies: dict[str, list[float]] = {name: [] for name in stores}
            for name, store in stores.items():
                with console.status(f"growing the store {name} to {args.ids:,} ids"):
                    grow(store, args.ids, args.batch, latencies=latencies[name])
                    if not store.wait_for_merges(MERGE_WAIT_S):
                        raise SystemExit(f"the store {name} was still merging generations after {MERGE_WAIT_S} s")
                    quiet(store)
            drawn = [message_id(n) for n in random.Random(1).choices(range(args.ids), k=SAMPLE)]
            with console.status("present lookups, the stores taking turns"):
                rates = held_rates(unbounded, bounded, drawn, drawn, args.batch, seed=2)
            for name, store in stores.items():
                if not all(store.contains_many(drawn[: args.batch])):
                    raise SystemExit(f"the store {name} lost ids it held")
            per_s = {"without max_keys": rates["per_s"], f"max_keys {args.ids:,}": rates["reference_per_s"]}
            ratios = {"without max_keys": rates["ratio_vs_reference"], f"max_keys {args.ids:,}": 1.0}
            table = Table(title=f"{args.ids:,} ids held, batches of {args.batch:,}", title_justify="left")
            columns = (
                "store",
                "generations",
                "their stretches",
                "filter stretch",
                "generations asked",
                "p99 batch while growing",
                "longest batch",
                "present ids/s",
            )
            for column in (*columns, "ratio"):
                table.add_column(column, justify="right")
            for name, store in stores.items():
                families = store.id_families()
                stretches = sorted({end - first for _, first, end in families[:-1]})
                table.add_row(
                    name,
                    str(len(families)),
                    ", ".join(f"{s:,}" for s in stretches),
                    f"{store.generation_ids():,}",
                    f"{generations_per_group(store):.2f}",
                    f"{1e3 * statistics.quantiles(latencies[name], n=100)[98]:.0f} ms",
                    f"{max(latencies[name]):.2f} s",
                    f"{per_s[name] / 1e3:.1f}k",
                    f"{ratios[name]:.2f}",
                )
            console.print(table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
