"""Turn a store back into schema 4's layout (every id in one FIFO ``ids`` family, with each batch's markers),
for the tests of opening and migrating such a store."""

from __future__ import annotations

import json
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from store import generations
from store.codec import CF_IDS, CF_META, META_IDENTITY, encode_marker
from store.options import store_options


def as_schema_4(path: Path) -> int:
    """Move the ids of the stopped store at ``path`` into one ``ids`` family and mark it schema 4; returns
    how many ids moved."""
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
            family = db.get_column_family(name)
            batch = WriteBatch(raw_mode=True)
            for key, value in family.items():
                batch.put(key, value, handle)
                seqs.append(int.from_bytes(value, "big"))
                moved += 1
            db.write(batch)
            family.close()
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
        meta.close()
    finally:
        db.close()
    return moved
