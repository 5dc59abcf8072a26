"""Output gaps in the store's meta: the gap a worker refused a partition for, the operator's acceptance of it
(covered output offset moved, who, when, why), and the offsets of a truncated topic's earlier life."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dedupectl.cli import app as cli
from store.codec import CF_META, GAP_RETENTION, GAP_TRUNCATED, META_ACCEPTED_GAPS, META_REFUSED_GAP, OutputGap
from store.dedup_store import DedupStore
from store.errors import ConfigError, StoreCorruptError, StoreError, StoreLockedError
from store.operations import accept_gaps
from store.selection import select_stores
from store.window import read_windows

BASE_MS = 1_700_000_000_000


def _id(n: int) -> bytes:
    return f"ajs-{n:032x}".encode()


def _record(store: DedupStore, first: int, count: int, first_offset: int) -> None:
    """Ids first..first+count-1 published at consecutive offsets, covered up to their commit marker."""
    numbers = range(first, first + count)
    offsets = range(first_offset, first_offset + count)
    store.record([_id(n) for n in numbers], [BASE_MS + n for n in numbers], output_offsets=offsets,
                 output_offset=first_offset + count)  # fmt: skip


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "events-0"


def test_a_store_without_gap_keys_has_no_gap(path: Path):
    with DedupStore.open(path, topic="events", partition=0) as store:
        _record(store, 0, 10, 0)
        assert store.gaps.refused is None and store.gaps.accepted == () and store.gaps.offsets_from_seq == 0
    with DedupStore.open_secondary(path) as reader:
        assert reader.gaps.refused is None and reader.gaps.accepted == ()


def test_a_refused_gap_is_kept_until_it_is_accepted(path: Path):
    gap = OutputGap(GAP_RETENTION, covered=10, low=40, end=50, found_ms=BASE_MS)
    with DedupStore.open(path, topic="events", partition=0) as store:
        _record(store, 0, 10, 0)
        store.gaps.note_refused(gap)
    with DedupStore.open_secondary(path) as reader:
        assert reader.gaps.refused == gap
    with DedupStore.open_existing(path) as store:
        accepted = store.accept_gap("restored an old snapshot", "ops@host", BASE_MS + 5)
        assert (accepted.gap, accepted.from_seq, accepted.reason, accepted.by) == (gap, 10, "restored an old snapshot",
                                                                                   "ops@host")  # fmt: skip
        # recovery resumes at the first offset the output holds; nothing else moves
        assert store.state.output_offset == 40 and store.state.next_seq == 10
        assert store.gaps.refused is None
    with DedupStore.open_secondary(path) as reader:
        assert reader.gaps.refused is None and reader.gaps.accepted == (accepted,)
        assert reader.state.output_offset == 40


def test_only_a_refused_gap_the_store_still_has_can_be_accepted(path: Path):
    with DedupStore.open(path, topic="events", partition=0) as store:
        _record(store, 0, 10, 0)
        with pytest.raises(StoreError, match="holds no refused output gap"):
            store.accept_gap("why", "ops@host", BASE_MS)
        store.gaps.note_refused(OutputGap(GAP_RETENTION, covered=10, low=40, end=50))
        _record(store, 10, 5, 40)  # the store moved on since (e.g. reconcile --apply recorded the tail)
        with pytest.raises(StoreError, match="covers output offset 45 now, not 10"):
            store.accept_gap("why", "ops@host", BASE_MS)
        store.gaps.clear_refused()
        assert store.gaps.refused is None


def test_a_truncated_topic_s_earlier_offsets_are_not_read_as_the_present_one_s(path: Path):
    with DedupStore.open(path, topic="events", partition=0) as store:
        _record(store, 0, 100, 1_000)  # published at 1000..1099 in the topic's earlier life
        store.gaps.note_refused(OutputGap(GAP_TRUNCATED, covered=1_100, low=0, end=0))
        store.accept_gap("topic recreated", "ops@host", BASE_MS)
        assert store.state.output_offset == 0 and store.gaps.offsets_from_seq == 100
        assert store.ledger.output_offsets([0, 99]) == [None, None]
        assert store.ledger.newest_output_offset() is None
        _record(store, 100, 20, 5)  # the recreated topic: 5..24
        assert store.ledger.output_offsets([99, 100, 119]) == [None, 5, 24]
        assert store.ledger.newest_output_offset() == 24
        assert store.ledger.seqs_published_at([5, 24, 1_000]) == {5: 100, 24: 119}
    with DedupStore.open_secondary(path) as reader:
        assert reader.gaps.offsets_from_seq == 100 and reader.ledger.output_offsets([0, 100]) == [None, 5]


def test_unreadable_gap_metadata_is_corruption(path: Path):
    with DedupStore.open(path, topic="events", partition=0) as store:
        store.family(CF_META)[META_ACCEPTED_GAPS] = b"[{not json"
    with pytest.raises(StoreCorruptError, match="unreadable output gaps"):
        DedupStore.open_existing(path)


def test_accept_gaps_accepts_every_partition_or_none(tmp_path: Path):
    for partition in (0, 1):
        with DedupStore.open(tmp_path / f"events-{partition}", topic="events", partition=partition) as store:
            _record(store, 0, 10, 0)
            if partition == 0:
                store.gaps.note_refused(OutputGap(GAP_RETENTION, covered=10, low=30, end=30))
    refs = select_stores(tmp_path, "events", [0, 1])
    with pytest.raises(StoreError, match="no refused output gap"):
        accept_gaps(refs, "retention ran past a restore")
    with pytest.raises(ConfigError, match="--reason is empty"):
        accept_gaps(refs[:1], "  ")
    (info,) = read_windows(refs[:1])
    assert info.refused_gap is not None and info.accepted_gaps == ()  # nothing was accepted
    (outcome,) = accept_gaps(refs[:1], "retention ran past a restore", by="ops@host")
    assert (outcome.covered_before, outcome.covered_after) == (10, 30)
    (info,) = read_windows(refs[:1])
    assert info.refused_gap is None and info.accepted_gaps == (outcome.accepted,)


def test_accept_gaps_refuses_a_store_a_worker_holds(tmp_path: Path):
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as store:
        store.gaps.note_refused(OutputGap(GAP_RETENTION, covered=0, low=5, end=5))
        with pytest.raises(StoreLockedError, match="a worker holds it"):
            accept_gaps(select_stores(tmp_path), "why")


def test_the_meta_keys_are_the_codec_s(path: Path):
    with DedupStore.open(path, topic="events", partition=0) as store:
        store.gaps.note_refused(OutputGap(GAP_RETENTION, covered=0, low=5, end=5, found_ms=BASE_MS))
        raw = store.family(CF_META)[META_REFUSED_GAP]
    assert b'"kind": "retention"' in raw and b'"found_ms": 1700000000000' in raw


def test_the_cli_refuses_in_one_line_what_it_cannot_accept(tmp_path: Path, monkeypatch, capsys):
    with DedupStore.open(tmp_path / "events-0", topic="events", partition=0) as store:
        _record(store, 0, 10, 0)
    for args, expected in [
        (
            ["accept-gap", "-d", str(tmp_path), "-p", "0", "--reason", "x"],
            "holds no refused output gap: nothing to accept",
        ),
        (["accept-gap", "-d", str(tmp_path), "-p", "0", "--reason", " "], "--reason is empty"),
    ]:
        monkeypatch.setattr(sys, "argv", ["dedupectl", *args])
        with pytest.raises(SystemExit) as exit_info:
            cli.main()
        err = " ".join(capsys.readouterr().err.split())
        assert exit_info.value.code == 2 and expected in err and "Traceback" not in err
