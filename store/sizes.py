"""Human sizes and durations: ``40GiB``, ``512MB``, ``24h``, ``90m`` in, ``1.5 GiB``, ``3d 4h``, ``3h ago`` out."""

from __future__ import annotations

import re

from store.errors import ConfigError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_size(text: str, *, what: str = "size") -> int:
    """``"40GiB"`` -> 42949672960; decimal (kB, MB, GB, TB) and binary (KiB, MiB, GiB, TiB) units."""
    match = _SIZE.fullmatch(text)
    unit = match[2].lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ConfigError(
            f"{what} {text!r} is not a size", "write a number with an optional unit: 40GiB, 512MiB, 20GB, 1000000"
        )
    value = int(float(match[1]) * _SIZE_UNITS[unit])
    if value <= 0:
        raise ConfigError(f"{what} {text!r} must be more than 0 bytes")
    return value


def parse_duration(text: str, *, what: str = "duration", positive: bool = False) -> float:
    """``"24h"`` -> 86400.0; parts in s, m, h, d, w may be combined (``1d12h``); a bare number is seconds.
    ``positive`` refuses zero (an interval, say)."""
    compact = str(text).replace(" ", "").lower()
    if _BARE_NUMBER.fullmatch(compact):
        compact += "s"
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise ConfigError(f"{what} {text!r} is not a duration", "write it like 24h, 90m, 1d12h or 3600s")
    seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if positive and seconds <= 0:
        raise ConfigError(f"{what} {text!r} must be longer than 0s", "write it like 90s, 15m, 1h, 7d or 2w")
    return seconds


def format_size(value: int | float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float | None) -> str:
    """``93784`` -> ``"1d 2h 3m"``; under a minute in seconds; ``None`` -> ``"-"``."""
    if seconds is None:
        return "-"
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.0f}s"
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    if days:
        return sign + (f"{days}d {hours}h" if hours else f"{days}d")
    return sign + (f"{hours}h {minutes}m" if hours and minutes else f"{hours}h" if hours else f"{minutes}m")


def format_age(seconds: float | None) -> str:
    """How long ago, in the units of ``format_duration``: ``10800`` -> ``"3h ago"``; ``None`` -> ``"-"``."""
    if seconds is None:
        return "-"
    if seconds < 0:  # a clock ahead of this host's
        return f"in {format_duration(-seconds)}"
    return f"{format_duration(seconds)} ago"
