"""How the requests of the remote client's console-user calls cross the wire, over
`/v1/users...` (the calls are the embedded engine's, made remote: `twins.remote_twin`).
Admin only."""

from __future__ import annotations

from urllib.parse import quote

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.users import UserInfo

from .door import Sends
from .remote_wire import Wires, declared, route


def _path(user: str, tail: str) -> str:
    return f"/v1/users/{quote(user, safe='')}{tail}"


async def _create(send: Sends, asked: ops.CreateUser) -> UserInfo:
    body = {
        "name": asked.user,
        "roles": [Role(r).value for r in asked.roles],
        "password": asked.password,
    }
    return UserInfo.from_json(await send(*route(asked), json=body))


async def _disable(send: Sends, asked: ops.DisableUser) -> None:
    await send("POST", _path(asked.user, "/disable"), json={"reason": asked.reason})


async def _set_password(send: Sends, asked: ops.SetPassword) -> None:
    await send("PUT", _path(asked.user, "/password"), json={"password": asked.password})


USER_WIRES: Wires = {
    ops.CreateUser: _create,
    ops.ListUsers: declared(lambda found: [UserInfo.from_json(u) for u in found["users"]]),
    ops.DisableUser: _disable,
    ops.SetPassword: _set_password,
}
