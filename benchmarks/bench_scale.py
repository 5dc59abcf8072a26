"""How the store's costs grow with the ids it holds, from 1M ids to ``--max-ids`` in one partition store.

    python benchmarks/bench_scale.py [--max-ids 100000000] [--batch 5000] [--out benchmarks/results/scale.json]
                                     [--bulk-load-ids 1000000000]

One store is grown through the worker's write path (``contains_many`` then ``record``, batches of ``--batch``
``ajs-`` ids, under the worker's memtable budget, its id filter sized for a window of ``--max-ids`` as a
worker's is for its aging bound). At 1M, 10M, 100M, ... ids (every power of ten up to
``--max-ids``, and ``--max-ids`` itself), with its memtables flushed and its merges settled, it is measured
against a reference store of 1M ids built the same way, bounded at 1M ids as a worker with ``max_keys``
1,000,000 is (its id filter sized for them once, each of its groups one generation), and kept open in the
same process:

- absent lookups: 200,000 ids never recorded, through ``contains_many`` in batches of ``--batch``; the two
  stores take turns on each batch in random order, each with its own copy of the ids, so a slow moment of the
  shared machine hits both alike (median of 5 rounds; the ratio is the median of the rounds' ratios). The
  same ids also go to the grown store's RocksDB directly (``contains_keys_in_db``: no id filter), in the
  same turns: what the filter saves at each size;
- present lookups: 100,000 ids drawn from those the store holds, the same way, each round drawn anew (a worker
  asks about a duplicate once; a bulk-loaded store's are the same ids each round);
- recent present lookups: 100,000 ids drawn from the last 100,000 each store recorded, the same way: a worker's
  duplicates are mostly retries of what it published shortly before (not measured in a bulk-loaded store);
- the ``ids`` family's SST files, bytes on disk per id (the whole directory, and of it the sealed generations'
  arrays), and this process's RSS growth per id since the 1M point, in all and its anonymous part (the rest is
  pages of mapped files: the sealed arrays a lookup touched), read with memtables empty, seals and merges
  settled and free heap pages returned. The id filter is allocated whole on the first lookup, so it is not in
  that growth: its bytes per id of the window are reported apart;
- ingest with aging: 200 more batches, in alternating blocks without and with an ``age_step`` between
  batches that keeps the store at its size (p99 batch latency of each, and their ratio);
- sealed arrays written while the store grew to the point: each stretch of growth batches during which a
  sealed generation's arrays were being written (``DedupStore.writing_arrays``), how long it lasted, and those
  batches' p50 and p99 latencies against the other growth batches'.

With ``--bulk-load-ids N``, a store of N random ids is then made by bulk load (``benchmarks/bulk_stores.py``,
as ``dedupectl rebuild`` makes one; ``--bulk-bucket-ids`` per file, 10M by default), opened as a worker opens its
store, and measured the same way against the same 1M-id store, with the memory its open took per id (RocksDB's
table readers and the id filter). N = 1,000,000,000 needs about 25 GB of disk and about an hour and a half on
two cores, where the page cache can hold the store; where it cannot, the lookups read the disk and take far
longer. ``--bulk-load-dir DIR`` keeps that store in ``DIR`` and measures the one kept there by an earlier run
of the same ids and files instead of loading it again (its load time is the one that run took).

Prints the curve with ratios against the 1M point and against the reference store, and writes the figures
to ``--out``. ``--max-ids 10000000`` is a run of a few minutes; 100M ids takes 10-20 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_store import (  # noqa: E402
    BASE_MS,
    MS_PER_ID,
    absent_id,
    aging_latency,
    message_id,
    percentile,
    rss_anon_bytes,
    rss_bytes,
    settle,
)
from benchmarks.bulk_stores import bucket_ids, bulk_load_store, kept_or_made  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.bulk_load import LoadLayout  # noqa: E402
from store.codec import encode_ids  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.footprint import dir_bytes, ids_files, sst_bytes  # noqa: E402
from store.memory import limit_heap_retention, release_free_memory  # noqa: E402
from store.options import SharedMemory, shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
REFERENCE_IDS = 1_000_000
ABSENT_SAMPLE = 200_000
PRESENT_SAMPLE = 100_000
RECENT_IDS = 100_000
ROUNDS = 5
AGING_BATCHES = 200
BULK_BATCH_IDS = 10_000
BULK_BUCKET_IDS = 10_000_000
BULK_SEED = 5
BULK_PRESENT_BUCKETS = 5  # present ids are drawn from this many buckets spread over the store


def points(max_ids: int) -> list[int]:
    marks = []
    size = REFERENCE_IDS
    while size < max_ids:
        marks.append(size)
        size *= 10
    return [*marks, max_ids]


def grow(
    store: DedupStore,
    upto: int,
    batch: int,
    progress: Progress | None = None,
    task=None,
    latencies: list[float] | None = None,
    sealing: list[tuple[float, float, bool]] | None = None,
) -> None:
    """Record ids ``next_seq .. upto - 1`` the way the worker does: look the batch up, record what is new; each
    batch's seconds (lookup and record) are appended to ``latencies`` if given, and to ``sealing`` with when
    it ended and whether a sealed generation's arrays were being written meanwhile."""
    rng = random.Random(upto)
    while store.state.next_seq < upto:
        first = store.state.next_seq
        numbers = range(first, min(first + batch, upto))
        ids = [message_id(n) for n in numbers]
        stamps = [BASE_MS + int(n * MS_PER_ID) - rng.randrange(2_000) for n in numbers]
        started = time.perf_counter()
        writing = sealing is not None and store.writing_arrays
        present = store.contains_many(ids)
        store.record([i for i, known in zip(ids, present, strict=True) if not known], stamps)
        ended = time.perf_counter()
        if latencies is not None:
            latencies.append(ended - started)
        if sealing is not None:
            sealing.append((ended, ended - started, writing or store.writing_arrays))
        if progress is not None:
            progress.update(task, completed=store.state.next_seq)


def sealing_figures(sealing: list[tuple[float, float, bool]]) -> dict:
    """What writing sealed arrays cost the growth ``grow`` recorded in ``sealing``: each stretch of batches
    during which arrays were written (from the end of the batch before it to the end of its last), and the
    batches' latencies during those stretches against the others'."""
    stretches: list[float] = []
    began = None
    for index, (ended, _, writing) in enumerate(sealing):
        if writing and began is None:
            began = sealing[index - 1][0] if index else ended - sealing[index][1]
        if began is not None and (not writing or index == len(sealing) - 1):
            stretches.append((ended if writing else sealing[index - 1][0]) - began)
            began = None
    figures: dict = {"stretches": len(stretches), "stretch_s": stretches}
    for name, wanted in (("writing", True), ("not_writing", False)):
        seconds = [latency for _, latency, writing in sealing if writing == wanted]
        figures[name] = {
            "batches": len(seconds),
            "p50_ms": 1000 * statistics.median(seconds) if seconds else None,
            "p99_ms": 1000 * percentile(seconds, 0.99) if seconds else None,
        }
    return figures


def bounded_store(scratch: Path, topic: str, shared: SharedMemory, window_ids: int) -> DedupStore:
    """Partition 0 of ``topic`` under ``scratch``, opened as a worker with ``max_keys`` = ``window_ids`` opens it."""
    return DedupStore.open(scratch / f"{topic}-0", topic=topic, partition=0, shared=shared, window_ids=window_ids)


def quiet(store: DedupStore) -> None:
    """Memtables empty, merges done, free heap returned: what is left is what the store holds per id."""
    store.flush()
    settle(store)
    release_free_memory()


def turn_rates(sides: dict, count: int, batch: int, seed: int) -> dict:
    """Ids per second of each side, ``sides`` being ``name -> (lookup, make_ids)``: the
    sides take turns batch by batch in random order, each round on fresh copies of the ids (see the module
    docstring). Returns the store's rate, the reference's, and the median of the rounds' ratios."""
    rng = random.Random(seed)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    ratios = []
    for _ in range(ROUNDS):
        batches = {
            name: [ids[at : at + batch] for at in range(0, count, batch)]
            for name, (_, make) in sides.items()
            for ids in [make()]
        }
        seconds = dict.fromkeys(sides, 0.0)
        turns = list(sides)
        for index in range(len(batches["store"])):
            rng.shuffle(turns)
            for name in turns:
                started = time.perf_counter()
                sides[name][0](batches[name][index])
                seconds[name] += time.perf_counter() - started
        for name in sides:
            rates[name].append(count / seconds[name])
        ratios.append(rates["store"][-1] / rates["reference"][-1])
    figures = {
        "per_s": statistics.median(rates["store"]),
        "reference_per_s": statistics.median(rates["reference"]),
        "ratio_vs_reference": statistics.median(ratios),
        "round_ratios": ratios,
    }
    if "direct" in rates:
        figures["without_filter_per_s"] = statistics.median(rates["direct"])
    return figures


def held_rates(
    store: DedupStore, reference: DedupStore, mine: list[bytes], theirs: list[bytes], batch: int, seed: int
) -> dict:
    """``turn_rates`` of each store looking up ids it holds (``mine``, ``theirs``: the same count), each round
    on fresh copies of them."""
    return turn_rates(
        {
            "store": (store.contains_many, lambda: [bytes(i) for i in mine]),
            "reference": (reference.contains_many, lambda: [bytes(i) for i in theirs]),
        },
        len(mine),
        batch,
        seed,
    )


def fresh_rates(
    store: DedupStore, reference: DedupStore, mine: tuple[int, int], theirs: tuple[int, int], batch: int, seed: int
) -> dict:
    """``turn_rates`` of each store looking up ids it holds, each round ``PRESENT_SAMPLE`` drawn anew from the
    numbers ``mine`` (``theirs``: the reference's) of ids ``grow`` recorded."""
    rng = random.Random(seed)

    def drawn(low: int, high: int):
        return lambda: [message_id(rng.randrange(low, high)) for _ in range(PRESENT_SAMPLE)]

    return turn_rates(
        {"store": (store.contains_many, drawn(*mine)), "reference": (reference.contains_many, drawn(*theirs))},
        PRESENT_SAMPLE,
        batch,
        seed,
    )


def measure(store: DedupStore, reference: DedupStore, batch: int, present_ids: list[bytes] | None = None) -> dict:
    """Lookups of ``store`` against ``reference`` (see the module docstring). ``present_ids``: ids the store
    holds (default: drawn from those ``grow`` recorded)."""
    state = store.state
    rng = random.Random(state.next_seq)
    drawn_from_grown = present_ids is None
    if present_ids is None:
        present_ids = [message_id(rng.randrange(state.first_live_seq, state.next_seq)) for _ in range(PRESENT_SAMPLE)]
    ref_drawn = [rng.randrange(REFERENCE_IDS) for _ in range(PRESENT_SAMPLE)]

    def absent():
        return [absent_id(n) for n in range(ABSENT_SAMPLE)]

    absent_rates = turn_rates(
        {
            "store": (store.contains_many, absent),
            "reference": (reference.contains_many, absent),
            "direct": (lambda ids: store.contains_keys_in_db(encode_ids(ids)), absent),
        },
        ABSENT_SAMPLE,
        batch,
        1,
    )
    if drawn_from_grown:  # each round draws anew: a worker asks about a duplicate once
        live = (state.first_live_seq, state.next_seq)
        present_rates = fresh_rates(store, reference, live, (0, REFERENCE_IDS), batch, 2)
    else:
        present_rates = held_rates(store, reference, present_ids, [message_id(n) for n in ref_drawn], batch, 2)
    recent = {}
    if drawn_from_grown:
        mine = (state.next_seq - RECENT_IDS, state.next_seq)
        recent = fresh_rates(store, reference, mine, (REFERENCE_IDS - RECENT_IDS, REFERENCE_IDS), batch, 3)
        assert all(store.contains_many([message_id(n) for n in range(*mine)][:batch]))
    assert not any(store.contains_many(absent()[:batch]))
    assert all(store.contains_many(present_ids[:batch]))
    return {
        "live_ids": state.live_ids,
        "ids_files": len(ids_files(store)),
        "dir_bytes": dir_bytes(store.path),
        "sst_bytes_per_id": sst_bytes(store) / state.live_ids,
        "bytes_per_id": dir_bytes(store.path) / state.live_ids,
        "rss_bytes": rss_bytes(),
        "rss_anon_bytes": rss_anon_bytes(),
        "arrays_bytes_per_id": store.arrays_bytes() / state.live_ids,
        "filter_bytes": store.filter_bytes,
        "absent": absent_rates,
        "present": present_rates,
        "recent": recent,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-ids", type=int, default=100_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--bulk-load-ids", type=int, default=0, help="also measure a bulk-loaded store of N ids")
    parser.add_argument(
        "--bulk-bucket-ids",
        type=int,
        default=BULK_BUCKET_IDS,
        help=f"ids per bulk-loaded file, a multiple of {BULK_BATCH_IDS:,}",
    )
    parser.add_argument(
        "--bulk-load-dir",
        type=Path,
        help="keep the bulk-loaded store here, and reuse the one kept by an earlier run of the same load",
    )
    parser.add_argument("--scratch", type=Path, help="directory for the stores (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale.json")
    parser.add_argument("--markdown", type=Path, help="also write the tables as markdown to this file")
    parser.add_argument("--render", type=Path, help="measure nothing: print (and --markdown) a result file")
    args = parser.parse_args()
    if args.render:
        result = json.loads(args.render.read_text())
        report(result)
        if args.markdown:
            args.markdown.write_text(markdown(result))
        return
    if args.max_ids < REFERENCE_IDS:
        raise SystemExit(f"--max-ids must be at least {REFERENCE_IDS:,}")
    limit_heap_retention()
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-scale-", dir=args.scratch))
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)  # the worker's memtable budget and block cache
    window = args.max_ids + 2 * AGING_BATCHES * args.batch * len(points(args.max_ids))  # aging adds ids
    curve = []
    started = time.perf_counter()
    try:
        with (
            # bounded, as a worker's store with max_keys: without a bound its filter would grow on the way to
            # 1M ids, and a grown filter's groups each span several of the generations cut before it
            bounded_store(scratch, "reference", shared, REFERENCE_IDS) as reference,
            # as a worker whose aging keeps --max-ids: its id filter is sized for that window from the start
            bounded_store(scratch, "bench", shared, window) as store,
            Progress(console=console, transient=True) as progress,
        ):
            task = progress.add_task("reference store", total=REFERENCE_IDS)
            grow(reference, REFERENCE_IDS, args.batch, progress, task)
            quiet(reference)
            for point in points(args.max_ids):
                # ids recorded while measuring aging count towards the next point
                progress.update(task, description=f"growing to {point:,} ids", total=point)
                sealing: list[tuple[float, float, bool]] = []
                upto = store.state.next_seq + point - store.state.live_ids
                grow(store, upto, args.batch, progress, task, sealing=sealing)
                progress.update(task, description=f"measuring at {point:,} ids")
                quiet(store)
                figures = measure(store, reference, args.batch)
                figures["sealing"] = sealing_figures(sealing)
                aging = aging_latency(store, store.state.next_seq, AGING_BATCHES, args.batch)
                figures["aging"] = {key: aging[key] for key in ("p99_ms", "p99_ratio", "age_step_ms", "ids_aged")}
                figures["point"] = point
                curve.append(figures)
                console.print(_line(figures, curve[0]))
                if _sealing_line(figures):
                    console.print(_sealing_line(figures))
            bulk = None
            if args.bulk_load_ids:
                store.close()  # its memory would blur what the bulk-loaded store's open takes
                layout = LoadLayout(batch_ids=BULK_BATCH_IDS, bucket_ids=args.bulk_bucket_ids)
                kept = args.bulk_load_dir or scratch / "bulk"
                bulk = measure_bulk(kept, reference, args.bulk_load_ids, layout, args.batch, progress, task)
                console.print(_bulk_line(bulk))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first = curve[0]
    for figures in curve:
        span = figures["live_ids"] - first["live_ids"]
        figures["rss_growth_per_id"] = (figures["rss_bytes"] - first["rss_bytes"]) / span if span > 0 else None
        figures["rss_anon_growth_per_id"] = (
            (figures["rss_anon_bytes"] - first["rss_anon_bytes"]) / span if span > 0 else None
        )
        for kind in ("absent", "present"):
            figures[kind]["ratio_vs_first_point"] = figures[kind]["per_s"] / first[kind]["per_s"]
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "batch": args.batch,
        "reference_ids": REFERENCE_IDS,
        "seconds": time.perf_counter() - started,
        "curve": curve,
        "window_ids": window,
        "filter_bytes_per_window_id": curve[-1]["filter_bytes"] / window,
        "bulk_loaded": bulk,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    report(result)
    if args.markdown:
        args.markdown.write_text(markdown(result))


def measure_bulk(
    kept: Path, reference: DedupStore, count: int, layout: LoadLayout, batch: int, progress: Progress, task
) -> dict:
    """Bulk load a store of ``count`` ids into ``kept`` (unless it holds that load already), open it as a
    worker does, and measure it against ``reference``."""
    path = kept / "bulk-0"
    window = count + count // 20

    def load() -> float:
        shutil.rmtree(path, ignore_errors=True)  # an earlier load's store, of other ids or cut short
        kept.mkdir(parents=True, exist_ok=True)
        progress.update(task, description=f"bulk loading {count:,} ids", total=count, completed=0)
        return bulk_load_store(
            path,
            topic="bulk",
            partition=0,
            count=count,
            layout=layout,
            seed=BULK_SEED,
            window_ids=window,
            on_bucket=lambda done: progress.update(task, completed=done),
        )

    wanted = {"ids": count, "batch_ids": layout.batch_ids, "bucket_ids": layout.bucket_ids, "seed": BULK_SEED}
    load_seconds, reused = kept_or_made(kept / "bulk-load.json", wanted, load)
    progress.update(task, description=f"measuring the bulk-loaded store of {count:,} ids")
    release_free_memory()
    before = rss_bytes()
    opened = time.perf_counter()
    with DedupStore.open(path, topic="bulk", partition=0, window_ids=window) as store:
        store.contains_many([b"warm-up"])  # the filter saved by the load is read here
        open_seconds = time.perf_counter() - opened
        release_free_memory()
        memory = rss_bytes() - before
        buckets = -(-count // layout.bucket_ids)
        chosen = sorted(
            {round(k * (buckets - 1) / max(BULK_PRESENT_BUCKETS - 1, 1)) for k in range(BULK_PRESENT_BUCKETS)}
        )
        rng = random.Random(5)
        present = []
        for bucket in chosen:
            size = min(layout.bucket_ids, count - bucket * layout.bucket_ids)
            present += rng.sample(bucket_ids(BULK_SEED, bucket, size).tolist(), PRESENT_SAMPLE // len(chosen))
        figures = measure(store, reference, batch, present)
        figures.update(
            load_seconds=load_seconds,
            reused=reused,
            bucket_ids=layout.bucket_ids,
            generation_ids=store.generation_ids(),
            open_seconds=open_seconds,
            memory_per_id=memory / count,
            filter_bytes_per_window_id=store.filter_bytes / window,
        )
    return figures


def _layout(figures: dict) -> str:
    if "bucket_ids" not in figures:  # results written before the layout was recorded
        return ""
    return f", files of {figures['bucket_ids']:,} ids, generations of {figures['generation_ids']:,} numbers"


def _bulk_line(figures: dict) -> str:
    return (
        f"bulk-loaded {figures['live_ids']:,} ids ({'kept from a load ' if figures.get('reused') else ''}"
        f"in {figures['load_seconds']:.0f}s{_layout(figures)}): "
        f"{figures['ids_files']} ids files, {figures['bytes_per_id']:.1f} B/id, "
        f"opened in {figures['open_seconds']:.1f}s taking "
        f"{figures['memory_per_id']:.2f} B/id of memory; absent {figures['absent']['per_s'] / 1e6:.2f}M/s "
        f"({figures['absent']['ratio_vs_reference']:.2f}x the 1M store; without the filter "
        f"{figures['absent']['without_filter_per_s'] / 1e6:.2f}M/s), "
        f"present {figures['present']['per_s'] / 1e3:.1f}k/s ({figures['present']['ratio_vs_reference']:.2f}x)"
    )


def markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        "# The store's costs by size",
        "",
        f"`benchmarks/bench_scale.py`, {machine['cpus']} cores, {machine['platform']}, Python {machine['python']}; "
        f"batches of {result['batch']:,} ids, the reference store holds {result['reference_ids']:,} ids; "
        f"{result['seconds'] / 60:.0f} minutes in all.",
        "",
        "| ids held | ids files | bytes on disk per id | of them sealed arrays | RSS growth per id | of it anonymous "
        "| absent ids/s | vs the 1M point "
        "| vs the 1M store | absent ids/s without the id filter | present ids/s | vs the 1M point | vs the 1M store "
        "| recent present ids/s | vs the 1M store | aging p99 ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in result["curve"]:
        growth = f.get("rss_growth_per_id")
        lines.append(
            f"| {f['live_ids']:,} | {f['ids_files']} | {f['bytes_per_id']:.1f} | {_arrays_cell(f)} | "
            f"{'-' if growth is None else f'{growth:.2f}'} | {_anon_cell(f)} | {f['absent']['per_s'] / 1e6:.2f}M | "
            f"{f['absent']['ratio_vs_first_point']:.2f} | {f['absent']['ratio_vs_reference']:.2f} | "
            f"{f['absent'].get('without_filter_per_s', 0) / 1e6:.2f}M | {f['present']['per_s'] / 1e3:.1f}k | "
            f"{f['present']['ratio_vs_first_point']:.2f} | {f['present']['ratio_vs_reference']:.2f} | "
            f"{' | '.join(_recent_cells(f))} | {f['aging']['p99_ratio']:.2f} |"
        )
    lines += [
        "",
        f"The id filter: {result['filter_bytes_per_window_id']:.2f} bytes per id of the window it is sized for.",
    ]
    sealing = [f"- {line}." for line in filter(None, map(_sealing_line, result["curve"]))]
    if sealing:
        lines += ["", "Sealed arrays written while the store grew:", "", *sealing]
    if result.get("bulk_loaded"):
        lines += ["", _bulk_line(result["bulk_loaded"]) + "."]
    return "\n".join(lines) + "\n"


def _arrays_cell(figures: dict) -> str:
    arrays = figures.get("arrays_bytes_per_id")  # absent from results written before sealed arrays
    return "-" if arrays is None else f"{arrays:.1f}"


def _anon_cell(figures: dict) -> str:
    growth = figures.get("rss_anon_growth_per_id")
    return "-" if growth is None else f"{growth:.2f}"


def _recent_cells(figures: dict) -> tuple[str, str]:
    recent = figures.get("recent")  # absent from results written before it was measured
    if not recent:
        return "-", "-"
    return f"{recent['per_s'] / 1e3:.1f}k", f"{recent['ratio_vs_reference']:.2f}"


def _line(figures: dict, first: dict) -> str:
    recent_rate, recent_ratio = _recent_cells(figures)
    return (
        f"{figures['live_ids']:,} ids: {figures['ids_files']} ids files, {figures['bytes_per_id']:.1f} B/id, "
        f"absent {figures['absent']['per_s'] / 1e6:.2f}M/s ({figures['absent']['ratio_vs_reference']:.2f}x the 1M "
        f"store), present {figures['present']['per_s'] / 1e3:.1f}k/s "
        f"({figures['present']['ratio_vs_reference']:.2f}x), recent present {recent_rate}/s ({recent_ratio}x), "
        f"aging p99 ratio {figures['aging']['p99_ratio']:.2f}"
    )


def _sealing_line(figures: dict) -> str | None:
    sealing = figures.get("sealing")  # absent from results written before it was measured
    if not sealing or not sealing["stretches"]:
        return None
    stretch, meanwhile, otherwise = sealing["stretch_s"], sealing["writing"], sealing["not_writing"]
    return (
        f"growing to {figures['point']:,} ids: sealed arrays written in {sealing['stretches']} "
        f"stretch{'' if sealing['stretches'] == 1 else 'es'} of "
        f"{statistics.median(stretch):.1f} s (median; longest {max(stretch):.1f} s); the batches meanwhile "
        f"p50 {meanwhile['p50_ms']:.1f} ms, p99 {meanwhile['p99_ms']:.1f} ms ({meanwhile['batches']:,} batches), "
        f"the others p50 {otherwise['p50_ms']:.1f} ms, p99 {otherwise['p99_ms']:.1f} ms"
    )


def report(result: dict) -> None:
    table = Table(title=f"the store's costs by size (machine: {result['machine']['cpus']} cores)", title_justify="left")
    for column in (
        "ids held",
        "ids files",
        "B/id on disk",
        "of it sealed arrays",
        "RSS growth B/id",
        "of it anonymous",
        "absent ids/s",
        "vs 1M point",
        "vs 1M store",
        "absent, no filter",
        "present ids/s",
        "vs 1M point",
        "vs 1M store",
        "recent present",
        "vs 1M store",
        "aging p99 ratio",
    ):
        table.add_column(column, justify="right")
    for f in result["curve"]:
        growth = f["rss_growth_per_id"]
        table.add_row(
            f"{f['live_ids']:,}",
            str(f["ids_files"]),
            f"{f['bytes_per_id']:.1f}",
            _arrays_cell(f),
            "-" if growth is None else f"{growth:.2f}",
            _anon_cell(f),
            f"{f['absent']['per_s'] / 1e6:.2f}M",
            f"{f['absent']['ratio_vs_first_point']:.2f}",
            f"{f['absent']['ratio_vs_reference']:.2f}",
            f"{f['absent']['without_filter_per_s'] / 1e6:.2f}M",
            f"{f['present']['per_s'] / 1e3:.1f}k",
            f"{f['present']['ratio_vs_first_point']:.2f}",
            f"{f['present']['ratio_vs_reference']:.2f}",
            *_recent_cells(f),
            f"{f['aging']['p99_ratio']:.2f}",
        )
    console.print(table)
    console.print(f"id filter: {result['filter_bytes_per_window_id']:.2f} bytes per id of the window it is sized for")
    for line in filter(None, map(_sealing_line, result["curve"])):
        console.print(line)
    if result.get("bulk_loaded"):
        console.print(_bulk_line(result["bulk_loaded"]))


if __name__ == "__main__":
    main()
