"""Every operation x every role, through the door, on both stores: allowed exactly as the
guide's role table says.

The table ("Who may send each operation" in docs/guide/roles.md) is read here, not copied: an
operation whose roles change without the table changing, or one the table does not list,
fails these tests. Each operation is sent as a real request by a principal holding one
role (and by one holding none, the unauthenticated one and the local one); what is
checked is whether the door refused it for the caller's rights (`PermissionDenied`) or let
it through to its checks and handler (anything else: most refer to objects that do not
exist, so nothing is changed by them). Reassign and revoke are then sent on a real
pending approval by every role that may not: nothing about the approval changes.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, of_type
from tests.helpers.approvals import pending_approval
from tests.helpers.mail import Mailbox
from waypost.client.engine import AsyncEngine
from waypost.features.senders import FileSender
from waypost.model import (
    operations as ops,
    operations_queues as queues,
    schedules as sch,
    webhooks as wh,
)
from waypost.model.identity import Principal, Role

pytestmark = pytest.mark.timeout(300)

ROLES = Path(__file__).parents[2] / "docs" / "guide" / "roles.md"
TENANT = "acme"
NO_ROLE = "no role"
ANONYMOUS = "anonymous"
LOCAL = "local"
CALLERS = (*[r.value for r in Role], NO_ROLE, ANONYMOUS, LOCAL)


def documented() -> dict[str, frozenset[str]]:
    """Each operation the guide's table lists, and the callers it says may send it."""
    text = ROLES.read_text()
    start = text.index("## Who may send each operation")
    rows = re.findall(r"^\| (`.+?) \| (.+?) \|$", text[start:].split("\n\n#", 1)[0], re.M)
    table: dict[str, frozenset[str]] = {}
    for names, who in rows:
        if who.startswith("anyone"):
            callers = frozenset(CALLERS)
        elif who == "any role":
            callers = frozenset({r.value for r in Role} | {LOCAL})
        elif who == "the platform operator only":
            callers = frozenset({LOCAL})
        else:
            listed = re.split(r",\s*", who.split(" (")[0])
            assert set(listed) <= {r.value for r in Role}, f"unknown role in {who!r}"
            callers = frozenset({*listed, Role.ADMIN.value, LOCAL})
        for name in re.findall(r"`(\w+)`", names):
            assert name not in table, f"{name} is in the role table twice"
            table[name] = callers
    return table


def door_operations(tmp_path: Path) -> dict[str, type[ops.Request[Any]]]:
    engine = AsyncEngine(f"sqlite:///{tmp_path / 'never-opened.db'}")
    door = engine._door  # the test looks at the wiring itself
    return {kind.__name__: kind for kind in door.operations()}


PASSWORD = "a password long enough"

SAMPLES: dict[str, Callable[[], ops.Request[Any]]] = {
    # reading runs
    "GetRun": lambda: ops.GetRun(run_id="missing"),
    "ListRuns": lambda: ops.ListRuns(),
    "PageRuns": lambda: ops.PageRuns(),
    "SearchRuns": lambda: ops.SearchRuns(text="x"),
    "CountRuns": lambda: ops.CountRuns(),
    "RunDataAt": lambda: ops.RunDataAt(run_id="missing", seq=1),
    "GetHistory": lambda: ops.GetHistory(run_id="missing"),
    "PageHistory": lambda: ops.PageHistory(run_id="missing"),
    "AwaitResult": lambda: ops.AwaitResult(run_id="missing", timeout=0),
    "Query": lambda: ops.Query(run_id="missing", query="q"),
    "ListDefinitions": lambda: ops.ListDefinitions(),
    "GetDefinition": lambda: ops.GetDefinition(definition="missing"),
    "ListQueues": lambda: queues.ListQueues(),
    "ListSchedules": lambda: sch.ListSchedules(),
    "GetSchedule": lambda: sch.GetSchedule(schedule_id="missing"),
    "GetPurged": lambda: ops.GetPurged(run_id="missing"),
    "ListPurged": lambda: ops.ListPurged(),
    "Verify": lambda: ops.Verify(run_id="missing"),
    "ListGroups": lambda: ops.ListGroups(),
    # approvals
    "ListApprovals": lambda: ops.ListApprovals(),
    "GetApproval": lambda: ops.GetApproval(approval_id="missing"),
    "Decide": lambda: ops.Decide(approval_id="missing", decision="approve"),
    "Revoke": lambda: ops.Revoke(approval_id="missing", approver="ann", reason="r"),
    "Reassign": lambda: ops.Reassign(
        approval_id="missing", from_approver="ann", to_approver="bob", reason="r"
    ),
    "AddToGroup": lambda: ops.AddToGroup(group="matrix", members=["member"]),
    "RemoveFromGroup": lambda: ops.RemoveFromGroup(group="matrix", members=["member"]),
    # starting and changing runs
    "Start": lambda: ops.Start(workflow="no_such_workflow"),
    "StartRun": lambda: ops.StartRun(workflow="no_such_workflow"),
    "SignalWithStart": lambda: ops.SignalWithStart(
        workflow="no_such_workflow", input=None, run_id="sws", signal="go"
    ),
    "Signal": lambda: ops.Signal(run_id="missing", signal="go"),
    "Update": lambda: ops.Update(run_id="missing", update="u", timeout=1.0),
    "Cancel": lambda: ops.Cancel(run_id="missing", reason="r"),
    "Terminate": lambda: ops.Terminate(run_id="missing", reason="r"),
    "Pause": lambda: ops.Pause(run_id="missing", reason="r"),
    "Resume": lambda: ops.Resume(run_id="missing", reason="r"),
    "Fork": lambda: ops.Fork(run_id="missing", reason="r"),
    "Retry": lambda: ops.Retry(run_id="missing", reason="r"),
    "Skip": lambda: ops.Skip(run_id="missing", step="1", reason="r"),
    "UpdateInput": lambda: ops.UpdateInput(run_id="missing", reason="r", data={"a": 1}),
    "Migrate": lambda: ops.Migrate(run_id="missing", to_version=2, reason="r"),
    "MigrateAll": lambda: ops.MigrateAll(
        definition="missing", from_version=1, to_version=2, reason="r"
    ),
    "Publish": lambda: ops.Publish(definition={"name": "matrix"}),
    "PurgeRuns": lambda: ops.PurgeRuns(older_than_seconds=86400, dry_run=True),
    "ConfigureQueue": lambda: queues.ConfigureQueue(queue="matrix", concurrency=1),
    "CreateSchedule": lambda: sch.CreateSchedule(
        schedule_id="matrix", workflow="no_such_workflow", every=3600.0
    ),
    "PauseSchedule": lambda: sch.PauseSchedule(schedule_id="missing"),
    "ResumeSchedule": lambda: sch.ResumeSchedule(schedule_id="missing"),
    "DeleteSchedule": lambda: sch.DeleteSchedule(schedule_id="missing"),
    "BackfillSchedule": lambda: sch.BackfillSchedule(schedule_id="missing", start=0, end=0),
    "TriggerSchedule": lambda: sch.TriggerSchedule(schedule_id="missing"),
    # the tenant's keys, users, webhook sources and encryption
    "CreateKey": lambda: ops.CreateKey(principal="newcomer", roles=["viewer"]),
    "ListKeys": lambda: ops.ListKeys(),
    "RevokeKey": lambda: ops.RevokeKey(key_id="missing"),
    "CreateUser": lambda: ops.CreateUser(user="newcomer", roles=["viewer"], password=PASSWORD),
    "ListUsers": lambda: ops.ListUsers(),
    "DisableUser": lambda: ops.DisableUser(user="missing"),
    "SetPassword": lambda: ops.SetPassword(user="missing", password=PASSWORD),
    "CreateWebhookSource": lambda: wh.CreateWebhookSource(
        source=f"matrix-{uuid.uuid4().hex[:8]}",
        signal="s",
        correlate_key="k",
        correlate_path="$.k",
    ),
    "ListWebhookSources": lambda: wh.ListWebhookSources(),
    "DeleteWebhookSource": lambda: wh.DeleteWebhookSource(source="missing"),
    "ReEncrypt": lambda: ops.ReEncrypt(dry_run=True),
    "SealLegacy": lambda: ops.SealLegacy(dry_run=True),
    "GetTenant": lambda: ops.GetTenant(),
    # the platform operator's
    "CreateTenant": lambda: ops.CreateTenant(tenant=f"matrix-{uuid.uuid4().hex[:8]}"),
    "ListTenants": lambda: ops.ListTenants(),
    "SetQuotas": lambda: ops.SetQuotas(tenant="missing", quotas={"max_concurrent_runs": 5}),
    "DisableTenant": lambda: ops.DisableTenant(tenant="missing"),
    "EnableTenant": lambda: ops.EnableTenant(tenant="missing"),
    "DeleteTenant": lambda: ops.DeleteTenant(tenant="missing"),
    # open to anyone: what they carry authenticates
    "ResolveCredential": lambda: ops.ResolveCredential(token="bogus.token"),
    "SignIn": lambda: ops.SignIn(tenant=TENANT, user="nobody", password="wrong password"),
    "ResolveSession": lambda: ops.ResolveSession(token="bogus"),
    "SignOut": lambda: ops.SignOut(token="bogus"),
    "DeliverWebhook": lambda: wh.DeliverWebhook(source="missing", headers={}, body=b"{}"),
}


def caller(engine: wp.Engine, who: str) -> Principal:
    if who == LOCAL:
        return engine.aio.local(TENANT)
    if who == ANONYMOUS:
        return Principal.anonymous()
    roles = frozenset() if who == NO_ROLE else frozenset({Role(who)})
    return Principal(TENANT, f"matrix-{who.replace(' ', '-')}", roles)


def allowed(engine: wp.Engine, request: ops.Request[Any], principal: Principal) -> bool:
    """Whether the door let `principal` send `request` past its rights (whatever followed)."""
    try:
        engine.execute(request, principal)
    except wp.PermissionDenied:
        return False
    except wp.WaypostError:
        return True
    return True


def test_the_role_table_lists_every_operation_with_its_declared_roles(tmp_path: Path) -> None:
    table = documented()
    served = door_operations(tmp_path)
    assert sorted(set(served) - set(table)) == [], "operations the role table does not list"
    assert sorted(set(table) - set(served)) == [], "the role table lists what the door lacks"
    assert sorted(set(served) - set(SAMPLES)) == [], "operations this test cannot send"
    for name, kind in served.items():
        declared = {r.value for r in kind.roles} | {Role.ADMIN.value, LOCAL}
        if kind.open_to_anonymous:
            declared = set(CALLERS)
        keys = table[name] - {NO_ROLE, ANONYMOUS}
        if name in (
            "CreateTenant",
            "ListTenants",
            "SetQuotas",
            "DisableTenant",
            "EnableTenant",
            "DeleteTenant",
        ):
            # Declared admin, and refused to every caller but the local one in `checked`.
            assert declared == {Role.ADMIN.value, LOCAL} and keys == {LOCAL}, name
            continue
        assert declared - {NO_ROLE, ANONYMOUS} == keys, f"{name}: declared {sorted(declared)}"


def test_the_door_allows_each_operation_to_exactly_the_callers_the_table_names(
    make_engine: Any,
) -> None:
    engine = make_engine()
    table = documented()
    wrong: list[str] = []
    with engine.running():
        for name in sorted(table):
            for who in CALLERS:
                got = allowed(engine, SAMPLES[name](), caller(engine, who))
                if got != (who in table[name]):
                    wrong.append(f"{name} by {who}: {'allowed' if got else 'refused'}")
    assert wrong == []


@wp.workflow(name="matrix_ask")
async def ask(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=["ann", "bob"]))
    return decision.outcome


def test_only_an_operator_or_an_admin_reassigns_or_revokes_an_approver(
    make_engine: Any, tmp_path: Path
) -> None:
    mailbox = Mailbox(tmp_path / "notes.jsonl")
    engine = make_engine(ask, notifier=FileSender(mailbox.path))
    with engine.running():
        run = engine.start(ask, tenant="default", started_by="sam")
        approval = pending_approval(engine, run.run_id)
        for approver in ("ann", "bob"):  # both asked: their credentials are all issued
            mailbox.wait(approval.approval_id, approver)

        def credentials() -> list[tuple[Any, ...]]:
            return db_query(
                engine.url,
                "SELECT approver, status FROM approval_credentials WHERE approval_id = ?"
                " ORDER BY approver, credential_id",
                (approval.approval_id,),
            )

        before = credentials()
        requests = (
            ops.Revoke(approval_id=approval.approval_id, approver="bob", reason="away"),
            ops.Reassign(
                approval_id=approval.approval_id,
                from_approver="bob",
                to_approver="mallory",
                reason="away",
            ),
        )
        for role in (Role.STARTER, Role.APPROVER, Role.AUDITOR, Role.VIEWER, None):
            roles = frozenset() if role is None else frozenset({role})
            who = Principal("default", "mallory", roles)
            for request in requests:
                with pytest.raises(wp.PermissionDenied, match="needs one of the roles operator"):
                    engine.execute(request, who)
        # Nothing changed: the policy, the credentials, the history.
        assert engine.approval(approval.approval_id).policy == approval.policy
        assert credentials() == before
        assert of_type(engine.history(run.run_id), "ApproversChanged") == []
        # An operator may (and an admin).
        engine.execute(requests[0], Principal("default", "olga", frozenset({Role.OPERATOR})))
        assert "bob" in engine.approval(approval.approval_id).policy["excluded"]
        engine.execute(
            ops.Reassign(
                approval_id=approval.approval_id,
                from_approver="ann",
                to_approver="cid",
                reason="away",
            ),
            Principal("default", "ada", frozenset({Role.ADMIN})),
        )
        changed = of_type(engine.history(run.run_id), "ApproversChanged")
        assert [(e.data["revoked"], e.data["added"], e.data["by"]) for e in changed] == [
            ("bob", None, "olga"),
            ("ann", "cid", "ada"),
        ]
