"""End-to-end throughput of ``dedupectl run`` against its baselines, on the project's local broker.

    python benchmarks/bench_worker.py [--count 1000000] [--repeat 3] [--naive-seconds 20] [--prefilled-ids N]
        [--prefilled-dir DIR] [--baseline-checkout DIR]

Produces ``--count`` Segment-like events (0.6% duplicates, 4 partitions), then runs, each in its own process
and each into a fresh output topic: the plain transactional copy (with librdkafka's consumer defaults, and
again with the consumer's ``fetch.queue.backoff.ms`` that ``dedupectl run`` sets) and ``dedupectl run``,
alternated ``--repeat`` times (the table shows the median run of each: the 2 cores are often shared), then the seed's
naive loop (time-bounded: at one commit per message it would take hours; its rate is what counts).

With ``--prefilled-ids N``, each round also runs ``dedupectl run`` on stores that already hold N ids in all
(N / 4 per partition, other ids than the events'), bulk loaded once before the rounds (``store.bulk_load``,
as ``dedupectl rebuild`` does) and hard-linked into a fresh data directory for each run, with the bound the
load sized their filters for (N / 2 per partition: the prefill and the run's ids, so that nothing ages); and
``dedupectl run`` on empty stores with that same bound. The pre-filled runs' throughput is reported against
both: the empty stores with the same bound (what holding N ids costs) and with the default bound (what the
larger bound costs too). ``--prefilled-dir`` keeps the bulk-loaded stores between invocations.

With ``--also-partitioner NAME`` (repeatable), each round also runs ``dedupectl run --partitioner NAME`` on
the same input (the sample is produced by librdkafka's default partitioner, CRC32, so the default ``auto``
settles on crc32); its throughput is reported against the default's, as a ratio of the median runs.

With ``--value-format avro``, the same events are also produced as Avro values in the Confluent wire format
(the same keys, so the same partitions; the writer schema in a schema file) to a topic of their own, and each
round also runs ``dedupectl run --value-format avro --schema-file 1=…`` on it: its throughput is reported
against the JSON runs of the same rounds, as a ratio of the median runs. With ``--ids-in value`` both the JSON
and the Avro events are produced without keys (each to the partition CRC32 gives its id), so that both kinds
of run read each id from the value's ``messageId`` field; by default (``key``) the ids are the keys.

With ``--baseline-checkout DIR`` (a checkout of an earlier commit, e.g. ``git worktree add DIR COMMIT``), each
round also runs that checkout's ``dedupectl run`` (its code, this interpreter and its packages) on the same
input, after this checkout's: its throughput is reported beside this one's, as a ratio of the median runs.
With ``--value-format avro`` too, it also runs on the Avro events, reported against this checkout's Avro runs.

Throughput is measured from the first record consumed to the last transaction committed. Every dedupectl
run's output is read back (read_committed) to check it is exactly once. Prints a table and writes
benchmarks/results/worker.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.avro_events import produce_avro  # noqa: E402
from benchmarks.bulk_stores import add_prefill_options, linked_copy, reuse_or_prefill  # noqa: E402
from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402
from dedupectl.verify import check_output  # noqa: E402
from reconcile.kafka import FETCH_QUEUE_BACKOFF_MS  # noqa: E402

console = Console()
PARTITIONS = 4


def _json_from(command: list[str], cwd: Path | None = None) -> dict:
    completed = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
    if completed.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def _median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda run: run["messages_per_second"])
    return ordered[(len(ordered) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--duplicates", type=float, default=0.006)
    parser.add_argument("--naive-seconds", type=float, default=20.0)
    parser.add_argument(
        "--repeat", type=int, default=3, help="copy and dedupectl runs, alternated; the median of each is reported"
    )
    add_prefill_options(parser)
    parser.add_argument("--baseline-checkout", type=Path, help="also run the dedupectl of this checkout, each round")
    parser.add_argument(
        "--also-partitioner",
        action="append",
        default=[],
        choices=["auto", "murmur2", "crc32", "any"],
        help="also run dedupectl with this --partitioner each round (its other runs use the default, auto); repeatable",
    )
    parser.add_argument(
        "--value-format",
        choices=["json", "avro"],
        default="json",
        help="avro: also run dedupectl on the same events as Avro values (schema file), each round",
    )
    parser.add_argument(
        "--ids-in",
        choices=["key", "value"],
        default="key",
        help="value: produce the events without keys, so that every run reads its ids from the values",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/worker.json")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="dedupectl-bench-") as scratch,
        LocalBroker(Path(scratch) / "broker") as broker,
    ):
        kafka = KafkaConfig(broker.bootstrap_servers)
        topics = ["in", "out-naive", "in.dead-letter", "in-avro", "in-avro.dead-letter"]
        create_topics(kafka, topics, PARTITIONS)
        spec = SampleSpec(args.count, duplicate_ratio=args.duplicates)
        with console.status(f"producing {args.count:,} events"):
            started = time.monotonic()
            keyless = PARTITIONS if args.ids_in == "value" else None
            sample = produce_sample(kafka, "in", spec, keyless_partitions=keyless)
        console.print(f"produced {sample.produced:,} events in {time.monotonic() - started:.1f}s")
        avro_schema = Path(scratch) / "event.avsc"
        if args.value_format == "avro":
            with console.status(f"producing the {args.count:,} events again as Avro"):
                started = time.monotonic()
                produced = produce_avro(kafka, "in-avro", spec, avro_schema, keyless)
            console.print(f"produced {produced:,} Avro events in {time.monotonic() - started:.1f}s")
        python = sys.executable
        data = Path(scratch)
        prefilled_dir = args.prefilled_dir or data / "prefilled"

        def copy_run(round_: int, workers_fetch: bool = False) -> dict:
            output = f"out-copy-{round_}" + ("-fetch" if workers_fetch else "")
            create_topics(kafka, [output], PARTITIONS)
            command = [python, str(ROOT / "benchmarks/peers/copy_floor.py"), kafka.bootstrap_servers, "in", output]
            if workers_fetch:
                command += ["--fetch-queue-backoff-ms", str(FETCH_QUEUE_BACKOFF_MS)]
            return _json_from(command)

        def dedupectl_run(
            round_: int,
            prefilled: bool = False,
            bounded: bool = False,
            checkout: Path | None = None,
            partitioner: str | None = None,
            avro: bool = False,
        ) -> dict:
            name = f"{round_}-prefilled" if prefilled else str(round_)
            name = f"{name}-bounded" if bounded else name
            name = f"{name}-baseline" if checkout is not None else name
            name = f"{name}-{partitioner}" if partitioner is not None else name
            name = f"{name}-avro" if avro else name
            output = f"out-dedup-{name}"
            create_topics(kafka, [output], PARTITIONS)
            data_dir = data / f"data-{name}"
            if prefilled:
                linked_copy(prefilled_dir, data_dir)
            source = "in-avro" if avro else "in"
            topic = ["-i", source] if checkout is not None else ["-t", source]  # an earlier build's spelling
            command = [python, "-m", "dedupectl.cli.app", "run", "-b", kafka.bootstrap_servers, *topic]
            if avro:
                command += ["--value-format", "avro", "--schema-file", f"1={avro_schema}"]
                command += ["--dead-letter-topic", "in-avro.dead-letter"]
            command += ["-o", output, "-d", str(data_dir), "--worker-id", f"bench-{name}"]
            command += ["--group-id", f"bench-{name}", "--exit-on-idle", "3", "--log-level", "warning", "--json"]
            if prefilled or bounded:  # the bound the bulk load sized each filter for (a changed bound rebuilds the
                # filter at the first lookup); it holds the prefill and the run's ids: nothing ages, as on the
                # empty stores
                command += ["--max-keys", str(args.prefilled_ids // PARTITIONS * 2)]
            if partitioner is not None:
                command += ["--partitioner", partitioner]
            run = _json_from(command, cwd=checkout)  # python -m takes the code of its working directory first
            check = check_output(kafka, output, expected)
            shutil.rmtree(data_dir, ignore_errors=True)
            return {**{key: run[key] for key in ("consumed", "busy_seconds", "peak_rss_mb")}, "check": check}

        expected = {record.key for record in generate(spec) if record.kind == "new"}
        runs: dict[str, list[dict]] = {"copy": [], "copy_workers_fetch": [], "dedupectl": []}
        prefill_seconds = None
        if args.baseline_checkout:
            runs["baseline"] = []
        for partitioner in args.also_partitioner:
            runs[f"partitioner {partitioner}"] = []
        if args.value_format == "avro":
            runs["avro"] = []
            if args.baseline_checkout:
                runs["baseline avro"] = []
        if args.prefilled_ids:
            runs["dedupectl_prefilled"] = []
            runs["dedupectl_prefilled_bound"] = []
            with console.status(f"bulk loading {args.prefilled_ids:,} ids into {PARTITIONS} stores"):
                prefill_seconds = reuse_or_prefill(prefilled_dir, "in", PARTITIONS, args.prefilled_ids)
            if prefill_seconds is None:
                console.print(f"reusing the {args.prefilled_ids:,} ids bulk loaded into {prefilled_dir}")
            else:
                console.print(f"bulk loaded {args.prefilled_ids:,} ids in {prefill_seconds:.0f}s")
        # alternated, so that a burst of load from elsewhere on the machine hits both sides alike; the dedupectl
        # runs of a round go in reverse order every other round, so that none always follows the others
        for round_ in range(args.repeat):
            with console.status(f"round {round_ + 1}/{args.repeat}: plain transactional copy"):
                runs["copy"].append(copy_run(round_))
            with console.status(f"round {round_ + 1}/{args.repeat}: the copy, fetching as dedupectl run does"):
                runs["copy_workers_fetch"].append(copy_run(round_, workers_fetch=True))
            compared = [("dedupectl", "dedupectl run (and reading its output back)", {})]
            if args.baseline_checkout:
                checkout = {"checkout": args.baseline_checkout.resolve()}
                compared.append(("baseline", "the baseline checkout's dedupectl run", checkout))
            for partitioner in args.also_partitioner:
                name = f"partitioner {partitioner}"
                compared.append((name, f"dedupectl run --partitioner {partitioner}", {"partitioner": partitioner}))
            if args.value_format == "avro":
                compared.append(("avro", "dedupectl run --value-format avro", {"avro": True}))
                if args.baseline_checkout:
                    what = "the baseline checkout's dedupectl run --value-format avro"
                    compared.append(("baseline avro", what, {**checkout, "avro": True}))
            if args.prefilled_ids:
                compared.append(("dedupectl_prefilled", "dedupectl run on the pre-filled stores", {"prefilled": True}))
                what = "dedupectl run on empty stores with the pre-filled stores' bound"
                compared.append(("dedupectl_prefilled_bound", what, {"bounded": True}))
            for name, what, options in compared[::-1] if round_ % 2 else compared:
                with console.status(f"round {round_ + 1}/{args.repeat}: {what}"):
                    runs[name].append(dedupectl_run(round_, **options))
        with console.status("naive loop"):
            naive = _json_from(
                [
                    python,
                    str(ROOT / "benchmarks/peers/naive.py"),
                    kafka.bootstrap_servers,
                    "in",
                    "out-naive",
                    str(data / "naive-store"),
                    "--max-seconds",
                    str(args.naive_seconds),
                ]
            )

    for figures in [naive, *(run for name_runs in runs.values() for run in name_runs)]:
        figures["messages_per_second"] = (
            round(figures["consumed"] / figures["busy_seconds"], 1) if figures["busy_seconds"] else 0.0
        )
    results = {name: _median_run(name_runs) for name, name_runs in runs.items()}
    results["naive"] = naive
    checks = [run.pop("check") for name in runs if not name.startswith("copy") for run in runs[name]]
    check = next((c for c in checks if not c.exactly_once), checks[0])
    ours = results["dedupectl"]["messages_per_second"]
    table = Table(
        title=f"dedupectl run, {args.count:,} events, {args.duplicates:.1%} duplicates, {PARTITIONS} partitions, "
        f"ids in the {args.ids_in}s"
    )
    for column in ("system", "messages", "seconds", "messages/s", "peak RSS MB", "dedupectl ÷ system"):
        table.add_column(column, justify="right" if column != "system" else "left")
    shown = ["copy", "copy_workers_fetch", "naive", *(["baseline"] if args.baseline_checkout else []), "dedupectl"]
    shown += [f"partitioner {partitioner}" for partitioner in args.also_partitioner]
    shown += ["avro"] if args.value_format == "avro" else []
    shown += ["baseline avro"] if args.value_format == "avro" and args.baseline_checkout else []
    for name in shown + (["dedupectl_prefilled_bound", "dedupectl_prefilled"] if args.prefilled_ids else []):
        figures = results[name]
        ratio = ours / figures["messages_per_second"] if figures["messages_per_second"] else float("nan")
        table.add_row(
            name,
            f"{figures['consumed']:,}",
            f"{figures['busy_seconds']:.2f}",
            f"{figures['messages_per_second']:,.0f}",
            f"{figures['peak_rss_mb']:.0f}",
            f"{ratio:.2f}x",
        )
    console.print(table)
    for name, name_runs in runs.items():
        console.print(
            f"{name} runs: " + ", ".join(f"{run['messages_per_second']:,.0f}" for run in name_runs) + " msg/s"
        )
    verdict = "exactly once" if check.exactly_once else "NOT exactly once"
    console.print(
        f"output check of every dedupectl run ({sum(c.exactly_once for c in checks)}/{len(checks)} exactly once): "
        f"{check.records:,} records, {check.distinct_ids:,} distinct ids, "
        f"{check.duplicated_ids} duplicated, {check.missing_ids} missing, {check.unexpected_ids} unexpected: {verdict}"
    )
    report = {
        "machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
        "count": args.count,
        "duplicate_ratio": args.duplicates,
        "ids_in": args.ids_in,
        "repeat": args.repeat,
        "results": results,
        "all_runs": {name: [run["messages_per_second"] for run in name_runs] for name, name_runs in runs.items()},
        "ratios": {
            "dedupectl_vs_copy": ours / results["copy"]["messages_per_second"],
            "dedupectl_vs_copy_workers_fetch": ours / results["copy_workers_fetch"]["messages_per_second"],
            "dedupectl_vs_naive": ours / results["naive"]["messages_per_second"],
        },
        "prefilled_ids": args.prefilled_ids,
        "prefill_seconds": prefill_seconds,
        "output_check": check.__dict__,
    }
    if args.baseline_checkout:
        report["baseline_checkout"] = str(args.baseline_checkout)
        report["ratios"]["dedupectl_vs_baseline"] = ours / results["baseline"]["messages_per_second"]
        console.print(
            f"against the baseline checkout {args.baseline_checkout}: "
            f"{report['ratios']['dedupectl_vs_baseline']:.2f}x (median runs)"
        )
    for partitioner in args.also_partitioner:
        theirs = results[f"partitioner {partitioner}"]["messages_per_second"]
        report["ratios"][f"partitioner_{partitioner}_vs_default"] = theirs / ours
        console.print(f"--partitioner {partitioner}: {theirs / ours:.3f}x the throughput of the default (median runs)")
    if args.value_format == "avro":
        theirs = results["avro"]["messages_per_second"]
        report["ratios"]["avro_vs_json"] = theirs / ours
        console.print(f"Avro ids: {theirs / ours:.3f}x the throughput of JSON ids on the same events (median runs)")
        if args.baseline_checkout:
            report["ratios"]["avro_vs_baseline_avro"] = theirs / results["baseline avro"]["messages_per_second"]
            console.print(
                f"Avro ids: {report['ratios']['avro_vs_baseline_avro']:.3f}x the baseline checkout's (median runs)"
            )
    if args.prefilled_ids:
        prefilled = results["dedupectl_prefilled"]["messages_per_second"]
        report["ratios"]["prefilled_vs_empty"] = prefilled / ours
        same_bound = results["dedupectl_prefilled_bound"]["messages_per_second"]
        report["ratios"]["prefilled_vs_empty_same_bound"] = prefilled / same_bound
        console.print(
            f"on stores holding {args.prefilled_ids:,} ids: {report['ratios']['prefilled_vs_empty_same_bound']:.2f}x "
            f"the throughput on empty stores with the same bound, {report['ratios']['prefilled_vs_empty']:.2f}x "
            "on empty stores with the default bound (median runs)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    console.print(f"written to {args.out}")
    if not check.exactly_once:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
