"""`AsyncEngine`: the public face of an engine for asyncio applications.

It wires the rooms together — the store, the machinery that moves runs
(`waypost.engine`), the features built on it (`waypost.features`) — and puts
every operation behind the one door (`door.py`). Its methods only build a
request and hand it to the door as the local principal of the tenant they
name; the sync `Engine` (`sync.py`) is derived from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from waypost.engine.faults import FaultPlan, NoFaults
from waypost.engine.runner import Runner
from waypost.engine.settings import Settings
from waypost.features.access import Access
from waypost.features.approvals import Approvals, Directory
from waypost.features.definitions import Definitions
from waypost.features.encryption import Encryption
from waypost.features.fork import Forks
from waypost.features.http import SecretSource, make_http_activity
from waypost.features.operator import OperatorCommands
from waypost.features.outbox import Outbox
from waypost.features.repairs import Repairs
from waypost.features.retention import Retention
from waypost.features.runs import Runs
from waypost.features.schedules import Schedules
from waypost.features.sealing import Sealing
from waypost.features.senders import Sender
from waypost.features.updates import Updates
from waypost.features.users import Accounts
from waypost.features.webhooks import Webhooks
from waypost.model import operations as ops, webhooks as wh
from waypost.model.chain import Chain, chain_from_environment
from waypost.model.codec import Codec, JsonCodec
from waypost.model.definitions import Limits
from waypost.model.encryption import Keys, keys_from_environment
from waypost.model.events import Event
from waypost.model.identity import Principal
from waypost.model.observe import NO_OBSERVER, Observer
from waypost.model.quotas import Quotas
from waypost.model.records import (
    ApprovalInfo,
    CredentialView,
    DecisionReceipt,
    DefinitionInfo,
    MigrationReport,
    RunInfo,
    RunPage,
    Started,
    WebhookDelivered,
)
from waypost.model.status import RunStatus
from waypost.runtime.registry import Registry
from waypost.store import open_store
from waypost.store.base import Store

from .calls import Calls
from .door import Door, Handler, handlers_of
from .handles import AsyncRunHandle as AsyncRunHandle
from .local import os_user, seconds

T = TypeVar("T")


# The HTTP server's default address: approval links open its approval page.
DEFAULT_APPROVAL_URL = "http://127.0.0.1:8080"


class AsyncEngine(Calls):
    """The waypost engine for asyncio applications.

    `url` is `sqlite:///path.db` (default `sqlite:///waypost.db`). Options:
    `lease` (how long a task stays leased without renewal, so how soon a
    crashed engine's work is taken over), `poll_interval` (how often idle
    workers look for work from other processes and the scheduler looks for
    due timers), `cache_size` (live runs kept in memory), `max_activities`
    (attempts running at once), `max_workflows` (workflow tasks claimed from
    the queue and in progress at once; runs this engine starts itself do not
    wait for it), `activity_threads` (threads for sync
    activities), `shutdown_grace` (how long a stop waits for running
    attempts), `cancel_grace` (how long a cancelled run's code may go on
    cleaning up before the run ends `cancelled` anyway; None: no limit).
    `serve_code` (False: registered code answers queries, its tasks run elsewhere).
    Workflows defined as data: `serve_definitions` (run the
    workflow tasks of definition runs here, default True), `http_allow` (hosts
    `http` steps may call, e.g. `["api.example.com", "*.example.org"]`; an
    engine without it does not take `http` steps), `http_secrets` (`(tenant, name)
    -> secret` for `http` steps, asked only for the run's tenant; by default the
    environment variable `WAYPOST_TENANT_SECRET_<tenant>__<name>`, see
    `waypost.features.http.secret_env_name`), `limits`
    (what definitions may contain: one `Limits` for all tenants, a mapping of
    tenant -> `Limits` where "*" is the fallback, or a function of the tenant).
    `chain`: how histories are hashed and checked (`waypost.model.chain.Chain`
    with the chain keys, HMAC-SHA256 under secrets the database does not hold);
    by default from the environment (`WAYPOST_CHAIN_KEYS` or
    `WAYPOST_CHAIN_KEYS_FILE`), plain SHA-256 when it names no key.
    `encryption`: the keys payloads are encrypted with at rest (`waypost.Keys`);
    by default from `WAYPOST_ENCRYPTION_KEYS` (`id:base64,...`, the first
    current) or `WAYPOST_ENCRYPTION_KEYS_FILE`, none (plaintext) when unset.
    `quotas`: every tenant's quotas (`waypost.Quotas`) unless its row overrides
    them (`set_quotas`); by default `Quotas()`. `retention_every`: how often this engine
    purges the finished runs older than their tenant's `retention_days` (None: never).
    `max_lapses` (default 5): a run whose
    workflow task or activity step lost its engine that many times is suspended.
    `observer`: told what is worth counting (`waypost.model.observe.Observer`; the
    Prometheus one is `waypost.observability.Metrics`).
    The compute lane (guide, *Isolation between tenants*): `compute_threads` (2),
    `compute_cpu_limit` (10 s of CPU a call; None: none), `max_compute_waiting` (8).

    Every operation goes through `execute(request, principal)`; the methods
    below act as the local principal of the tenant they name.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        store: Store | None = None,
        codec: Codec | None = None,
        lease: timedelta | float = timedelta(seconds=30),
        poll_interval: timedelta | float = timedelta(milliseconds=500),
        cache_size: int = 1000,
        max_activities: int = 100,
        max_workflows: int = 128,
        activity_threads: int = 32,
        shutdown_grace: timedelta | float = timedelta(seconds=30),
        cancel_grace: timedelta | float | None = timedelta(seconds=30),
        clock: Callable[[], float] | None = None,
        worker_id: str | None = None,
        faults: FaultPlan | None = None,
        directory: Directory | None = None,
        notifier: Sender | None = None,
        approval_url: str = DEFAULT_APPROVAL_URL,
        serve_definitions: bool = True,
        serve_code: bool = True,
        http_allow: Sequence[str] | None = None,
        http_secrets: SecretSource | None = None,
        limits: Limits | Mapping[str, Limits] | Callable[[str], Limits] | None = None,
        chain: Chain | None = None,
        quotas: Quotas | None = None,
        retention_every: timedelta | float | None = timedelta(hours=1),
        encryption: Keys | None = None,
        max_lapses: int = 5,
        observer: Observer | None = None,
        compute_threads: int = 2,
        compute_cpu_limit: timedelta | float | None = timedelta(seconds=10),
        max_compute_waiting: int = 8,
    ) -> None:
        chain = chain if chain is not None else chain_from_environment(os.environ)
        self.store: Store = store if store is not None else open_store(url)
        self.store.use_chain(chain)
        self.store.use_keys(encryption or keys_from_environment(os.environ))
        self.url = self.store.url
        self.registry = Registry()
        if http_allow:
            # Only engines allowed to call out serve `http` steps of definitions.
            self.registry.add(make_http_activity(allow=http_allow, secrets=http_secrets))
        self.codec: Codec = codec or JsonCodec()
        self.settings = Settings(
            owner=worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}",
            clock=clock or time.time,
            faults=faults or NoFaults(),
            lease=seconds(lease),
            poll_interval=seconds(poll_interval),
            cache_size=cache_size,
            max_activities=max_activities,
            max_workflows=max_workflows,
            activity_threads=activity_threads,
            shutdown_grace=seconds(shutdown_grace),
            cancel_grace=None if cancel_grace is None else seconds(cancel_grace),
            serve_definitions=serve_definitions,
            serve_code=serve_code,
            chain=chain,
            quotas=quotas if quotas is not None else Quotas(),
            retention_every=None if retention_every is None else seconds(retention_every),
            max_lapses=max_lapses,
            observer=observer if observer is not None else NO_OBSERVER,
            compute_threads=compute_threads,
            compute_cpu_limit=None if compute_cpu_limit is None else seconds(compute_cpu_limit),
            max_compute_waiting=max_compute_waiting,
        )
        self.owner = self.settings.owner
        self.clock = self.settings.clock
        self.faults = self.settings.faults
        self._runner = Runner(self.store, self.registry, self.codec, self.settings)
        self._approvals = Approvals(self._runner, directory)
        self._outbox = Outbox(self._runner, self._approvals, notifier, approval_url)
        self._definitions = Definitions(self._runner, limits)
        self._runner.quotas.payload_default = self._definitions.payload_default
        self._runs = Runs(self._runner, self._definitions)
        self._access = Access(self._runner, self._definitions.payload_limit)
        self._accounts = Accounts(self._runner, self._access)
        self._webhooks = Webhooks(self._runner, self._definitions)
        self._retention = Retention(self._runner)
        self._operator = OperatorCommands(self._runner)
        self._forks = Forks(self._runner)
        self._encryption = Encryption(self._runner)
        self._sealing = Sealing(self._runner)
        self._repairs = Repairs(self._runner, self._definitions)
        self._schedules = Schedules(self._runner, self._runs)
        self._runner.scheduler.add_loop("schedules", self._schedules.fire_forever)
        self._runner.scheduler.on_nudge(self._schedules.wake)
        self._runner.add_source(self._definitions)
        self._runner.on_approvals(self._outbox.wake)
        self._approvals.on_change(self._outbox.wake)
        self._runner.scheduler.add_loop("outbox", self._outbox.dispatch_forever)
        self._runner.scheduler.add_loop("retention", self._retention.retain_forever)
        self._runner.scheduler.on_topic("outbox", self._outbox.wake)
        self._door = Door(self._handlers(), self.settings.observer)
        self._user = os_user()
        self._opened = False

    def _handlers(self) -> dict[type[ops.Request[Any]], Handler]:
        """Which room carries out each operation: the methods its rooms mark `@handles`."""
        return handlers_of(
            self._runs,
            self._approvals,
            self._definitions,
            self._access,
            self._access.tenants,
            self._access.queues,
            self._accounts,
            self._webhooks,
            self._retention,
            self._operator,
            self._forks,
            self._encryption,
            self._sealing,
            self._repairs,
            self._schedules,
            Updates(self._runner, self._definitions),
        )

    # == the door =============================================================
    async def execute(self, request: ops.Request[T], principal: Principal) -> T:
        """Carry out an operation for `principal` (see `waypost.model.operations`)."""
        await self.open()
        return await self._door.execute(request, principal)

    def forward(self, kinds: Sequence[type[ops.Request[Any]]], handler: Handler) -> None:
        """Have `handler` carry out requests of `kinds` after the door's checks (the server
        hands a tenant's expensive requests to its compute processes)."""
        self._door.reroute(kinds, handler)

    def local(self, tenant: str = "default") -> Principal:
        """The principal this process acts as in `tenant`: every role, named after its user."""
        return Principal.local_for(tenant, self._user)

    async def _local(self, request: ops.Request[T], tenant: str, /) -> T:
        return await self.execute(request, self.local(tenant))

    async def check_store(self) -> None:
        """Raise `StoreError` unless the database answers a read (a readiness probe)."""
        await self.store.live_workers(self.clock())

    # == lifecycle ============================================================
    async def open(self) -> AsyncEngine:
        if not self._opened:
            await self.store.open()
            self._opened = True
        return self

    async def close(self) -> None:
        await self._runner.close()
        self._accounts.close()
        if self._opened:
            await self.store.close()
            self._opened = False

    async def abandon(self) -> None:
        """Stop at once, as a process that crashed would (for tests and simulations).

        Everything in motion is cancelled; nothing is released or written, so
        this engine's leases lapse and other engines take its work over. Then
        the store's connections are closed.
        """
        await self._runner.abandon()
        if self._opened:
            self._opened = False
            with contextlib.suppress(Exception):
                await self.store.close()

    async def __aenter__(self) -> AsyncEngine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def register(self, *items: Any) -> AsyncEngine:
        """Make workflows and activities (decorated functions) known to this engine."""
        for item in items:
            self.registry.add(item)
        if self._runner.accepting:
            self._runner.scheduler.refresh_queues()
        return self

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[AsyncEngine]:
        """Run workers and the scheduler in this process for the block."""
        await self.start_serving()
        try:
            yield self
        finally:
            await self.stop_serving()

    async def start_serving(self) -> None:
        await self.open()
        await self._runner.start_serving()

    async def stop_serving(self, grace: float | None = None) -> None:
        """Stop taking work; let running attempts finish for up to `grace` seconds."""
        await self._runner.stop_serving(grace)

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set (or the task is cancelled), then stop gracefully."""
        await self.start_serving()
        try:
            await (stop.wait() if stop is not None else asyncio.Event().wait())
        finally:
            await self.stop_serving()

    @property
    def accepting(self) -> bool:
        """Whether this engine is serving (taking work into this process)."""
        return self._runner.accepting

    def nudge(self) -> None:
        """Look for work and due timers now (for a clock that was moved by hand)."""
        self._runner.scheduler.nudge()

    async def stats(self) -> dict[str, Any]:
        """What this engine holds in memory and the store's commit counts."""
        return self._runner.stats()

    def limits_for(self, tenant: str) -> Limits:
        """What `tenant`'s definitions may contain (the engine's `limits` option)."""
        return self._definitions.limits_for(tenant)

    # == runs =================================================================
    async def start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        tenant: str = "default",
        version: str | int | None = None,
        started_by: str | None = None,
        priority: int = 0,
        concurrency_key: str | None = None,
        dedup_id: str | None = None,
        queue: str | None = None,
        run_timeout: timedelta | float | None = None,
    ) -> AsyncRunHandle:
        """Start a run; with `run_id`, starting the same run again returns it.

        `started_by` names the principal who started it (recorded in the history;
        by default that principal may not approve the run's approvals); without it, the
        run is started for this process's own principal, named after the OS user. `priority`
        (-1000..1000): the run's tasks are claimed before the tenant's tasks of lower
        priority. `concurrency_key` (a customer's id, say): a queue's `key_concurrency`
        bounds the attempts running at once of the runs with one key. `dedup_id`:
        while a run started with it has not finished, a start with it returns that run.
        `queue` (default: the workflow's `queue`, if any): the run is `enqueued` until the
        queue's limits admit it. `run_timeout` (a timedelta or seconds; default: the
        workflow's own `run_timeout`): a run that has not ended that long after its start
        ends `failed` with a `RunTimedOut` error. Over a start quota of the tenant:
        `QuotaExceeded`.

        A name that no registered workflow has starts a run of the tenant's
        published definition of that name: the newest version, or `version`.
        Its input must satisfy the definition's input schema (`InputError`).
        """
        request = ops.Start(
            workflow=workflow,
            input=input,
            run_id=run_id,
            version=version,
            started_by=started_by,
            priority=priority,
            concurrency_key=concurrency_key,
            dedup_id=dedup_id,
            queue=queue,
            run_timeout=ops.run_timeout_seconds(run_timeout),
        )
        return AsyncRunHandle(self, await self._local(request, tenant), tenant)

    async def list_runs(
        self,
        *,
        tenant: str | None = "default",
        status: str | RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first; `tenant=None` lists every tenant's. `cursor` (a
        `next_cursor` of `page_runs`) lists the runs after that page's."""
        request = ops.ListRuns(
            status=status,
            workflow=workflow,
            limit=limit,
            all_tenants=tenant is None,
            cursor=cursor,
        )
        return await self._local(request, tenant or "default")

    async def history(self, run_id: str, *, tenant: str = "default") -> list[Event]:
        """The run's events, in order."""
        return await self._local(ops.GetHistory(run_id=run_id), tenant)

    async def result(
        self, run_id: str, *, timeout: float | None = None, tenant: str = "default"
    ) -> Any:
        """Wait for the run to end; return its result or raise its error.

        A database that is briefly unreachable does not end the wait: it is
        retried until the timeout.
        """
        return await self._local(ops.AwaitResult(run_id=run_id, timeout=timeout), tenant)

    # == approvals ============================================================
    async def approvals(
        self,
        principal: str | None = None,
        status: str | None = "pending",
        *,
        tenant: str = "default",
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalInfo]:
        """Approvals in `tenant` (pending by default); with `principal`, those they may decide."""
        return await self._local(
            ops.ListApprovals(approver=principal, status=status, run_id=run_id, limit=limit), tenant
        )

    async def approval(self, approval_id: str, *, tenant: str = "default") -> ApprovalInfo:
        """One approval; `ApprovalNotFound` (a `LookupError`) if this tenant has none by that id."""
        return await self._local(ops.GetApproval(approval_id=approval_id), tenant)

    async def decide(
        self,
        approval_id: str,
        token: str,
        principal: str,
        decision: str,
        comment: str = "",
        *,
        tenant: str = "default",
        auth: str = "api",
    ) -> DecisionReceipt:
        """Decide ("approve" or "reject") as `principal`, with their credential `token`.

        `auth` says how the caller authenticated `principal` (recorded in the audit).
        Raises `InvalidCredential` or `DecisionRefused`; both are recorded too.
        """
        request = ops.Decide(
            approval_id=approval_id,
            token=token,
            approver=principal,
            decision=decision,
            comment=comment,
            auth=auth,
        )
        return await self._local(request, tenant)

    async def revoke(
        self, approval_id: str, principal: str, *, by: str, reason: str, tenant: str = "default"
    ) -> None:
        """Take `principal` off a pending approval: their credentials stop working at once.

        `by` (who does it) and `reason` are recorded in the run's history.
        """
        await self._local(
            ops.Revoke(approval_id=approval_id, approver=principal, by=by, reason=reason), tenant
        )

    async def reassign(
        self,
        approval_id: str,
        from_principal: str,
        to_principal: str,
        *,
        by: str,
        reason: str,
        tenant: str = "default",
    ) -> None:
        """Replace an approver of a pending approval: the old one's credentials stop
        working, the new one is notified. `by` and `reason` are recorded."""
        request = ops.Reassign(
            approval_id=approval_id,
            from_approver=from_principal,
            to_approver=to_principal,
            by=by,
            reason=reason,
        )
        await self._local(request, tenant)

    async def add_to_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        """Add members to a group of the built-in directory; returns how many were new."""
        return await self._local(ops.AddToGroup(group=group, members=list(principals)), tenant)

    async def remove_from_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        """Remove members from a group of the built-in directory; returns how many were."""
        return await self._local(ops.RemoveFromGroup(group=group, members=list(principals)), tenant)

    async def groups(self, *, tenant: str = "default") -> dict[str, list[str]]:
        """The built-in directory's groups of `tenant` and their members."""
        return await self._local(ops.ListGroups(), tenant)

    # == definitions ==========================================================
    async def publish(
        self,
        definition: str | bytes | dict[str, Any],
        *,
        tenant: str = "default",
        by: str | None = None,
        limits: Limits | None = None,
    ) -> DefinitionInfo:
        """Validate a definition (YAML/JSON text or a dict) and freeze it as a version.

        Publishing content identical to a published version returns that version.
        Raises `DefinitionError` listing every problem; then nothing is published.
        Activity names are checked against this engine's registered activities, if
        it has any.
        """
        return await self._local(ops.Publish(definition=definition, by=by, limits=limits), tenant)

    async def definitions(self, *, tenant: str = "default") -> list[DefinitionInfo]:
        """Every published version of every definition of `tenant`."""
        return await self._local(ops.ListDefinitions(), tenant)

    async def definition(
        self, name: str, version: int | None = None, *, tenant: str = "default"
    ) -> DefinitionInfo:
        """One version (the newest by default); `DefinitionNotFound` (a `LookupError`) if none."""
        return await self._local(ops.GetDefinition(definition=name, version=version), tenant)

    async def migrate(
        self,
        run_id: str,
        to_version: int,
        mapping: Mapping[str, str] | None = None,
        reason: str = "",
        dry_run: bool = False,
        *,
        by: str | None = None,
        tenant: str = "default",
    ) -> MigrationReport:
        """Move a waiting definition run to another version of its definition.

        `mapping` takes the step where the run waits to a step of the new version
        (by default the step of the same id). The move is checked first: the run
        must wait at a top-level approval or wait step, and the new version must be
        able to go on from the mapped step with the data the run has. The report
        says whether it can and why not; with `dry_run` nothing is written.
        Otherwise a RunMigrated event records from/to version, the mapping, `by`
        (by default the user running this process) and `reason`; an open
        approval of the step is revoked at once (its credentials die) and the
        run enters the mapped step afresh.
        """
        request = ops.Migrate(
            run_id=run_id,
            to_version=to_version,
            mapping=mapping or {},
            reason=reason,
            dry_run=dry_run,
            by=by,
        )
        return await self._local(request, tenant)

    async def migrate_all(
        self,
        definition: str,
        from_version: int,
        to_version: int,
        mapping: Mapping[str, str] | None = None,
        reason: str = "",
        dry_run: bool = False,
        *,
        by: str | None = None,
        tenant: str = "default",
    ) -> list[MigrationReport]:
        """`migrate` every unfinished run of one version of a definition; a report per run."""
        request = ops.MigrateAll(
            definition=definition,
            from_version=from_version,
            to_version=to_version,
            mapping=mapping or {},
            reason=reason,
            dry_run=dry_run,
            by=by,
        )
        return await self._local(request, tenant)

    # == tenants and API keys =================================================
    async def authenticate(self, key: str) -> Principal:
        """The principal an API key stands for: its tenant, its principal and its roles.

        Raises `Unauthenticated` (always with the same message, never quoting the key)
        for a key that is malformed, unknown, revoked or expired, or whose tenant no
        longer exists.
        """
        await self.open()
        return await self._access.authenticate(key)

    # == the approval page ====================================================
    async def resolve_credential(self, token: str) -> CredentialView:
        """What an approval link's `token` may decide now (the approval page shows it).

        Asked as nobody in particular: the token alone authenticates, in whatever
        tenant it was issued. Nothing changes (opening a link decides nothing).
        Raises the one `InvalidCredential` for every token that cannot decide now.
        """
        view: CredentialView = await self.execute(
            ops.ResolveCredential(token=token), Principal.anonymous()
        )
        return view

    # == runs for the HTTP API ================================================
    async def start_run(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        tenant: str = "default",
        version: str | int | None = None,
        started_by: str | None = None,
        priority: int = 0,
        concurrency_key: str | None = None,
        dedup_id: str | None = None,
        queue: str | None = None,
        run_timeout: timedelta | float | None = None,
    ) -> Started:
        """Start a run as `start` does, and say whether this call created it.

        `Started.created` is False when the run (same `run_id`, workflow and input)
        existed already; of concurrent starts of one run exactly one created it. A
        different workflow or input under that `run_id` raises `RunIdConflict`.

        Besides a registered workflow and a published definition, a name may be a
        workflow that only running workers serve (another process registered it):
        the run takes the newest version they serve, or `version`, with `input`
        stored as given (JSON). `UnknownWorkflow` if none of the three has it.
        """
        request = ops.StartRun(
            workflow=workflow,
            input=input,
            run_id=run_id,
            version=version,
            started_by=started_by,
            priority=priority,
            concurrency_key=concurrency_key,
            dedup_id=dedup_id,
            queue=queue,
            run_timeout=ops.run_timeout_seconds(run_timeout),
        )
        return await self._local(request, tenant)

    async def page_runs(
        self,
        *,
        tenant: str = "default",
        status: str | RunStatus | None = None,
        workflow: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> RunPage:
        """One page of `tenant`'s runs, newest first; `next_cursor` asks for the next page
        (None after the last). Runs created while paging come before the first page, so
        later pages neither repeat nor skip a run. A cursor this API did not give out
        raises `InvalidRequest` (field "cursor")."""
        request = ops.PageRuns(status=status, workflow=workflow, cursor=cursor, limit=limit)
        return await self._local(request, tenant)

    # == signal-with-start and webhooks by correlation ========================
    async def signal_with_start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str,
        signal: str,
        payload: Any = None,
        tenant: str = "default",
        version: str | int | None = None,
        started_by: str | None = None,
    ) -> Started:
        """Start run `run_id` and deliver `signal` to it, or deliver `signal` to the run that
        has that id (its input is not compared); `Started.created` says which. Atomic: of
        concurrent calls one creates the run and every signal arrives. A run of that id of
        another workflow raises `RunIdConflict`, a finished one `RunNotActive`."""
        request = ops.SignalWithStart(
            workflow, input, run_id, signal, payload, version=version, started_by=started_by
        )
        return await self._local(request, tenant)

    async def deliver_webhook(
        self, source: str, headers: Mapping[str, str], body: bytes
    ) -> WebhookDelivered:
        """Deliver a webhook as `POST /v1/webhooks/{source}` does, `source` being the URL id
        of the source (`url_id`; the signature authenticates it; `WebhookRefused`,
        `NoRunWaiting`, `InvalidRequest` otherwise)."""
        request = wh.DeliverWebhook(source, headers, body)
        done: WebhookDelivered = await self.execute(request, Principal.anonymous())
        return done

    # == quotas and fair scheduling ===========================================
