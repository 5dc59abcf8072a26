"""A store that lost its last records (restored from a copy taken before them) is found out of sync,
repaired by --apply, found in sync by a repeat run; afterwards the worker drops re-sent copies."""

from __future__ import annotations

import shutil

from reconcile_support import ids, only_partition

from dedupectl.verify import count_ids


def test_lost_tail_is_found_repaired_and_then_deduplicated(make_pipeline, tmp_path):
    pipeline = make_pipeline(partitions=2)
    first, lost = ids("early", 300), ids("late", 120)
    pipeline.produce_input(first[:150], partition=0)
    pipeline.produce_input(first[150:], partition=1)
    pipeline.run_worker()
    copies = {p: tmp_path / f"copy-{p}" for p in (0, 1)}
    for partition, copy in copies.items():  # the worker is stopped: a plain copy is a consistent snapshot
        shutil.copytree(pipeline.store_path(partition), copy)
    pipeline.produce_input(lost[:80], partition=0)
    pipeline.produce_input(lost[80:], partition=1)
    pipeline.run_worker()
    for partition, copy in copies.items():  # the store loses its last records
        shutil.rmtree(pipeline.store_path(partition))
        shutil.copytree(copy, pipeline.store_path(partition))

    code, report = pipeline.reconcile("--all")
    assert code == 1
    by_partition = {p: only_partition(report, p) for p in (0, 1)}
    assert [by_partition[p]["missing_from_store"] for p in (0, 1)] == [80, 40]
    assert by_partition[0]["records_scanned"] == 230
    assert {s["id"] for s in by_partition[0]["samples"]["missing_from_store"]} <= {i.decode() for i in lost[:80]}
    assert len(by_partition[0]["samples"]["missing_from_store"]) == 10
    for p in (0, 1):
        assert by_partition[p]["unpublished"] == 0
        assert by_partition[p]["duplicate_records"] == 0
        assert by_partition[p]["status"] == "out of sync"
        assert by_partition[p]["coverage_after"] == by_partition[p]["coverage_before"]  # a dry run writes nothing
    assert pipeline.store_ids(0) == first[:150]

    code, report = pipeline.reconcile("--all", "--apply")
    assert code == 0
    repaired = only_partition(report, 0)
    assert (repaired["recorded"], repaired["status"]) == (80, "repaired")
    assert repaired["coverage_after"]["output_offset"] == pipeline.end_offset(0)
    assert repaired["coverage_after"]["next_seq"] == 230
    assert pipeline.store_ids(0) == first[:150] + lost[:80]  # in output order: aging stays oldest-first

    code, report = pipeline.reconcile("--all")
    assert code == 0
    assert [p["status"] for p in report["partitions"]] == ["in sync", "in sync"]
    assert sum(p["missing_from_store"] + p["unpublished"] for p in report["partitions"]) == 0

    # clients retry the lost messages: the repaired store knows them, so none is published twice
    pipeline.produce_input(lost[:80], partition=0)
    pipeline.produce_input(lost[80:], partition=1)
    summary = pipeline.run_worker()
    assert (summary.published, summary.duplicates, summary.recovered) == (0, 120, 0)
    counts = count_ids(pipeline.kafka, pipeline.output_topic)
    assert len(counts) == 420 and max(counts.values()) == 1
