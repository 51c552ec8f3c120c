"""Notifications a `file` sender wrote, read as an approver reads mail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .polling import eventually


class Mailbox:
    """The notifications file, read as an approver reads mail."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def wait(self, approval_id: str, approver: str) -> dict[str, Any]:
        """The latest notification of `approval_id` to `approver`, once it has come."""

        def find() -> dict[str, Any] | None:
            mine = [
                n
                for n in self.all()
                if n["approval_id"] == approval_id and n["approver"] == approver
            ]
            return mine[-1] if mine else None

        found: dict[str, Any] = eventually(find, f"a notification for {approver}")
        return found
