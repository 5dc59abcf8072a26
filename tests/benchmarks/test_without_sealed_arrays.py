"""The store the storm compares against must be the same store without sealed arrays: its sealed generations
RocksDB runs that answer every id, and the product's store unchanged outside the harness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.bench_storm import held_ids
from benchmarks.bulk_stores import bulk_load_store
from benchmarks.without_sealed_arrays import no_sealed_arrays
from store.bulk_load import LoadLayout
from store.dedup_store import DedupStore
from store.generation_keeper import unsealed

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = LoadLayout(batch_ids=1_000, bucket_ids=10_000)
COUNT = 25_000


def _load(path, window: int) -> list[bytes]:
    """Bulk load the store; 3,000 of the ids it holds, drawn over all its buckets."""
    bulk_load_store(path, topic="in", partition=1, count=COUNT, layout=LAYOUT, seed=1, window_ids=window)
    return held_ids(1, COUNT, 3_000, np.random.default_rng(4), LAYOUT)


def test_a_store_loaded_and_opened_without_sealed_arrays_keeps_its_sealed_generations_as_runs(
    tmp_path, short_generations
):
    window = short_generations(4_000)
    path = tmp_path / "in-1"
    with no_sealed_arrays():
        held = _load(path, window)
        with DedupStore.open(path, topic="in", partition=1, window_ids=window) as store:
            generations = store._keeper.generations
            assert len(generations) > 3
            assert not store.arrays_files()
            assert not any(unsealed(generation) for generation in list(generations)[:-1])
            assert all(store.contains_many(held))
    with DedupStore.open(path, topic="in", partition=1, window_ids=window) as store:
        assert store.wait_for_seals(60)
        assert store.arrays_files()  # outside the harness, the product's worker writes them


def test_a_store_loaded_with_sealed_arrays_has_them(tmp_path, short_generations):
    window = short_generations(4_000)
    path = tmp_path / "in-1"
    held = _load(path, window)
    with DedupStore.open(path, topic="in", partition=1, window_ids=window) as store:
        assert store.arrays_files()
        assert all(store.contains_many(held))


def test_the_harness_runs_the_cli_it_wraps():
    completed = subprocess.run(
        [sys.executable, "benchmarks/without_sealed_arrays.py", "run", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    assert "--max-keys" in completed.stdout
