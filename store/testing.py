"""Damage a store the way real failures do, or give it an older layout, for tests and benchmarks of what must
notice or handle it: only this package knows where in the layout the change has to go."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from store import generations
from store.codec import CF_IDS, CF_META, META_ARRAYS, META_IDENTITY, encode_ids, encode_marker
from store.dedup_store import DedupStore
from store.options import store_options


def lose_ids(store: DedupStore, ids: Sequence[bytes]) -> None:
    """Delete ``ids`` and nothing else, as a lost SST file would: their batches keep the digests that still
    count them, and the state still says they are live."""
    store.erase_keys(encode_ids(ids))


def as_schema_4(path: Path) -> int:
    """Give the stopped store at ``path`` schema 4's layout: every id in one FIFO ``ids`` family (with a pair of
    batch markers around them) and the schema mark 4; returns how many ids moved."""
    with DedupStore.open_existing(path) as store:  # its generations' ids, sealed arrays' included
        held = {name: list(store.generation_items(name)) for name, _, _ in store.id_families()}
        arrays = [file for _, file, _ in store.arrays_files()]
    names = tuple(Rdict.list_cf(str(path)))
    kept = tuple(name for name in names if generations.first_seq_of(name) is not None)
    options, families, _ = store_options(create=False, generations=kept)
    _, legacy, _ = store_options(create=False, legacy_ids=True)
    db = Rdict(str(path), options=options, column_families=families)
    try:
        ids = db.create_column_family(CF_IDS, legacy[CF_IDS])
        handle = db.get_column_family_handle(CF_IDS)
        moved = 0
        seqs = []
        for name in kept:
            batch = WriteBatch(raw_mode=True)
            for key, value in held.get(name, []):
                batch.put(key, value, handle)
                seqs.append(int.from_bytes(value, "big"))
                moved += 1
            db.write(batch)
        if seqs:  # as schema 4 wrote them: a batch's first and last numbers around its ids
            ids[encode_marker(True, min(seqs))] = b""
            ids[encode_marker(False, max(seqs))] = b""
        ids.flush(True)
        ids.close()
        del handle
        for name in kept:
            db.drop_column_family(name)
        meta = db.get_column_family(CF_META)
        identity = json.loads(meta[META_IDENTITY])
        identity["schema_version"] = 4
        meta[META_IDENTITY] = json.dumps(identity).encode()
        meta.delete(META_ARRAYS)
        meta.close()
    finally:
        db.close()
    for file in arrays:
        file.unlink()
    return moved
