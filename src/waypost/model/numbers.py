"""Numbers from outside: JSON and YAML integers may have any number of digits."""

from __future__ import annotations

import math
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import preview

__all__ = ["finite", "whole_number"]


def finite(value: Any) -> float | None:
    """`value` as a finite float, or None: for a bool, a non-number, NaN, an infinity, or an
    integer too large for a float (`math.isfinite(10**400)` raises, it does not answer)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def whole_number(value: Any, what: str, low: int, high: int, *, field: str | None = None) -> int:
    """`value` if it is a whole number from `low` to `high` (not a bool), else
    `InvalidRequest` on `field` (by default `what`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(
            f"{what} must be a whole number from {low} to {high}, not {preview(value)}",
            field=what if field is None else field,
        )
    return value
