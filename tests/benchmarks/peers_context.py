"""The harness's context for a tiny run of the peers on the suite's broker, shared by the smoke tests."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.peers.runner import Context  # noqa: E402
from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate, produce_sample  # noqa: E402


def tiny_run_context(
    kafka_broker, scratch: Path, name: str, spec: SampleSpec, *, dead_letters: bool = False, **settings: Any
) -> Context:
    """A fresh input topic (``name`` + a random suffix) holding ``spec``'s events, and the context that runs a
    peer on it; ``settings`` are the Context's fields a test sets apart (``process_timeout``, the JVM, ...)."""
    kafka = KafkaConfig(kafka_broker.bootstrap_servers)
    prefix = f"{name}-{uuid.uuid4().hex[:8]}-"
    input_topic = f"{prefix}in"
    create_topics(kafka, [input_topic, *([f"{input_topic}.dead-letter"] if dead_letters else [])], 4)
    produce_sample(kafka, input_topic, spec)
    return Context(
        kafka=kafka,
        input_topic=input_topic,
        partitions=4,
        scratch=scratch,
        peers_python="",  # made by the smoke tests' `peers_python` fixture for the tests that need it
        redis_executable=None,
        expected_ids=frozenset(record.key for record in generate(spec) if record.kind == "new"),
        memory_from_ids=100,
        idle_seconds=1.0,
        naive_seconds=2.0,
        window_seconds=3600,
        kill_fraction=0.5,
        settle_timeout=90,
        names_prefix=prefix,
        **settings,
    )
