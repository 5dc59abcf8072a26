"""The latency run of benchmarks/bench_peers.py at a tiny load (200 events/s for 3 s), through the suite's own
runner: the paced producer, the warm-up, the read_committed reader's timing and the read-back check. A smoke
test of the harness, not a measurement.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from peers_context import tiny_run_context  # noqa: E402

from benchmarks.peers import report  # noqa: E402
from benchmarks.peers.latency import Load, latency_run, skip_reason  # noqa: E402
from benchmarks.peers.paced_producer import sent_us, stamp  # noqa: E402
from benchmarks.peers.runner import Context  # noqa: E402
from benchmarks.peers.systems import SYSTEMS  # noqa: E402
from dedupectl.sample_events import SampleSpec  # noqa: E402

LOAD = Load(rate=200, seconds=3, grace_seconds=20, startup_timeout=60)


@pytest.fixture(scope="module")
def context(kafka_broker, tmp_path_factory: pytest.TempPathFactory) -> Context:
    # the latency run makes its own input topics: the context's input is not read
    return tiny_run_context(
        kafka_broker, tmp_path_factory.mktemp("latency"), "latency", SampleSpec(1), process_timeout=120
    )


def _assert_percentiles_ordered(latency: dict) -> None:
    assert latency["count"] > 0
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p999"] <= latency["max"]


def test_dedupectl_latency_run_reads_each_id_once(context: Context) -> None:
    figures = latency_run(context, SYSTEMS["dedupectl"], LOAD)

    sent = figures["producer"]
    assert sent["sent"] == LOAD.rate * LOAD.seconds
    assert sent["rate"] == pytest.approx(LOAD.rate, rel=0.2)
    check = figures["output_check"]
    assert (check["duplicated_ids"], check["missing_ids"], check["unexpected_ids"]) == (0, 0, 0)
    assert check["distinct_ids"] == check["records"] == check["records_sent"] - check["ids_repeated_in_input"]
    # every id of the load, timed: the warm-up's records are not in the figures
    assert figures["measured_records"] == check["records"] - figures["warm_up_records"]
    _assert_percentiles_ordered(figures["latency_ms"])
    assert figures["latency_ms"]["count"] == figures["measured_records"]
    assert figures["stopped"] == "exited" and figures["startup_seconds"] > 0
    assert figures["last_read_after_last_send_seconds"] is not None


def test_copy_latency_run_reads_every_record(context: Context) -> None:
    figures = latency_run(context, SYSTEMS["copy"], LOAD)

    check = figures["output_check"]
    assert check["ids_repeated_in_input"] > 0  # the load carries duplicates; a copy passes them through
    assert (check["records"], check["missing_ids"], check["unexpected_ids"]) == (check["records_sent"], 0, 0)
    assert check["duplicated_ids"] == check["ids_repeated_in_input"]
    assert figures["measured_records"] == LOAD.rate * LOAD.seconds
    _assert_percentiles_ordered(figures["latency_ms"])
    assert figures["stopped"] == "exited"  # run past the input's end, then stopped when idle

    page = report.latency_markdown({"latency": {"copy": figures}, "latency_load": {"rate": 200, "seconds": 3}})
    assert f"| {figures['latency_ms']['p99']:,.1f} |" in page


def test_the_send_time_rides_in_the_value() -> None:
    value = stamp(b'{"messageId":"ajs-1","properties":{"revenue":1.5}}', 1_764_000_000_123_456)

    assert value.endswith(b',"benchSentUs":1764000000123456}')
    assert sent_us(value) == 1_764_000_000_123_456
    assert sent_us(b'{"messageId":"ajs-1"}') is None


def test_systems_without_output_or_below_the_load_are_skipped() -> None:
    skipped = {name for name, system in SYSTEMS.items() if skip_reason(system)}

    assert skipped == {"naive", "producer-perf", "consumer-perf"}
