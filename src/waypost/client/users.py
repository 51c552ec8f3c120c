"""Console users of `AsyncEngine` (create, list and disable them, set a password) and the
run queries its runs page reads (search, counts): mixins of thin methods over the one
door. Signing in is the console's, through the door too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.operations_runs import DEFAULT_HISTORY_PAGE
from waypost.model.records import HistoryPage, RunInfo
from waypost.model.users import UserInfo

from .door import LocalDoor


class UserCalls:
    """Console users of a tenant, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def create_user(
        self, user: str, roles: Sequence[Role | str], password: str, *, tenant: str = "default"
    ) -> UserInfo:
        """Make a console user of `tenant` (which must exist) with `roles` and a password
        (8 to 512 characters; only its argon2id hash is kept). `UserExists` if the name
        is taken. Needs `argon2-cffi` (the `server` extra)."""
        request = ops.CreateUser(user=user, roles=roles, password=password)
        made: UserInfo = await self._local(request, tenant)
        return made

    async def list_users(self, *, tenant: str = "default") -> list[UserInfo]:
        """The console users of `tenant`, disabled ones too (never a password hash)."""
        found: list[UserInfo] = await self._local(ops.ListUsers(), tenant)
        return found

    async def disable_user(self, user: str, reason: str = "", *, tenant: str = "default") -> None:
        """Disable a console user: it cannot sign in, its sessions end (`UserNotFound`)."""
        await self._local(ops.DisableUser(user=user, reason=reason), tenant)

    async def set_password(self, user: str, password: str, *, tenant: str = "default") -> None:
        """Replace a console user's password; its sessions end (`UserNotFound`)."""
        await self._local(ops.SetPassword(user=user, password=password), tenant)


class RunQueryCalls:
    """Searching and counting runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def search_runs(
        self, text: str, *, limit: int = 50, tenant: str = "default"
    ) -> list[RunInfo]:
        """`tenant`'s runs that `text` finds, newest first: the run of that id, runs whose
        id starts with it, runs waiting with it as a correlation value (or `key=value`)."""
        found: list[RunInfo] = await self._local(ops.SearchRuns(text=text, limit=limit), tenant)
        return found

    async def count_runs(self, *, tenant: str = "default") -> dict[str, int]:
        """How many runs `tenant` has in each status (statuses with none left out)."""
        counts: dict[str, int] = await self._local(ops.CountRuns(), tenant)
        return counts

    async def history_page(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        limit: int = DEFAULT_HISTORY_PAGE,
        tenant: str = "default",
    ) -> HistoryPage:
        """Part of a run's history, oldest first: the events after `after_seq`, at most
        `limit` (up to 1,000) and about 4 MB of data; `next_after` asks for the next page
        (None after the last). `history()` reads a history whole; this, a page at a time."""
        page: HistoryPage = await self._local(
            ops.PageHistory(run_id=run_id, after_seq=after_seq, limit=limit), tenant
        )
        return page

    async def data_at(
        self, run_id: str, seq: int, *, tenant: str = "default"
    ) -> dict[str, Any] | None:
        """A definition run's data, step position and whether it waits, after its event
        `seq` (its history replayed up to there; nothing is written). None for a run of
        workflow code."""
        found: dict[str, Any] | None = await self._local(
            ops.RunDataAt(run_id=run_id, seq=seq), tenant
        )
        return found
