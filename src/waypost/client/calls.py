"""The mixins of `AsyncEngine`'s thin methods over the one door, in one base."""

from __future__ import annotations

from .encryption import EncryptionCalls
from .fork import ForkCalls
from .operator import OperatorCalls
from .queues import QueueCalls
from .repairs import RepairCalls
from .retention import RetentionCalls
from .runs import RunQueryCalls
from .schedules import ScheduleCalls
from .tenants import TenantCalls
from .updates import UpdateCalls
from .users import UserCalls
from .webhooks import WebhookCalls


class Calls(
    TenantCalls,
    WebhookCalls,
    QueueCalls,
    RetentionCalls,
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
