"""--from/--to parsing: offsets, ISO-8601 times, ages; empty and reversed ranges refused up front."""

from __future__ import annotations

import pytest

from dedupectl.errors import RangeError
from reconcile.ranges import check_order, parse_bound

NOW = 1_800_000_000_000


def test_offsets_times_and_ages():
    assert parse_bound("42", "--from").offset == 42
    assert parse_bound("2027-01-15T08:00:00Z", "--from").timestamp_ms == 1_800_000_000_000
    assert parse_bound("2027-01-15 09:00+01:00", "--from").timestamp_ms == 1_800_000_000_000
    assert parse_bound("2027-01-15 08:12", "--from").timestamp_ms == 1_800_000_720_000  # no zone: UTC
    assert parse_bound("2h", "--from", now_ms=NOW).timestamp_ms == NOW - 2 * 3_600_000
    assert parse_bound("90s", "--to", now_ms=NOW).timestamp_ms == NOW - 90_000
    assert parse_bound("1.5d", "--to", now_ms=NOW).timestamp_ms == NOW - 129_600_000


@pytest.mark.parametrize("text", ["-5", "yesterday", "2h ago", "12:00", ""])
def test_malformed_bounds_say_which_forms_work(text):
    with pytest.raises(RangeError) as caught:
        parse_bound(text, "--from")
    assert "--from" in str(caught.value)
    assert "ISO-8601" in str(caught.value) or "negative" in str(caught.value)


@pytest.mark.parametrize(
    ("start", "stop", "fragment"),
    [
        ("10", "5", "is after"),
        ("7", "7", "empty range"),
        ("1h", "2h", "is after"),  # an hour ago is later than two hours ago
        ("2027-01-15", "2027-01-15T00:00:00+00:00", "empty range"),
    ],
)
def test_reversed_and_empty_ranges_are_refused(start, stop, fragment):
    with pytest.raises(RangeError, match=fragment):
        check_order(parse_bound(start, "--from", now_ms=NOW), parse_bound(stop, "--to", now_ms=NOW))


def test_an_offset_against_a_time_is_left_to_the_partition():
    check_order(parse_bound("100", "--from"), parse_bound("1h", "--to", now_ms=NOW))
