"""The systems of benchmarks/bench_peers.py on a tiny input, through the suite's own runner: the dedup stages
publish every id exactly once, the copy floors pass the input's duplicates through, Kafka's perf tools report
a throughput over the whole input.

A smoke test of the suite (each peer's process, the report it prints, the sampler, the read-back check),
not a measurement; the crash runs (tens of seconds each: session timeouts, Quix's transaction timeout) are
left to the benchmark itself. What a peer needs is made here when it is missing, as the benchmark makes it:
benchmarks/.venv-peers for Quix and Redis (pip, from benchmarks/requirements-peers.txt), Debian's
redis-server (apt-get, as root; a test that cannot install it is skipped and says what to install), and the
JVM peers (Maven, cached in ~/.cache/dedupectl by the digest of benchmarks/peers/jvm).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from peers_context import tiny_run_context  # noqa: E402

from benchmarks.peers import env  # noqa: E402
from benchmarks.peers.jvm_build import jvm_peers  # noqa: E402
from benchmarks.peers.runner import Context, clean_run  # noqa: E402
from benchmarks.peers.systems import SYSTEMS, Setup, System  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate  # noqa: E402

SPEC = SampleSpec(3_000, duplicate_ratio=0.02)


@pytest.fixture(scope="module")
def context(kafka_broker, broker_kafka_version: str, tmp_path_factory: pytest.TempPathFactory) -> Context:
    record_bytes = sum(len(record.value) for record in generate(SPEC))
    return tiny_run_context(
        kafka_broker,
        tmp_path_factory.mktemp("peers"),
        "peers",
        SPEC,
        dead_letters=True,
        process_timeout=120,
        jvm=jvm_peers(broker_kafka_version, log=lambda _: None),
        broker_data_dir=kafka_broker.state_dir / "data",
        count=SPEC.count,
        record_size=round(record_bytes / SPEC.count),
        window_ids=SPEC.count,
    )


@pytest.fixture(scope="module")
def peers_python() -> str:
    return str(env.peers_python(log=lambda _: None))


@pytest.fixture(scope="module")
def redis_executable() -> str:
    try:
        return env.find_redis_server(install=True, log=lambda _: None)
    except SystemExit as error:
        if os.geteuid() != 0:  # only root may apt-get install it
            pytest.skip(str(error))
        raise


def _context_for(system: System, request: pytest.FixtureRequest) -> Context:
    context: Context = request.getfixturevalue("context")
    changes = {}
    if system.needs_peers_env:
        changes["peers_python"] = request.getfixturevalue("peers_python")
    if system.needs_redis:
        changes["redis_executable"] = request.getfixturevalue("redis_executable")
    return dataclasses.replace(context, **changes)


def test_dedupectl_runs_bounded_at_the_window_unless_unbounded(tmp_path: Path) -> None:
    setup = Setup("127.0.0.1:1", "in", "out", "group", tmp_path, "", 1.0, 2.0, 3600, window_ids=SPEC.count)

    bounded = SYSTEMS["dedupectl"].command(setup)
    unbounded = SYSTEMS["dedupectl-unbounded"].command(setup)
    no_window = SYSTEMS["dedupectl"].command(dataclasses.replace(setup, window_ids=0))

    assert bounded[bounded.index("--max-keys") + 1] == str(SPEC.count)
    assert "--max-keys" not in unbounded and "--max-keys" not in no_window
    assert [s.name for s in SYSTEMS.values() if not s.by_default] == ["dedupectl-unbounded"]


@pytest.mark.parametrize(
    "name", ["naive", "redis", "quix", "dedupectl", "dedupectl-unbounded", "kstreams", "kstreams-2t"]
)
def test_dedup_stage_publishes_each_id_once(request: pytest.FixtureRequest, name: str) -> None:
    system = SYSTEMS[name]
    context = _context_for(system, request)

    figures = clean_run(context, system)

    check = figures["output_check"]
    assert (check["duplicated_ids"], check["missing_ids"], check["unexpected_ids"]) == (0, 0, 0)
    assert figures["busy_seconds"] > 0 and figures["peak_rss_mb"] > 0
    if system.finishes:
        assert figures["consumed"] == SPEC.count
        assert check["records"] == len(context.expected_ids)
    else:  # the naive loop stops at its time bound: checked over what its group committed
        assert 0 < figures["expected_ids"] <= len(context.expected_ids)
        assert check["records"] == figures["expected_ids"]
    if name.startswith("kstreams"):  # its store is RocksDB on disk, written again to a changelog topic
        assert figures["report"]["threads"] == system.stream_threads
        assert figures["state_bytes"] > 0
        assert figures["changelog_bytes"] > sum(len(message_id) for message_id in context.expected_ids)


@pytest.mark.parametrize("name", ["copy", "java-copy"])
def test_copy_floor_passes_the_input_duplicates_through(request: pytest.FixtureRequest, name: str) -> None:
    figures = clean_run(_context_for(SYSTEMS[name], request), SYSTEMS[name])

    repeated = sum(1 for n in Counter(record.key for record in generate(SPEC)).values() if n > 1)
    assert repeated > 0
    check = figures["output_check"]
    assert (check["records"], check["duplicated_ids"], check["missing_ids"]) == (SPEC.count, repeated, 0)
    assert figures["consumed"] == SPEC.count and figures["busy_seconds"] > 0


@pytest.mark.parametrize("name", ["producer-perf", "consumer-perf"])
def test_kafka_perf_tool_reports_the_whole_input(context: Context, name: str) -> None:
    figures = clean_run(context, SYSTEMS[name])

    assert figures["consumed"] == SPEC.count
    assert figures["busy_seconds"] > 0 and figures["messages_per_second"] > 0 and figures["peak_rss_mb"] > 0
