"""The suite's results as a Markdown page (committed under benchmarks/results/) and the figures behind it."""

from __future__ import annotations

from typing import Any

from benchmarks.peers.systems import SYSTEMS

DASH = "—"


def ratios(clean: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """dedupectl's throughput divided by each system's: above 1 means dedupectl is ahead."""
    ours = clean.get("dedupectl", {}).get("messages_per_second")
    return {
        name: round(ours / figures["messages_per_second"], 3) if ours and figures.get("messages_per_second") else None
        for name, figures in clean.items()
    }


def markdown(result: dict[str, Any]) -> str:
    if not result.get("clean") and result.get("latency"):
        return _latency_page(result)
    workload, machine, settings = result["workload"], result["machine"], result["settings"]
    lines = [
        "# dedupectl and its peers",
        "",
        f"{workload['count']:,} Segment-like events ({workload['duplicate_ratio']:.1%} duplicates, "
        f"{workload['id_style']} ids, {workload['distinct_ids']:,} distinct), {workload['partitions']} input "
        f"partitions, one local Kafka {result['versions'].get('kafka', '?')} broker. Every system ran in its own "
        f"process, one after another, on the same input topic with its own group and output topic, in one run "
        f"started {result['started_at']}.",
        "",
        *_validation_note(workload["count"]),
        _machine_line(machine),
        "",
        *([f"Note: {result['note']}", ""] if result.get("note") else []),
        _clean_table(result),
        "",
        *_ceiling_table(result),
        _crash_table(result),
        "",
        *([latency_markdown(result), ""] if result.get("latency") else []),
        *_targets(result),
        "How to read it:",
        "",
        "- messages/s: records consumed ÷ seconds from the system's first record consumed to its last "
        "transaction (Redis: offset commit) completed, as the system itself reports them.",
        "- dedupectl ÷ system: dedupectl's messages/s over the system's; above 1 means dedupectl is faster.",
        _window_line(settings),
        "- duplicates / losses: ids published more than once / input ids never published, read back from the "
        "output topic with read_committed. The copy floor does not dedup: its duplicates are the input's. The "
        "naive loop is time-bounded (†): it is checked against the input its group committed.",
        f"- memory/id: growth of the process's peak RSS (for Redis: plus the server's used_memory) per id "
        f"retained, from the stretch just past {settings['memory_from_ids']:,} ids to the last stretch of the run, "
        f"crest to crest (each stretch a ninth of the ids between){_memory_caveat(workload['count'])}",
        "- state/id: bytes of on-disk state per distinct id published (RocksDB directories after the run; Redis: "
        "used_memory growth, since its state lives in memory).",
        "- changelog/id: bytes of the system's changelog topics on the broker (log segments) per distinct id "
        "published: its state written to Kafka a second time, beside its output.",
        "- Kafka's ceiling: Kafka's own ProducerPerformance (as many records as the input, of its mean value "
        "size, to a 4-partition topic; its own records/s) and ConsumerPerformance (the input topic; its fetch "
        "rate, the group join excluded), on the broker's jars; no transactions, no processing.",
        f"- crash run: SIGKILL once when the output held {settings['kill_fraction']:.0%} of the clean run's "
        "records (committed or not), then restart with the same group and state; the time is from the restart "
        "to the first new record readable with read_committed.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(result["versions"].items())) + ".",
        "",
    ]
    return "\n".join(lines)


def _window_line(settings: dict[str, Any]) -> str:
    """What bounded dedupectl's window in this run: the counterpart of the peers' TTL."""
    bound = settings.get("dedupectl_max_keys")
    if not bound:
        return ("- dedupectl ran with no `--max-keys`: each store's id filter is sized for twice the ids it holds "
                "and built again, larger, as it fills (docs/store-cost-model.md, \"A write\").")  # fmt: skip
    return (f"- dedupectl ran with `--max-keys {bound:,}` (ids per partition): a window as large as the run, as "
            f"the peers' TTL of {settings['window_seconds'] / 3600:g} hours is; each store's id filter is sized "
            "for it once, on the first batch. dedupectl-unbounded, when present, ran with no bound: its filters "
            "grew with the stores.")  # fmt: skip


def _machine_line(machine: dict[str, Any]) -> str:
    return (
        f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), {machine['memory_gib']} GiB memory, "
        f"{machine['platform']}; load average at start {', '.join(map(str, machine['load_average_at_start']))}"
        f"{_load_at_end(machine)}."
    )


def _latency_page(result: dict[str, Any]) -> str:
    """A run of the latency runs alone (``--latency-only``)."""
    return "\n".join(
        [
            "# dedupectl and its peers: latency at a fixed load",
            "",
            f"One local Kafka {result['versions'].get('kafka', '?')} broker; every system in its own process, one "
            f"after another, in one run started {result['started_at']}.",
            "",
            _machine_line(result["machine"]),
            "",
            *([f"Note: {result['note']}", ""] if result.get("note") else []),
            latency_markdown(result),
            "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(result["versions"].items())) + ".",
            "",
        ]
    )


def latency_markdown(result: dict[str, Any]) -> str:
    """The latency table: each system under the same fixed offered load, with what bounds its latency."""
    load = result["latency_load"]
    lines = [
        f"Latency at a fixed offered load: {load['rate']:,.0f} events/s for {load['seconds']:g} s per system "
        f"(sample events as above, on a fresh input topic each), from each record's send to the moment a "
        f"read_committed reader's poll returned it from the output.",
        "",
        "| latency run | output readable | records timed | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) "
        "| p99 past the first 10 s (ms) | last read after last send (s) | duplicates | losses | CPU (cores) "
        "| transactions/s | offered (events/s) |",
        "|" + "---|" * 14,
    ]
    options = result.get("settings", {}).get("dedupectl_options") or ()

    def interval(system) -> str:
        """When the system makes its output readable; dedupectl's batch window as it ran."""
        if system.is_dedupectl and "--batch-max-ms" in options:
            window = options[options.index("--batch-max-ms") + 1]
            return system.commit_interval.replace("100 ms", f"{window} ms")
        return system.commit_interval

    for name, figures in result["latency"].items():
        system = SYSTEMS[name]
        if "skipped" in figures:
            lines.append(f"| {name} | not run: {figures['skipped']} |" + " |" * 12)
            continue
        if "error" in figures:
            lines.append(f"| {name} | {interval(system)} | failed: {_one_line(figures['error'])} |" + " |" * 11)
            continue
        latency, check = figures["latency_ms"], figures["output_check"]
        duplicates = f"{check['duplicated_ids']:,}" + ("" if system.dedups else " (no dedup)")
        lines.append(
            f"| {name} | {interval(system)} | {figures['measured_records']:,} "
            f"| {_number(latency['p50'], ',.1f')} | {_number(latency['p90'], ',.1f')} "
            f"| {_number(latency['p99'], ',.1f')} | {_number(latency['max'], ',.1f')} "
            f"| {_number(figures.get('latency_ms_after_first_window', {}).get('p99'), ',.1f')} "
            f"| {_number(figures['last_read_after_last_send_seconds'], '.2f')} | {duplicates} | {_losses(check)} "
            f"| {figures['cpu_cores']:.2f} | {_number(_commit_rate(figures.get('report')), ',.1f')} "
            f"| {figures['producer']['rate']:,.0f} |"
        )
    if options:
        lines += ["", f"dedupectl ran with `{' '.join(options)}` (its default otherwise)."]
    lines += ["", *_latency_target(result["latency"])]
    lines += [
        "- latency: the time a read_committed consumer of the output (assigned to every partition, "
        "`fetch.wait.max.ms` 10) got the record from its poll, minus the record's send time (the paced "
        "producer's clock, the same machine's), over the load's records; the warm-up records sent until the "
        "system's first output (its start-up) are not timed. A duplicate dropped by a dedup stage has no output "
        "and no latency.",
        "- p99 past the first 10 s: the same over the records sent from the load's 11th second on, so a JVM's "
        "warm-up (class loading, JIT compilation) under the new load is left out.",
        "- output readable: when a system makes its output readable to read_committed consumers, which bounds "
        "its latency from below.",
        "- last read after last send: from the load's last record sent to the last of its records read; a few "
        "commit intervals at most when the system kept up with the load.",
        "- duplicates / losses: ids read more than once / ids sent (load and warm-up) never read, over "
        "everything read until the system stopped (it exits when idle, or is stopped after the grace period).",
        "- CPU: the system's process tree (a Python driver's JVM included), CPU seconds over the load's seconds.",
        "- transactions/s: the transactions the system counted itself (dedupectl, the copies, Kafka Streams' "
        "`commitTransaction` calls) over its own busy time, warm-up included; a dash where it has no such count "
        "or was stopped rather than exiting.",
    ]
    return "\n".join(lines)


def _commit_rate(report: dict[str, Any] | None) -> float | None:
    commits = (report or {}).get("transactions_committed", (report or {}).get("commits"))
    busy = (report or {}).get("busy_seconds")
    return commits / busy if commits and busy else None


def _latency_target(latency: dict[str, dict[str, Any]]) -> list[str]:
    """dedupectl's p99 against the best of Kafka Streams' runs."""
    ours = latency.get("dedupectl", {}).get("latency_ms", {}).get("p99")
    theirs = {n: f["latency_ms"]["p99"] for n, f in latency.items() if n.startswith("kstreams") and "latency_ms" in f}
    if ours is None or not theirs:
        return []
    best = min(theirs, key=theirs.__getitem__)
    verdict = "yes" if ours <= theirs[best] else "no"

    def past_first_window(name: str) -> float | None:
        return latency[name].get("latency_ms_after_first_window", {}).get("p99")

    ours_later, theirs_later = past_first_window("dedupectl"), past_first_window(best)
    later = (f"; past the first 10 s: {ours_later:,.1f} ms vs {theirs_later:,.1f} ms"
             if ours_later is not None and theirs_later is not None else "")  # fmt: skip
    return [f"Target for dedupectl: p99 latency no worse than Kafka Streams' ({best}, its best here): {verdict} "
            f"({ours:,.1f} ms vs {theirs[best]:,.1f} ms over the whole load{later}).", ""]  # fmt: skip


def _load_at_end(machine: dict[str, Any]) -> str:
    at_end = machine.get("load_average_at_end")
    return f", at the end {', '.join(map(str, at_end))}" if at_end else ""


def _validation_note(count: int) -> list[str]:
    if count >= 1_000_000:
        return []
    return [f"**A validation run at {count:,} events**: figures this small are dominated by start-up and noise; the "
            "suite's default is 1,000,000 (`--ten-million` for the memory figures).", ""]  # fmt: skip


def _targets(result: dict[str, Any]) -> list[str]:
    """dedupectl's targets, checked against this run's figures."""
    clean, crash = result["clean"], result.get("crash", {})
    ours = clean.get("dedupectl", {})
    if "messages_per_second" not in ours:
        return []
    peers = [n for n, s in SYSTEMS.items()
             if s.dedups and not s.is_dedupectl and "messages_per_second" in clean.get(n, {})]  # fmt: skip
    slower = [n for n in peers if clean[n]["messages_per_second"] >= ours["messages_per_second"]]
    lines = ["Targets for dedupectl:", ""]
    behind = ", ".join(f"{n} by {1 - result['ratios'][n]:.0%}" for n in slower if result.get("ratios", {}).get(n))
    throughput = "yes" if not slower else f"no (behind {behind or ', '.join(slower)})"
    if peers:
        lines.append(f"- ahead of every peer ({', '.join(peers)}) on throughput: {throughput}")
    for floor, label, target in (("copy", "Python", 0.9), ("java-copy", "Java", None)):
        ratio = result.get("ratios", {}).get(floor)
        if ratio and target:
            verdict = "yes" if ratio >= target else "no"
            lines.append(f"- at least {target}x the {label} transactional copy: {verdict} ({ratio:.2f}x)")
        elif ratio:
            lines.append(f"- as a fraction of the {label} transactional copy: {ratio:.2f}x")
    ours_crash = crash.get("dedupectl", {}).get("output_check")
    if ours_crash:
        clean_crash = ours_crash["duplicated_ids"] == ours_crash["missing_ids"] == ours_crash["unexpected_ids"] == 0
        lines.append(f"- zero duplicates and zero losses in the crash run: {'yes' if clean_crash else 'no'}")
    redis_per_id = clean.get("redis", {}).get("memory_per_id_bytes")
    ours_per_id = ours.get("memory_per_id_bytes")
    if redis_per_id and redis_per_id > 0 and ours_per_id is not None:
        verdict = "yes" if ours_per_id <= redis_per_id / 20 else "no"
        caveat = "" if result["workload"]["count"] >= 10**7 else "; indicative below 10M events"
        lines.append(
            f"- memory per id at most 1/20 of Redis's: {verdict} "
            f"({ours_per_id:,.1f} B vs {redis_per_id:,.1f} B{caveat})"
        )
    return [*lines, ""]


def _clean_table(result: dict[str, Any]) -> str:
    header = (
        "| system | guarantee | messages | seconds | messages/s | dedupectl ÷ system | duplicates | losses "
        "| peak RSS (MB) | memory/id (B) | state/id (B) | changelog/id (B) |"
    )
    rows = [header, "|" + "---|" * 12]
    result_ratios = result.get("ratios", {})
    for name, figures in result["clean"].items():
        system = SYSTEMS[name]
        if system.kafka_tool:
            continue
        if "error" in figures:
            rows.append(f"| {name} | {system.guarantee} | failed: {_one_line(figures['error'])} |" + " |" * 9)
            continue
        check = figures["output_check"]
        mark = "" if system.finishes else " †"
        duplicates = f"{check['duplicated_ids']:,}" + ("" if system.dedups else " (no dedup)")
        ratio = result_ratios.get(name)
        rows.append(
            f"| {name}{mark} | {system.guarantee} | {figures['consumed']:,} | {figures['busy_seconds']:.2f} "
            f"| {figures['messages_per_second']:,.0f} | {f'{ratio:.2f}x' if ratio else DASH} | {duplicates} "
            f"| {_losses(check)} | {figures['peak_rss_mb']:.0f} | {_number(figures['memory_per_id_bytes'])} "
            f"| {_number(figures['state_bytes_per_id'])} | {_number(figures.get('changelog_bytes_per_id'))} |"
        )
    return "\n".join(rows)


def _ceiling_table(result: dict[str, Any]) -> list[str]:
    """Kafka's own perf tools on the same broker: what Kafka moves on this machine without any processing."""
    tools = {name: figures for name, figures in result["clean"].items() if SYSTEMS[name].kafka_tool}
    if not tools:
        return []
    header = "| Kafka's ceiling | what it measures | messages | seconds | messages/s | dedupectl ÷ tool | peak RSS |"
    rows = [header, "|" + "---|" * 7]
    for name, figures in tools.items():
        if "error" in figures:
            rows.append(f"| {name} | {SYSTEMS[name].guarantee} | failed: {_one_line(figures['error'])} | | | | |")
            continue
        ratio = result.get("ratios", {}).get(name)
        rows.append(
            f"| {name} | {SYSTEMS[name].guarantee} | {figures['consumed']:,} | {figures['busy_seconds']:.2f} "
            f"| {figures['messages_per_second']:,.0f} | {f'{ratio:.2f}x' if ratio else DASH} "
            f"| {figures['peak_rss_mb']:.0f} |"
        )
    return [*rows, ""]


def _crash_table(result: dict[str, Any]) -> str:
    if not result.get("crash"):
        return "Crash runs: not run (--no-crash)."
    rows = [
        "| crash run | killed at (output records) | consumed after restart | duplicates | losses "
        "| restart → first record published (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, figures in result["crash"].items():
        if "error" in figures:
            rows.append(f"| {name} | failed: {_one_line(figures['error'])} | | | | |")
            continue
        check = figures["output_check"]
        killed = f"{figures['killed_at_output_records']:,}" if figures["killed"] else "not killed: finished first"
        duplicates = f"{check['duplicated_ids']:,}" + ("" if SYSTEMS[name].dedups else " (no dedup)")
        mark = "" if SYSTEMS[name].finishes else " †"
        rows.append(
            f"| {name}{mark} | {killed} | {figures['report_after_restart']['consumed']:,} | {duplicates} "
            f"| {_losses(check)} "
            f"| {_number(figures['restart_to_first_record_seconds'], '.2f')} |"
        )
    return "\n".join(rows)


def _memory_caveat(count: int) -> str:
    if count >= 10**7:
        return "."
    return " (indicative only below 10M events: allocator and cache noise dominate)."


def _losses(check: dict[str, int]) -> str:
    text = f"{check['missing_ids']:,}"
    if check["unexpected_ids"]:
        text += f" (+{check['unexpected_ids']:,} unexpected ids)"
    return text


def _number(value: float | None, spec: str = ",.0f") -> str:
    return DASH if value is None else format(value, spec)


def _one_line(text: str) -> str:
    return text.splitlines()[0].replace("|", "/")[:160]
