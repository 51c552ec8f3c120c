"""What an engine takes from the process it runs in: who runs it, and option values."""

from __future__ import annotations

import getpass
import os
from datetime import timedelta


def seconds(value: timedelta | float) -> float:
    """An option given as a `timedelta` or a number of seconds, in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def os_user() -> str:
    """Who runs this process: the local principal's name in audit records."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        return f"uid {os.getuid()}"
