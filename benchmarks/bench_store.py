"""The dedup store against its targets, all figures from one run on this machine.

    python benchmarks/bench_store.py [--ids 10000000] [--batch 5000]

1. build: a child process records ``--ids`` Segment-like ids (``ajs-`` + 32 hex) through ``DedupStore``
   exactly as the worker does (``contains_many`` then ``record``, batches of ``--batch``), reporting its RSS at
   10% and 100% of the ids, the batch latencies, and the bytes on disk per id once flushes settle; a second
   child grows a Python ``set`` of the same ids, the baseline for RSS growth per id. Both children call
   ``store.memory.limit_heap_retention()`` first (as the worker should), and the build child empties its
   memtables (bounded: 2 x 64 MiB, the same at any size) before each RSS reading, so the slope is per id.
2. lookups: absent and present ids through ``contains_many`` (and ``contains_keys``, ``lookup_many``) against
   raw rocksdict multi-gets of the same keys, each asked of the generation that holds it, the methods taking
   turns on each batch (medians of 11 rounds: see ``lookups``).
3. aging: ingest more batches alternating blocks without and with ``age_step`` between batches (p99 batch
   latency of each), then age the store down to half with ``age_fully`` (ids removed per second).

Prints a table and writes benchmarks/results/store.json. Targets: lookups >= 0.8x raw and >= 1M absent ids/s;
aging >= 500k ids/s and p99 with aging <= 1.5x without; <= 25 bytes per id at 10M ids; RSS growth per id
<= 1/20 of the set's.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store.aging import AgingPolicy, age_fully, age_step  # noqa: E402
from store.codec import encode_ids  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.footprint import dir_bytes, ids_files, sst_bytes  # noqa: E402
from store.memory import limit_heap_retention, release_free_memory  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console()
MIX = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: n -> n * MIX mod 2^128 is a bijection that looks random
BASE_MS = 1_700_000_000_000
MS_PER_ID = 8.64  # 10 million ids a day
ABSENT_SAMPLE = 200_000
PRESENT_SAMPLE = 40_000  # each present id reads a data block: 40x slower than an absent one


def message_id(n: int) -> bytes:
    return f"ajs-{(n * MIX) & ((1 << 128) - 1):032x}".encode()


def absent_id(n: int) -> bytes:
    return f"ajs-{((n + (1 << 100)) * MIX) & ((1 << 128) - 1):032x}".encode()


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_anon_bytes() -> int:
    """The anonymous part of the RSS: the heap, not the pages of files mapped (sealed arrays, libraries)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# -- children ----------------------------------------------------------------------------------------------


def child_set(count: int, batch: int) -> dict:
    """RSS of a set of the ids at 10% and 100%: what an in-memory dedup would cost."""
    limit_heap_retention()
    seen: set[bytes] = set()
    marks = {}
    for first in range(0, count, batch):
        seen.update(message_id(n) for n in range(first, min(first + batch, count)))
        if len(seen) in (count // 10, count):
            release_free_memory()  # the same treatment as the store's process
            marks[len(seen)] = rss_bytes()
    return {"rss": marks}


def child_build(path: str, count: int, batch: int) -> dict:
    limit_heap_retention()
    rng = random.Random(7)
    marks, raw_marks, settled_marks, latencies = {}, {}, {}, []
    started = time.perf_counter()
    # the worker's memtable budget and block cache, as `dedupectl run` sets them
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)
    with DedupStore.open(Path(path), topic="bench", partition=0, shared=shared) as store:
        for first in range(0, count, batch):
            numbers = range(first, min(first + batch, count))
            ids = [message_id(n) for n in numbers]
            stamps = [BASE_MS + int(n * MS_PER_ID) - rng.randrange(2_000) for n in numbers]
            t0 = time.perf_counter()
            present = store.contains_many(ids)
            store.record([i for i, known in zip(ids, present, strict=True) if not known], stamps)
            latencies.append(time.perf_counter() - t0)
            done = first + len(ids)
            if done in (count // 10, count):
                raw_marks[done] = rss_bytes()
                pause = time.perf_counter()
                # memtables (2 x 64 MiB) and a merge's buffers (its filter builder keeps 8 B per key until the
                # file is done) are bounded, not per retained id: read RSS with memtables empty and no merge
                store.flush()
                settle(store)
                settled_marks[done] = rss_bytes()
                release_free_memory()  # what the worker does once a minute (store.memory)
                marks[done] = rss_bytes()
                started += time.perf_counter() - pause
        elapsed = time.perf_counter() - started
        store.flush()
        settle(store)
        files = ids_files(store)
        return {
            "rss": marks,
            "rss_with_memtables": raw_marks,
            "rss_before_release": settled_marks,
            "seconds": elapsed,
            "ids_per_second": count / elapsed,
            "batch_p50_ms": 1000 * statistics.median(latencies),
            "batch_p99_ms": 1000 * percentile(latencies, 0.99),
            "sst_bytes": sst_bytes(store),
            "dir_bytes": dir_bytes(Path(path)),
            "ids_files": len(files),
        }


def settle(store: DedupStore, timeout: float = 600, quiet_s: float = 5.0) -> None:
    """Wait for background merges (their CPU would skew what is measured next): until none is pending, or
    none has run for ``quiet_s`` (RocksDB can report a compaction pending that its picker never takes: with the
    worker's memtable budget this waited out the whole timeout)."""
    deadline = time.monotonic() + timeout
    store.wait_for_seals(timeout)  # generations sealed: their arrays written and taken in
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        running = store.compactions_running()
        pending = store.compaction_pending()
        if running:
            quiet_since = time.monotonic()
        elif not pending or time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.5)


def _child(mode: str, *args: str) -> dict:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", mode, *args], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise SystemExit(f"child {mode} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


# -- measurements in this process ----------------------------------------------------------------------------


def best_rate(count: int, action, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - t0)
    return count / best


def _batches(items: list, batch: int) -> list[list]:
    return [items[start : start + batch] for start in range(0, len(items), batch)]


def _by_family(store: DedupStore, batches: list[list[bytes]]) -> list[list[tuple[object, list[bytes]]]]:
    """Each batch's keys grouped by the generation that holds them (an id the store lacks: the newest), as the
    id filter routes them: what RocksDB alone has to do for the batch."""
    families = store.id_families()
    firsts = [first for _, first, _ in families]
    handles = {name: store.family(name) for name, _, _ in families}
    grouped = []
    for keys in batches:
        groups: dict[str, list[bytes]] = {}
        for key, seq in zip(keys, store.live_seqs(keys), strict=True):
            name = families[bisect.bisect_right(firsts, seq) - 1][0] if seq is not None else families[-1][0]
            groups.setdefault(name, []).append(key)
        grouped.append([(handles[name], keys) for name, keys in groups.items()])
    return grouped


def _raw_multiget(grouped: list[list[tuple[object, list[bytes]]]], per_call: int | None):
    """Raw multi-gets of one batch of keys, each asked of its generation: all in one list, or ``per_call``
    keys a list."""
    return lambda index: [
        family[keys[at : at + (per_call or len(keys))]]
        for family, keys in grouped[index]
        for at in range(0, len(keys), per_call or len(keys))
    ]


def _interleaved(methods: dict, count: int, rng: random.Random) -> dict[str, float]:
    """Seconds each method took over ``count`` batches, the methods taking turns on each batch in a random order."""
    seconds = dict.fromkeys(methods, 0.0)
    turns = list(methods.items())
    for index in range(count):
        rng.shuffle(turns)
        for name, action in turns:
            started = time.perf_counter()
            action(index)
            seconds[name] += time.perf_counter() - started
    return seconds


def lookups(store: DedupStore, total: int, batch: int, rounds: int = 11) -> dict:
    """Ids per second of each way to look ids up, and the store's against raw multi-gets.

    The machine is shared and its speed swings within seconds: best-of timings of whole passes gave ratios
    that differed by 0.1 from run to run. Instead every method takes its turn on each batch, in a random
    order, and a round sums each method's times over all batches, so a slow moment hits all methods alike.
    Each method has its own copy of the ids (or keys): none warms the CPU's caches for another. Rates are the
    median round's, ratios the median of the rounds' ratios."""
    rng = random.Random(11)
    drawn = [rng.randrange(total) for _ in range(PRESENT_SAMPLE)]
    results = {}
    for label, sample, make_ids in (
        ("absent", ABSENT_SAMPLE, lambda: [absent_id(n) for n in range(ABSENT_SAMPLE)]),
        ("present", PRESENT_SAMPLE, lambda: [message_id(n) for n in drawn]),
    ):  # make_ids() gives new objects each call: a copy per method

        def raw(make_ids=make_ids) -> list[list[tuple[object, list[bytes]]]]:
            return _by_family(store, _batches(encode_ids(make_ids()), batch))

        methods = {
            "raw_multiget_whole_batch_per_s": _raw_multiget(raw(), None),
            "raw_multiget_512_per_s": _raw_multiget(raw(), 512),
            # the lists the store's API sends (store.lookups.LOOKUP_CHUNK)
            "raw_multiget_32_per_s": _raw_multiget(raw(), 32),
            "contains_many_per_s": lambda i, b=_batches(make_ids(), batch): store.contains_many(b[i]),
            # the worker's path: a batch's ids are encoded once, for this lookup and for record()
            "contains_keys_per_s": lambda i, b=_batches(encode_ids(make_ids()), batch): store.contains_keys(b[i]),
        }
        assert all(methods["contains_many_per_s"](0)) == (label == "present")
        rates: dict[str, list[float]] = {name: [] for name in methods}
        ratios: dict[str, list[float]] = {"ratio_vs_raw": [], "contains_keys_ratio_vs_raw": []}
        for _ in range(rounds):
            for name, seconds in _interleaved(methods, -(-sample // batch), rng).items():
                rates[name].append(sample / seconds)
            raw = max(rates[name][-1] for name in methods if name.startswith("raw_multiget_"))
            ratios["ratio_vs_raw"].append(rates["contains_many_per_s"][-1] / raw)
            ratios["contains_keys_ratio_vs_raw"].append(rates["contains_keys_per_s"][-1] / raw)
        medians = {name: statistics.median(values) for name, values in rates.items()}
        many = _batches(make_ids(), batch)
        results[label] = {
            **medians,
            "raw_multiget_per_s": max(medians[name] for name in medians if name.startswith("raw_multiget_")),
            "lookup_many_per_s": best_rate(sample, lambda b=many: [store.lookup_many(ids) for ids in b], repeats=1),
            **{name: statistics.median(values) for name, values in ratios.items()},
            "ratio_vs_raw_quartiles": statistics.quantiles(ratios["ratio_vs_raw"], n=4),
            "rounds": rounds,
            "sample": sample,
        }
    return results


def aging_latency(store: DedupStore, first: int, batches: int, batch: int, block: int = 5) -> dict:
    """Ingest ``batches`` more batches in alternating blocks, without and with an aging step between batches.

    Short blocks: a flush, a merge or the shared machine slows a run of batches (two cores), and in blocks of
    25 one such burst could fall in a single block and alone set that mode's p99 (ratios of 1.0 and 2.5 in two
    runs). Blocks of 5 spread bursts over both modes but cannot undo a burst of 3 stalled batches out of 300
    (2.9 in one run on a loaded machine): age_step's own time is reported to tell aging from the machine."""
    policy = AgingPolicy(max_keys=store.state.live_ids)  # every batch in a 'with' block ages as many ids
    latencies: dict[str, list[float]] = {"without": [], "with": []}
    steps: list[float] = []  # age_step's own seconds: tells aging's cost from the machine's hiccups
    slowest: list[tuple[float, int, str]] = []
    aged = 0
    n = first
    for index in range(batches):
        mode = "with" if (index // block) % 2 else "without"
        ids = [message_id(k) for k in range(n, n + batch)]
        stamps = [BASE_MS + int(k * MS_PER_ID) for k in range(n, n + batch)]
        t0 = time.perf_counter()
        present = store.contains_many(ids)
        store.record([i for i, known in zip(ids, present, strict=True) if not known], stamps)
        if mode == "with":
            step = age_step(store, policy)
            aged += step.aged
            steps.append(step.seconds)
        else:
            policy = AgingPolicy(max_keys=store.state.live_ids)  # nothing to age until the next 'with' block
        latencies[mode].append(time.perf_counter() - t0)
        slowest = sorted([*slowest, (latencies[mode][-1], index, mode)], reverse=True)[:6]
        n += batch
    return {
        "batches_each": {mode: len(values) for mode, values in latencies.items()},
        "p50_ms": {mode: 1000 * statistics.median(values) for mode, values in latencies.items()},
        "p95_ms": {mode: 1000 * percentile(values, 0.95) for mode, values in latencies.items()},
        "p99_ms": {mode: 1000 * percentile(values, 0.99) for mode, values in latencies.items()},
        "p99_ratio": percentile(latencies["with"], 0.99) / percentile(latencies["without"], 0.99),
        "age_step_ms": {"p50": 1000 * statistics.median(steps), "p99": 1000 * percentile(steps, 0.99)},
        "slowest_batches": [{"ms": 1000 * seconds, "index": index, "mode": mode} for seconds, index, mode in slowest],
        "ids_aged": aged,
        "next_id": n,
    }


def aging_rate(store: DedupStore) -> dict:
    live = store.state.live_ids
    before = sst_bytes(store)
    t0 = time.perf_counter()
    result = age_fully(store, AgingPolicy(max_keys=live // 2))
    elapsed = time.perf_counter() - t0
    return {
        "ids_aged": result.aged,
        "seconds": elapsed,
        "ids_per_second": result.aged / elapsed if elapsed else None,
        "generations_dropped": result.generations_dropped,
        "bytes_before": before,
        "bytes_freed": result.bytes_dropped,
        "live_ids_after": result.live_ids,
    }


# -- orchestration -------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--aging-batches", type=int, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/store.json")
    parser.add_argument("--child", choices=["set", "build"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "set":
        json.dump(child_set(args.ids, args.batch), sys.stdout)
        return
    if args.child == "build":
        json.dump(child_build(args.path, args.ids, args.batch), sys.stdout)
        return

    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-store-"))
    try:
        path = scratch / "bench-0"
        with console.status(f"python set of {args.ids:,} ids"):
            baseline = _child("set", "--ids", str(args.ids), "--batch", str(args.batch))
        with console.status(f"recording {args.ids:,} ids through DedupStore"):
            build = _child("build", "--ids", str(args.ids), "--batch", str(args.batch), "--path", str(path))
        with DedupStore.open(path, topic="bench", partition=0) as store:
            settle(store)  # merges the open may start: their CPU would skew both measurements
            with console.status("lookups"):
                found = lookups(store, args.ids, args.batch)
            with console.status("ingest with and without aging"):
                latency = aging_latency(store, args.ids, args.aging_batches, args.batch)
                store.flush()
                settle(store)
                steady = {"live_ids": store.state.live_ids, "dir_bytes": dir_bytes(path), "sst_bytes": sst_bytes(store)}
            with console.status("aging to half"):
                rate = aging_rate(store)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    small, large = args.ids // 10, args.ids
    set_growth = (baseline["rss"][str(large)] - baseline["rss"][str(small)]) / (large - small)
    store_growth = (build["rss"][str(large)] - build["rss"][str(small)]) / (large - small)
    unreleased = build["rss_before_release"]
    unreleased_growth = (unreleased[str(large)] - unreleased[str(small)]) / (large - small)
    figures = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "note": "2 shared cores, noisy"},
        "ids": args.ids,
        "batch": args.batch,
        "build": build,
        "bytes_per_id": {
            "sst": build["sst_bytes"] / args.ids,
            "dir": build["dir_bytes"] / args.ids,
            "dir_steady_state_with_aging": steady["dir_bytes"] / steady["live_ids"],
        },
        "rss_growth_per_id": {
            "store": store_growth,
            "python_set": set_growth,
            "ratio": store_growth / set_growth,
            "store_without_release": unreleased_growth,
        },
        "lookups": found,
        "ingest_with_aging": latency,
        "aging_to_half": rate,
        "peak_rss_mb_main": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    report(figures)


def report(f: dict) -> None:
    table = Table(title=f"dedup store, {f['ids']:,} ids (machine: {f['machine']['note']})", title_justify="left")
    for column in ("measure", "value", "target", "met"):
        table.add_column(column)

    def row(name: str, value: str, target: str, met: bool | None) -> None:
        table.add_row(name, value, target, "-" if met is None else ("yes" if met else "[red]no[/]"))

    absent, present = f["lookups"]["absent"], f["lookups"]["present"]
    row(
        "absent ids/s, contains_many",
        f"{absent['contains_many_per_s']:,.0f}",
        ">= 1,000,000",
        absent["contains_many_per_s"] >= 1e6,
    )
    row("absent ids/s, raw multi-get (best chunking)", f"{absent['raw_multiget_per_s']:,.0f}", "", None)
    row("absent: store API / raw", f"{absent['ratio_vs_raw']:.2f}", ">= 0.8", absent["ratio_vs_raw"] >= 0.8)
    row(
        "absent: contains_keys (ids encoded beforehand, the worker's path) / raw",
        f"{absent['contains_keys_ratio_vs_raw']:.2f}",
        "",
        None,
    )
    row("present ids/s, contains_many", f"{present['contains_many_per_s']:,.0f}", "", None)
    row("present ids/s, raw multi-get", f"{present['raw_multiget_per_s']:,.0f}", "", None)
    row("present: store API / raw", f"{present['ratio_vs_raw']:.2f}", ">= 0.8", present["ratio_vs_raw"] >= 0.8)
    row("present ids/s, lookup_many (seq + timestamp)", f"{present['lookup_many_per_s']:,.0f}", "", None)
    aging = f["aging_to_half"]
    row(
        "aging, ids removed/s (age_fully to half)",
        f"{aging['ids_per_second']:,.0f}",
        ">= 500,000",
        aging["ids_per_second"] >= 5e5,
    )
    row(
        "aging, generations dropped / bytes freed",
        f"{aging['generations_dropped']} / {aging['bytes_freed'] / 2**20:,.0f} MiB",
        "",
        None,
    )
    lat = f["ingest_with_aging"]
    row(
        "ingest p99 batch ms without / with aging",
        f"{lat['p99_ms']['without']:.1f} / {lat['p99_ms']['with']:.1f} ({lat['p99_ratio']:.2f}x)",
        "<= 1.5x",
        lat["p99_ratio"] <= 1.5,
    )
    b = f["bytes_per_id"]
    row(
        "ingest p95 batch ms without / with aging",
        f"{lat['p95_ms']['without']:.1f} / {lat['p95_ms']['with']:.1f}",
        "",
        None,
    )
    row("aging step ms, p50 / p99", f"{lat['age_step_ms']['p50']:.2f} / {lat['age_step_ms']['p99']:.2f}", "", None)
    row("bytes on disk per id (directory)", f"{b['dir']:.1f}", "<= 25", b["dir"] <= 25)
    row("bytes per id, SST files only", f"{b['sst']:.1f}", "", None)
    row("bytes per retained id, steady state with aging", f"{b['dir_steady_state_with_aging']:.1f}", "", None)
    r = f["rss_growth_per_id"]
    row(
        "RSS growth per id, store / python set",
        f"{r['store']:.2f} / {r['python_set']:.1f} B ({r['ratio']:.3f})",
        "<= 0.05",
        r["ratio"] <= 0.05,
    )
    row(
        "build: ids/s, batch p99 ms", f"{f['build']['ids_per_second']:,.0f}, {f['build']['batch_p99_ms']:.1f}", "", None
    )
    console.print(table)


if __name__ == "__main__":
    main()
