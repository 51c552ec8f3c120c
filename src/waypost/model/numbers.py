"""Numbers from outside: JSON and YAML integers may have any number of digits."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite"]


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
