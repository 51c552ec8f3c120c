"""The console-user calls of `AsyncClient`, over `/v1/users...`: the embedded engine's
calls made remote (`twins.remote_twin`: without `tenant=`, the API key decides it), and
how their requests cross the wire. Admin only."""

from __future__ import annotations

from urllib.parse import quote

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.users import UserInfo

from .door import Sends
from .remote_wire import route, wire
from .twins import remote_twin
from .users import UserCalls


def _path(user: str, tail: str) -> str:
    return f"/v1/users/{quote(user, safe='')}{tail}"


class UserRequests:
    """Console users of the API key's tenant (the key's principal must be an admin)."""

    create_user = remote_twin(UserCalls.create_user)
    list_users = remote_twin(UserCalls.list_users)
    disable_user = remote_twin(UserCalls.disable_user)
    set_password = remote_twin(UserCalls.set_password)


@wire(ops.CreateUser)
async def _create(send: Sends, asked: ops.CreateUser) -> UserInfo:
    body = {
        "name": asked.user,
        "roles": [Role(r).value for r in asked.roles],
        "password": asked.password,
    }
    return UserInfo.from_json(await send(*route(asked), json=body))


@wire(ops.ListUsers)
async def _list(send: Sends, asked: ops.ListUsers) -> list[UserInfo]:
    data = await send(*route(asked))
    return [UserInfo.from_json(item) for item in data["users"]]


@wire(ops.DisableUser)
async def _disable(send: Sends, asked: ops.DisableUser) -> None:
    await send("POST", _path(asked.user, "/disable"), json={"reason": asked.reason})


@wire(ops.SetPassword)
async def _set_password(send: Sends, asked: ops.SetPassword) -> None:
    await send("PUT", _path(asked.user, "/password"), json={"password": asked.password})
