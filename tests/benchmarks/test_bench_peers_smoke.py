"""The systems of benchmarks/bench_peers.py on a tiny input, through the suite's own runner: the dedup stages
publish every id exactly once, the copy floor passes the input's duplicates through.

A smoke test of the suite (each peer's process, the report it prints, the sampler, the read-back check),
not a measurement; the crash runs (tens of seconds each: session timeouts, Quix's transaction timeout) are
left to the benchmark itself. The Quix and Redis peers need benchmarks/.venv-peers (made by the first run of
``python benchmarks/bench_peers.py``) and redis-server; without them their tests are skipped.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.peers.env import VENV_DIR  # noqa: E402
from benchmarks.peers.runner import Context, clean_run  # noqa: E402
from benchmarks.peers.systems import SYSTEMS, System  # noqa: E402
from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402

SPEC = SampleSpec(3_000, duplicate_ratio=0.02)
PEERS_PYTHON = VENV_DIR / "bin" / "python"


@pytest.fixture(scope="module")
def context(kafka_broker, tmp_path_factory: pytest.TempPathFactory) -> Context:
    kafka = KafkaConfig(kafka_broker.bootstrap_servers)
    prefix = f"peers-{uuid.uuid4().hex[:8]}-"
    input_topic = f"{prefix}in"
    create_topics(kafka, [input_topic, f"{input_topic}.dead-letter"], 4)
    produce_sample(kafka, input_topic, SPEC)
    return Context(
        kafka=kafka,
        input_topic=input_topic,
        partitions=4,
        scratch=tmp_path_factory.mktemp("peers"),
        peers_python=str(PEERS_PYTHON),
        redis_executable=shutil.which("redis-server"),
        expected_ids=frozenset(record.key for record in generate(SPEC) if record.kind == "new"),
        memory_from_ids=100,
        idle_seconds=1.0,
        naive_seconds=2.0,
        window_seconds=3600,
        kill_fraction=0.5,
        process_timeout=120,
        settle_timeout=90,
        names_prefix=prefix,
    )


def _require(system: System, context: Context) -> None:
    if system.needs_peers_env and not PEERS_PYTHON.exists():
        pytest.skip(f"{VENV_DIR} is missing: `python benchmarks/bench_peers.py` creates it")
    if system.needs_redis and context.redis_executable is None:
        pytest.skip("redis-server is not installed")


@pytest.mark.parametrize("name", ["naive", "redis", "quix", "dedupectl"])
def test_dedup_stage_publishes_each_id_once(context: Context, name: str) -> None:
    system = SYSTEMS[name]
    _require(system, context)

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


def test_copy_floor_passes_the_input_duplicates_through(context: Context) -> None:
    figures = clean_run(context, SYSTEMS["copy"])

    repeated = sum(1 for n in Counter(record.key for record in generate(SPEC)).values() if n > 1)
    assert repeated > 0
    check = figures["output_check"]
    assert (check["records"], check["duplicated_ids"], check["missing_ids"]) == (SPEC.count, repeated, 0)
