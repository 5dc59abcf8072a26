"""The worker's recovery is reconcile over the tail with --apply (one code path): it records what the
store lacks from its covered offset on, in output order, once per id, and advances past the markers."""

from __future__ import annotations

from reconcile_support import ids

from reconcile.recovery import catch_up
from reconcile.scan import OutputReader


def test_catch_up_records_the_tail_once_in_output_order(make_pipeline):
    pipeline = make_pipeline()
    first, second = ids("p", 40), ids("q", 25)
    pipeline.publish(first)  # offsets 0-39, marker 40
    covered = pipeline.end_offset()
    pipeline.record(first, output_offset=covered)
    pipeline.publish([*second, second[3]], name="tail")  # offsets 41-66 (a repeat at 66), marker 67

    progress = []
    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        result = catch_up(store, reader, pipeline.output_topic, 0, progress=lambda *p: progress.append(p))
        assert (result.start_offset, result.end_offset) == (covered, pipeline.end_offset())
        assert (result.scanned, result.recorded) == (26, 25)
        assert progress[-1] == (26, 25)
        assert store.state.output_offset == pipeline.end_offset()  # past the commit marker at 67

        again = catch_up(store, reader, pipeline.output_topic, 0)
        assert (again.scanned, again.recorded, again.start_offset) == (0, 0, pipeline.end_offset())
    assert pipeline.store_ids() == first + second


def test_catch_up_builds_a_fresh_store_from_the_whole_output(make_pipeline):
    pipeline = make_pipeline()
    published = ids("r", 30)
    pipeline.publish(published[:10])
    pipeline.publish(published[10:], name="more")
    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        result = catch_up(store, reader, pipeline.output_topic, 0)
        assert (result.start_offset, result.scanned, result.recorded) == (-1, 30, 30)
        assert store.state.output_offset == pipeline.end_offset()
    assert pipeline.store_ids() == published


def test_catch_up_reads_from_the_bounds_its_caller_has_just_read(make_pipeline, monkeypatch):
    """The worker has read the bounds while waiting for the output to settle: recovery asks for them no more."""
    pipeline = make_pipeline()
    published = ids("s", 20)
    pipeline.publish(published)
    with pipeline.open_store() as store, OutputReader(pipeline.kafka) as reader:
        bounds = reader.bounds(pipeline.output_topic, 0)
        asked = []
        monkeypatch.setattr(reader, "bounds", lambda *args: asked.append(args))
        result = catch_up(store, reader, pipeline.output_topic, 0, bounds=bounds)
        assert asked == []
        assert (result.scanned, result.recorded, result.end_offset) == (20, 20, pipeline.end_offset())
    assert pipeline.store_ids() == published
