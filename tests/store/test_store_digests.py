"""Batch digests: every recorded batch carries one, a batch that loses ids loses it; a store of another schema
is refused with what to do."""

from __future__ import annotations

import json

import pytest
from rocksdict import Rdict

from store import generations
from store.codec import CF_META, CF_TIMES, META_IDENTITY, decode_seq, encode_ids
from store.dedup_store import DedupStore
from store.errors import StoreVersionError
from store.options import store_options
from store.times_codec import batch_digests, times_digests


def _ids(start: int, stop: int) -> list[bytes]:
    return [f"ajs-{n:032x}".encode() for n in range(start, stop)]


def _digests(store: DedupStore) -> dict[int, bytes | None]:
    return {decode_seq(key): times_digests(value) for key, value in store.family(CF_TIMES).items()}


def _set_schema(path, version: int) -> None:
    names = tuple(name for name in Rdict.list_cf(str(path)) if generations.first_seq_of(name) is not None)
    options, families, _ = store_options(create=False, generations=names)
    db = Rdict(str(path), options=options, column_families=families)
    try:
        meta = db.get_column_family(CF_META)
        identity = json.loads(meta[META_IDENTITY])
        identity["schema_version"] = version
        meta[META_IDENTITY] = json.dumps(identity).encode()
        del meta
    finally:
        db.close()


def test_each_batch_has_the_digests_of_its_keys_until_it_loses_an_id(tmp_path):
    with DedupStore.open(tmp_path / "in-0", topic="in", partition=0) as store:
        store.record(_ids(0, 10), [1] * 10)
        store.record(_ids(10, 15), [2] * 5)
        store.record(_ids(15, 30), [3] * 15)
        assert _digests(store) == {
            0: batch_digests(encode_ids(_ids(0, 10))),
            10: batch_digests(encode_ids(_ids(10, 15))),
            15: batch_digests(encode_ids(_ids(15, 30))),
        }
        assert store.forget_many([_ids(12, 13)[0], _ids(20, 21)[0], b"never-recorded"]) == 2
        digests = _digests(store)
        assert digests[0] is not None and digests[10] is None and digests[15] is None
        assert store.ledger.timestamps([0, 12, 29]) == [1, 2, 3]  # the timestamps stay


@pytest.mark.parametrize("other", [3, 6, 8])
def test_a_store_of_another_schema_is_refused_with_what_to_do(tmp_path, other):
    path = tmp_path / "in-0"
    with DedupStore.open(path, topic="in", partition=0) as store:
        store.record(_ids(0, 5), [1] * 5)
    _set_schema(path, other)
    for opening in (DedupStore.open_secondary, DedupStore.open_existing):
        with pytest.raises(StoreVersionError, match=f"schema version {other}; this build reads schema 7 only"):
            opening(path)
