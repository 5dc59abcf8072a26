"""Looking up sequence numbers: runs of consecutive numbers are recognised as one (the fast path), anything
else (absent ids, repeats, reordering) id by id; a group of batches is looked up in key order, is one run
whatever the order of its ids, and otherwise is mapped back to a Lookup per batch."""

from __future__ import annotations

from dataclasses import replace

from reconcile import lookup
from reconcile.lookup import SPOT_CHECK_STRIDE, Prefetcher, look_up, look_up_group, run_by_digests
from store.codec import decode_id, encode_ids
from store.dedup_store import DedupStore
from store.testing import lose_ids
from store.times_codec import DIGEST_CHUNK


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

        store.forget_many([ids[7]])
        assert look_up(store, ids[6:9]).seqs == [6, None, 8]

        # a group is one run when its numbers are exactly consecutive, in whatever order its ids come
        shuffled = look_up_group(store, [ids[12:20], [ids[11], ids[10]]])
        assert (shuffled.count, shuffled.run_start) == (10, 10)
        batches = [ids[i : i + 10] for i in range(0, 50, 10)]
        gapped_group = look_up_group(store, batches)  # 7 is gone: the exact path, batch by batch
        assert gapped_group.run_start is None
        assert [lookup.run_start for lookup in gapped_group.per_batch(store)] == [None, 10, 20, 30, 40]
        assert gapped_group.per_batch(store)[0].seqs == [0, 1, 2, 3, 4, 5, 6, None, 8, 9]
        assert [lookup.seqs for lookup in shuffled.per_batch(store)] == [list(range(12, 20)), [11, 10]]
        repeats = look_up_group(store, [ids[20:23], [ids[21]]])  # 4 ids, numbers 20-22: not a run
        assert repeats.run_start is None
        assert [lookup.seqs for lookup in repeats.per_batch(store)] == [[20, 21, 22], [21]]
        absent = look_up_group(store, [[b"never-1"], [b"never-2", b"never-3"]])
        assert [lookup.seqs for lookup in absent.per_batch(store)] == [[None], [None, None]]
        odd_keys = look_up_group(store, [[b"", b"x", ids[50]]])  # keys too short to bucket: sorted fully
        assert odd_keys.per_batch(store)[0].seqs == [None, None, 50]
        prefetcher = Prefetcher(store)
        try:
            group = prefetcher.submit([ids[:3], ids[10:13]]).result()
            assert group.run_start is None
            (first, second) = group.per_batch(store)
            assert (first.seqs, second.run_start) == ([0, 1, 2], 10)
        finally:
            prefetcher.close()

        store.write_state(replace(store.state, first_live_seq=20))  # aged: below the cut reads as absent
        assert look_up(store, [ids[19], ids[20]]).seqs == [None, 20]
        aged = look_up_group(store, [ids[18:22]])
        assert aged.run_start is None
        assert aged.per_batch(store)[0].seqs == [None, None, 20, 21]
        assert look_up_group(store, [ids[20:22]]).run_start == 20


def test_a_stretch_of_output_is_checked_by_the_batch_digests(tmp_path):
    ids = [f"ajs-{i:032x}".encode() for i in range(300)]
    keys = encode_ids(ids)
    with DedupStore.open(tmp_path / "in-0", topic="in", partition=0) as store:
        for start in range(0, 300, 50):
            store.record(ids[start : start + 50], [1] * 50, output_offsets=list(range(start, start + 50)))
        assert run_by_digests(store, keys) == 0
        assert run_by_digests(store, keys[30:170]) == 30  # batches cut at both edges: those ids looked up
        assert run_by_digests(store, keys[100:150]) == 100
        assert look_up_group(store, [ids[0:120], ids[120:200]]).run_start == 0
        assert run_by_digests(store, []) is None

        swapped = [*keys[:55], keys[56], keys[55], *keys[57:100]]
        assert run_by_digests(store, swapped) is None
        assert look_up_group(store, [[decode_id(key) for key in swapped]]).run_start == 0  # the lookups agree
        assert run_by_digests(store, [*keys[50:100], keys[60]]) is None  # a repeat
        assert run_by_digests(store, [*keys[:70], encode_ids([b"never"])[0], *keys[71:100]]) is None
        assert run_by_digests(store, keys[::-1]) is None

        # a batch without digests (a schema-2 store's, or one whose lost id was put back) is checked id by id
        store.forget_many([ids[60]])
        assert store.place([ids[60]], [60]) == [60]
        assert store.ledger.match_digests(keys[50:100], 50) == list(range(50))  # no digest vouches for any of them
        assert run_by_digests(store, keys[40:120]) == 40

        store.forget_many([ids[10]])  # its batch loses its digests; the lookups find the gap
        assert run_by_digests(store, keys[0:50]) is None

        store.write_state(replace(store.state, first_live_seq=100))  # aged: nothing below the cut is a run
        assert run_by_digests(store, keys[50:150]) is None
        assert run_by_digests(store, keys[100:150]) == 100


def test_groups_cut_anywhere_in_large_batches_check_by_chunks(tmp_path, monkeypatch):
    ids = [f"ajs-{i:032x}".encode() for i in range(3 * DIGEST_CHUNK + 100)]
    keys = encode_ids(ids)
    looked_up: list[int] = []
    multi_get = lookup._multi_get
    monkeypatch.setattr(
        lookup, "_multi_get", lambda store, wanted: looked_up.append(len(wanted)) or multi_get(store, wanted)
    )
    with DedupStore.open(tmp_path / "in-0", topic="in", partition=0) as store:
        store.record(ids[:10], [1] * 10)
        store.record(ids[10:], [2] * (len(ids) - 10))  # one batch of 3 chunks and a short one
        start, stop = 10 + DIGEST_CHUNK // 2, 10 + 2 * DIGEST_CHUNK + 3
        looked_up.clear()
        assert run_by_digests(store, keys[start:stop]) == start
        # one multi-get: the two part-chunks at the edges and the spot checks; the chunk between is hashed
        edges = (10 + DIGEST_CHUNK - start) + 3
        assert len(looked_up) == 1 and edges <= looked_up[0] < edges + 8
        changed = list(keys[start:stop])
        changed[DIGEST_CHUNK] = keys[0]  # inside the whole chunk: only its digest can tell
        assert run_by_digests(store, changed) is None

        # ids lost behind the digests' back (say a dropped file): the spot check sees it
        lose_ids(store, ids[600 : 600 + SPOT_CHECK_STRIDE])
        assert run_by_digests(store, keys[10:]) is None
        assert look_up_group(store, [ids[10:]]).run_start is None
