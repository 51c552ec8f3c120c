"""What a room of operations has at hand: the machinery runs move with, its store and
its clock."""

from __future__ import annotations

from waypost.engine.ports import Machinery
from waypost.store.base import Store


class Room:
    """A room of the engine's operations (accounts, approvals, definitions, ...), on the
    machinery it shares with the others."""

    def __init__(self, machinery: Machinery) -> None:
        self.machinery = machinery

    @property
    def store(self) -> Store:
        return self.machinery.store

    def now(self) -> float:
        """The engine's clock: seconds since the epoch."""
        return self.machinery.settings.clock()
