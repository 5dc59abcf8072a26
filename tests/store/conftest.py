"""Fixtures shared by the store's tests."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from store import dedup_store, generations
from store.id_filter import GROUPS


@pytest.fixture
def short_generations(monkeypatch) -> Callable[[int], int]:
    """``window_for(n)``: the ``window_ids`` that gives a store generations (and id filter stretches) of about
    ``n`` numbers, the floors that keep them long in production lifted for the test."""
    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", 1)
    monkeypatch.setattr(generations, "MIN_GENERATION_IDS", 1)

    def window_for(numbers: int) -> int:
        return math.floor(numbers * (GROUPS - 1) / dedup_store.FILTER_SLACK)

    return window_for
