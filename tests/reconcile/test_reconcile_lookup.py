"""Looking up sequence numbers: runs of consecutive numbers are recognised as one (the fast path), anything
else (absent ids, repeats, reordering) id by id; a group of batches is one multi-get, a Lookup per batch."""

from __future__ import annotations

from dataclasses import replace

from reconcile.forget import forget_ids
from reconcile.lookup import Prefetcher, look_up, look_up_group
from store.dedup_store import DedupStore


def test_runs_absences_and_reorderings(tmp_path):
    ids = [f"ajs-{i:032x}".encode() for i in range(50)] + [b"plain-id", b"another"]
    with DedupStore.open(tmp_path / "in-0", topic="in", partition=0) as store:
        store.record(ids, [1] * len(ids))
        in_order = look_up(store, ids[10:30])
        assert (in_order.run_start, in_order.seqs) == (10, list(range(10, 30)))
        assert look_up(store, [ids[50], ids[51]]).run_start == 50
        reordered = look_up(store, [ids[3], ids[2]])
        assert (reordered.run_start, reordered.seqs) == (None, [3, 2])
        repeated = look_up(store, [ids[4], ids[4]])
        assert (repeated.run_start, repeated.seqs) == (None, [4, 4])
        gapped = look_up(store, [ids[5], b"never", ids[6]])
        assert (gapped.run_start, gapped.seqs) == (None, [5, None, 6])
        assert look_up(store, []).seqs == []

        forget_ids(store, [(7, ids[7])])
        assert look_up(store, ids[6:9]).seqs == [6, None, 8]

        batches = [ids[i : i + 10] for i in range(0, 50, 10)]
        assert [lookup.run_start for lookup in look_up_group(store, batches)] == [None, 10, 20, 30, 40]  # 7 is gone
        prefetcher = Prefetcher(store)
        try:
            (first, second) = prefetcher.submit([ids[:3], ids[10:13]]).result()
            assert (first.seqs, second.run_start) == ([0, 1, 2], 10)
        finally:
            prefetcher.close()

        store.write_state(replace(store.state, first_live_seq=20))  # aged: below the cut reads as absent
        assert look_up(store, [ids[19], ids[20]]).seqs == [None, 20]
