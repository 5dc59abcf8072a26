"""``--duplicates-topic`` against a real broker: every dropped copy (a repeat of an id the store holds, of one
in the batch committed just before, or of one earlier in the same batch) is produced there exactly once, in
its batch's transaction, with headers that name its original; and a worker SIGKILLed mid-transaction and
restarted leaves both the output and the duplicates topic exactly once."""

from __future__ import annotations

import json
import random
import signal
from collections import Counter

import pytest
from test_worker_dedup import read_all

from dedupectl.kafka_clients import create_topics
from dedupectl.verify import check_output
from dedupectl.worker.duplicates import (
    EARLIER_BATCH,
    ORIGINAL_AGE_MS,
    ORIGINAL_INPUT_OFFSET,
    ORIGINAL_OUTPUT_OFFSET,
    ORIGINAL_WHERE,
    SAME_BATCH,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)


def with_duplicates_topic(pipeline, partitions: int = 1) -> str:
    topic = f"{pipeline.input_topic}.duplicates"
    create_topics(pipeline.kafka, [topic], partitions)
    return topic


def keyed(ids: list[str], start: int = 0) -> list[tuple[bytes, bytes, list]]:
    return [
        (message_id.encode(), json.dumps({"n": start + n}).encode(), [("trace", f"t-{start + n}".encode())])
        for n, message_id in enumerate(ids)
    ]


def expected_copies(pipeline) -> dict[tuple[int, int], tuple[int, int]]:
    """Each repeat in the input, (partition, offset) -> its first occurrence's (offset, timestamp)."""
    first: dict[tuple[int, bytes], tuple[int, int]] = {}
    copies = {}
    for message in sorted(read_all(pipeline, pipeline.input_topic), key=lambda m: (m.partition(), m.offset())):
        where = (message.partition(), message.key())
        if where in first:
            copies[(message.partition(), message.offset())] = first[where]
        else:
            first[where] = (message.offset(), message.timestamp()[1])
    return copies


def assert_copies_exactly_once(pipeline, topic: str, *, observed: bool = False) -> list:
    """The duplicates topic (read_committed) holds each repeat of the input once, with its key, value, own
    headers, and headers naming its original (``observed``: by an observer, which publishes no original);
    returns the copies."""
    expected = expected_copies(pipeline)
    inputs = {(m.partition(), m.offset()): m for m in read_all(pipeline, pipeline.input_topic)}
    outputs = {(m.partition(), m.offset()): m for m in read_all(pipeline, pipeline.output_topic)}
    copies = read_all(pipeline, topic)
    sources = Counter((int(dict(c.headers())[SOURCE_PARTITION]), int(dict(c.headers())[SOURCE_OFFSET])) for c in copies)
    assert set(sources) == set(expected), "a repeat missing from the duplicates topic, or a record that is none"
    assert Counter(sources.values()) == Counter({1: len(expected)}), "a repeat produced twice"
    for copy in copies:
        headers = dict(copy.headers())
        source = (int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))
        copied = inputs[source]
        assert (copy.key(), copy.value()) == (copied.key(), copied.value())
        assert headers[SOURCE_TOPIC] == pipeline.input_topic.encode()
        assert headers["trace"] == dict(copied.headers())["trace"]
        original_offset, original_ms = expected[source]
        assert int(headers[ORIGINAL_AGE_MS]) == copied.timestamp()[1] - original_ms
        if headers[ORIGINAL_WHERE] == SAME_BATCH.encode():
            assert int(headers[ORIGINAL_INPUT_OFFSET]) == original_offset
            assert ORIGINAL_OUTPUT_OFFSET not in headers
        else:
            assert headers[ORIGINAL_WHERE] == EARLIER_BATCH.encode()
            if observed:
                assert ORIGINAL_OUTPUT_OFFSET not in headers
                continue
            published = outputs[(source[0], int(headers[ORIGINAL_OUTPUT_OFFSET]))]
            assert published.key() == copy.key(), "the original output offset names another id"
            assert published.value() == inputs[(source[0], original_offset)].value()
    return copies


def test_every_dropped_copy_is_produced_once_naming_its_original(make_pipeline):
    pipeline = make_pipeline(partitions=2)
    topic = with_duplicates_topic(pipeline)
    config = pipeline.config(duplicates_topic=topic, batch_max_messages=4)
    # a repeat in the same batch (a), in the batch just before (b), and in a store-held earlier one (c)
    pipeline.produce(keyed(["a", "b", "a", "c", "x", "b", "y", "z", "c"]), partition=0)
    pipeline.produce(keyed(["p", "p", "q"], start=100), partition=1)
    first = pipeline.run_worker(config)  # small batches: repeats of the batch committing
    assert (first.published, first.duplicates, first.duplicates_produced) == (8, 4, 4)
    # a new run, from its store on disk: older repeats, and a repeat of a repeat
    pipeline.produce(keyed(["a", "c", "new", "new", "a"], start=200), partition=0)
    pipeline.produce(keyed(["q"], start=300), partition=1)
    second = pipeline.run_worker(pipeline.config(duplicates_topic=topic))  # one batch: "new" repeated in it
    assert (second.published, second.duplicates, second.duplicates_produced) == (1, 5, 5)
    copies = assert_copies_exactly_once(pipeline, topic)
    where = Counter(dict(copy.headers())[ORIGINAL_WHERE] for copy in copies)
    assert where[SAME_BATCH.encode()] >= 1 and where[EARLIER_BATCH.encode()] >= 4
    assert check_output(pipeline.kafka, pipeline.output_topic, [k.encode() for k in "abcxyzpq"] + [b"new"]).exactly_once


def test_without_the_option_nothing_is_produced_and_the_summary_is_unchanged(make_pipeline):
    pipeline = make_pipeline(partitions=1)
    topic = with_duplicates_topic(pipeline)
    pipeline.produce(keyed(["a", "a"]))
    summary = pipeline.run_worker()
    assert (summary.duplicates, summary.duplicates_produced) == (1, 0)
    assert read_all(pipeline, topic) == []


@pytest.mark.parametrize("crashpoint", ["after-produce:3", "after-commit:3"])
def test_a_worker_killed_mid_batch_leaves_output_and_duplicates_exactly_once(make_pipeline, crashpoint):
    pipeline = make_pipeline(partitions=2)
    topic = with_duplicates_topic(pipeline)
    rng = random.Random(7)
    ids = [f"id-{rng.randrange(400)}" for _ in range(1200)]  # about half of them repeats, near and far
    pipeline.produce(keyed(ids))
    data_dir = pipeline.root / "data"
    args = ("--duplicates-topic", topic, "--batch-max-messages", "100")
    killed = pipeline.spawn_worker("w1", data_dir, *args, env={"DEDUPECTL_CRASHPOINT": crashpoint})
    _, stderr = killed.communicate(timeout=180)
    assert killed.returncode == -signal.SIGKILL, stderr[-2000:]
    committed_before = len(read_all(pipeline, topic))
    assert 0 < committed_before < len(expected_copies(pipeline)), "the kill did not land mid-stream"

    final = pipeline.spawn_worker("w1", data_dir, *args, "--exit-on-idle", "3", "--json")
    stdout, stderr = final.communicate(timeout=180)
    assert final.returncode == 0, stderr[-2000:]
    assert json.loads(stdout)["duplicates_produced"] == len(expected_copies(pipeline)) - committed_before
    check = check_output(pipeline.kafka, pipeline.output_topic, {message_id.encode() for message_id in ids})
    assert check.exactly_once and check.records == len(set(ids)), check
    assert_copies_exactly_once(pipeline, topic)
