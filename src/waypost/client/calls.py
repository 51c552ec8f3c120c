"""The mixins of `AsyncEngine`'s thin methods over the one door, in one base."""

from __future__ import annotations

from .encryption import EncryptionCalls
from .fork import ForkCalls
from .operator import OperatorCalls
from .platform import PlatformCalls
from .repairs import RepairCalls
from .schedules import ScheduleCalls
from .updates import UpdateCalls
from .users import RunQueryCalls, UserCalls


class Calls(
    PlatformCalls,
    OperatorCalls,
    ForkCalls,
    EncryptionCalls,
    RepairCalls,
    UserCalls,
    RunQueryCalls,
    ScheduleCalls,
    UpdateCalls,
):
    """Every mixin of `AsyncEngine`."""
