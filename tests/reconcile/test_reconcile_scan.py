"""A compact scan (what reconcile holds while it looks ids up) keeps each record's offset and timestamp
exactly as the consumer's messages give them, across transaction markers and a stop offset."""

from __future__ import annotations

from reconcile_support import ids

from reconcile.scan import OutputReader


def _records(reader: OutputReader, topic: str, *, compact: bool, stop: int | None = None):
    batches = list(reader.scan(topic, 0, -1, stop_offset=stop, batch_size=7, compact=compact))
    assert all((batch.messages is None) == compact for batch in batches)
    return (
        [message_id for batch in batches for message_id in batch.ids],
        [offset for batch in batches for offset in batch.offsets],
        [batch.timestamp_ms(i) for batch in batches for i in range(len(batch.ids))],
        batches[-1].position,
    )


def test_compact_batches_keep_offsets_and_timestamps(make_pipeline):
    pipeline = make_pipeline()
    pipeline.publish(ids("c", 5), timestamp_ms=1_700_000_000_000)  # offsets 0-4, marker 5
    pipeline.publish(ids("c", 6, start=5), name="second", timestamp_ms=1_700_000_000_500)  # 6-11, marker 12
    with OutputReader(pipeline.kafka) as reader:
        full = _records(reader, pipeline.output_topic, compact=False)
        compact = _records(reader, pipeline.output_topic, compact=True)
        assert compact == full
        assert compact[1] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]  # the marker at 5 falls inside a batch
        assert compact[2] == [1_700_000_000_000] * 5 + [1_700_000_000_500] * 6
        assert compact[3] == 13
        cut = _records(reader, pipeline.output_topic, compact=True, stop=8)
        assert (cut[1], cut[3]) == ([0, 1, 2, 3, 4, 6, 7], 8)
