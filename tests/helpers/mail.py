"""Notifications a `file` sender wrote, read as an approver reads mail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from waypost.features.senders import Notification

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

    def next_after(self, earlier: dict[str, Any], what: str) -> dict[str, Any]:
        """The first notification to the approver of `earlier` with other tokens, once it
        has come."""
        found: dict[str, Any] = eventually(
            lambda: [
                n
                for n in self.all()
                if n["approver"] == earlier["approver"]
                and n["approve_token"] != earlier["approve_token"]
            ],
            what,
        )[0]
        return found


APPROVE_AT = "https://approvals.example.org/approve"


def approval_notification(approver: str = "ann", token: str = "tok") -> Notification:
    """A notification of approval `a-1` of run `r-1` to `approver`, its tokens
    `<token>-approve` and `<token>-reject`."""
    about = {"id": "n-1", "kind": "approval.requested", "tenant": "acme", "approval_id": "a-1"}
    step = {"run_id": "r-1", "step": "1", "name": "manager"}
    approve, reject = f"{token}-approve", f"{token}-reject"
    links = {"approve_url": f"{APPROVE_AT}/{approve}", "reject_url": f"{APPROVE_AT}/{reject}"}
    return Notification(
        **about,
        **step,
        approver=approver,
        expires_at=None,
        approve_token=approve,
        reject_token=reject,
        **links,
    )
