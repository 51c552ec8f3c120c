"""The store Protocol: the domain verbs the engine needs from a database.

Every state change of a run goes through `commit_run`: one atomic transaction that
appends events (under a sequence check), writes the snapshot, and adds or removes the
run's tasks and timers. Its conditions (the last sequence number, the workflow task's
fence, the activity task's fence) are what make stale workers and racing engines
harmless: a failed condition changes nothing and says which one failed.

Times are seconds since the epoch (floats) everywhere.

A verb that a function of `transactions/` does is declared by that function
(`@verb_of(fn)`, verbs.py): its parameters and result are the function's, written once;
the declaration here says what it does. The records the verbs take and return are in
commits.py, rows.py and the modules of each topic; they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from waypost.model.chain import Chain
from waypost.model.encryption import Keys

from . import transactions as txn
from .audits import LegacySeal as LegacySeal, RunAudit as RunAudit
from .children import ChildLink as ChildLink
from .commits import (
    NO_LIMITS as NO_LIMITS,
    ClaimedTask as ClaimedTask,
    CommitResult as CommitResult,
    Conflict as Conflict,
    CorrelatedDelivery as CorrelatedDelivery,
    CreateRunResult as CreateRunResult,
    DeliveryResult as DeliveryResult,
    FiredTimer as FiredTimer,
    LeaseRenewal as LeaseRenewal,
    LeaseState as LeaseState,
    Limits as Limits,
    RunCommit as RunCommit,
    RunOutlook as RunOutlook,
    RunRecord as RunRecord,
    Snapshot as Snapshot,
    TaskRef as TaskRef,
    TaskState as TaskState,
    WorkerRecord as WorkerRecord,
    WorkflowTaskOp as WorkflowTaskOp,
)
from .effects import (
    ActivityTaskOp as ActivityTaskOp,
    NewActivityTask as NewActivityTask,
    NewRun as NewRun,
    NewTimer as NewTimer,
)
from .rows import (
    ApiKeyRecord as ApiKeyRecord,
    ApprovalRecord as ApprovalRecord,
    ApproverChange as ApproverChange,
    CredentialLookup as CredentialLookup,
    CredentialRecord as CredentialRecord,
    DecideRequest as DecideRequest,
    DecideResult as DecideResult,
    DefinitionRecord as DefinitionRecord,
    KeyCreation as KeyCreation,
    NewApiKey as NewApiKey,
    NewApproval as NewApproval,
    NewCorrelation as NewCorrelation,
    NewCredential as NewCredential,
    OutboxItem as OutboxItem,
    PurgeCounts as PurgeCounts,
    PurgedRunRecord as PurgedRunRecord,
    QueueGauge as QueueGauge,
    Refusal as Refusal,
    ResealCounts as ResealCounts,
    RunCount as RunCount,
    TenantRecord as TenantRecord,
)
from .transactions import schedules, search, tenants, users
from .verbs import verb_of
from .webhooks import WebhookSourceRecord as WebhookSourceRecord


class Store(Protocol):
    """What the engine needs from a database; SQLite and PostgreSQL implement it."""

    url: str

    @property
    def chain(self) -> Chain:
        """How the events this store appends are hashed (plain unless `use_chain` was called)."""
        ...

    def use_chain(self, chain: Chain) -> None:
        """Hash appended events with `chain` (keyed or plain); called before `open`."""
        ...

    @property
    def keys(self) -> Keys | None:
        """What payloads are encrypted with (None: stored as plaintext)."""
        ...

    def use_keys(self, keys: Keys | None) -> None:
        """Encrypt the payloads written from now on with `keys`; called before `open`."""
        ...

    def use_idle_probe(self, nearly_idle: Callable[[], bool]) -> None:
        """Ask `nearly_idle()` whether the engine using this store has next to nothing in
        hand: a write with nothing to be grouped with may then run at once."""
        ...

    async def open(self) -> None:
        """Connect, and bring the schema up to date (safe when several processes start)."""
        ...

    async def close(self) -> None: ...

    @verb_of(txn.create_run)
    async def create_run(self, *args: Any, **kwargs: Any) -> Any:
        """Create a run with its first event and workflow task, or return the existing one."""
        ...

    async def commit_run(self, commit: RunCommit) -> CommitResult:
        """Apply one atomic change to a run, or nothing if a condition fails."""
        ...

    @verb_of(txn.claim_tasks)
    async def claim_tasks(self, *args: Any, **kwargs: Any) -> Any:
        """Lease due tasks of these queues to `owner` (fence + 1 each), up to the limits.

        Fair across tenants: each tenant with ready tasks gets a share, starting after
        `after_tenant` (the one served last), and a tenant's tasks go by priority, then
        oldest first. A tenant with its `max_concurrent_activities` (the `quotas`
        defaults with its overrides) in flight gets no activity task. With `lapsed`,
        workflow tasks whose lease lapsed (a crashed engine's) are claimed first.
        `asked`: `time.monotonic()` when `now` was read; a claim that waited is made at
        the time it lands (leases and deadlines count from then).
        """
        ...

    @verb_of(txn.renew_leases)
    async def renew_leases(self, *args: Any, **kwargs: Any) -> Any:
        """Extend leases the caller still holds (from the time the renewal lands, as
        `claim_tasks`); report lost ones and cancel requests."""
        ...

    @verb_of(txn.release_tasks)
    async def release_tasks(self, *args: Any, **kwargs: Any) -> Any:
        """Give back leased tasks that were never started, so others take them at once."""
        ...

    @verb_of(txn.retime_activity)
    async def retime_activity(self, *args: Any, **kwargs: Any) -> Any:
        """Time again from now an attempt leased by a write that landed late (its lease,
        deadlines; `store/landing.py`): its new deadline, or None if it is not held."""
        ...

    @verb_of(txn.expired_activities)
    async def expired_activities(self, *args: Any, **kwargs: Any) -> Any:
        """Leased activity tasks past their lease, deadline or heartbeat deadline."""
        ...

    @verb_of(txn.fire_due_timers)
    async def fire_due_timers(self, *args: Any, **kwargs: Any) -> Any:
        """Fire due timers once each: mark fired, append TimerFired, wake the run.

        A workflow task whose queue is in `queues` is claimed for `owner`.
        """
        ...

    @verb_of(txn.next_timer_at)
    async def next_timer_at(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.get_run)
    async def get_run(self, *args: Any, **kwargs: Any) -> Any:
        """The run's row; `BrokenRecord` if it fails its checks, unless not `checked`
        (what suspends such a run reads it anyway)."""
        ...

    @verb_of(txn.load_history)
    async def load_history(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.history_page)
    async def history_page(self, *args: Any, **kwargs: Any) -> Any:
        """Whether the run exists; its events after `after_seq`, at most `limit` of them
        and at most `max_bytes` of their data (one at least); whether more follow."""
        ...

    @verb_of(txn.list_runs)
    async def list_runs(self, *args: Any, **kwargs: Any) -> Any:
        """Up to `limit` runs (every tenant's if `tenant` is None), newest first; with
        `max_bytes`, no more than that of their stored payloads (one run at least), the
        runs left out never read."""
        ...

    @verb_of(txn.run_tasks)
    async def run_tasks(self, *args: Any, **kwargs: Any) -> Any:
        """The run's open tasks (for inspection and tests)."""
        ...

    @verb_of(txn.load_run)
    async def load_run(self, *args: Any, **kwargs: Any) -> Any:
        """The run's snapshot and its events after `after_seq`, read together."""
        ...

    @verb_of(txn.load_idle_run)
    async def load_idle_run(self, *args: Any, **kwargs: Any) -> Any:
        """`load_run`, and the fence of the run's workflow task if it is idle and in one
        of `queues` (else None), read together: a decision made on this history under
        that fence commits only if nobody took the task meanwhile."""
        ...

    @verb_of(txn.beat_worker)
    async def beat_worker(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.remove_worker)
    async def remove_worker(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.release_owner)
    async def release_owner(self, *args: Any, **kwargs: Any) -> Any:
        """A dead engine's leased tasks become due now and its worker row goes; how many."""
        ...

    @verb_of(txn.live_workers)
    async def live_workers(self, *args: Any, **kwargs: Any) -> Any: ...

    # -- pages of runs and what is in motion for them ---------------------------------
    @verb_of(txn.page_runs)
    async def page_runs(self, *args: Any, **kwargs: Any) -> Any:
        """Up to `limit` of the tenant's runs, newest first (by created_at, then run_id),
        after the position `after` (or from the newest), and no more than `max_bytes` of
        their stored payloads (one run at least); whether more follow. Read through an
        index, the sizes first: the runs a page leaves out are never read."""
        ...

    @verb_of(search.search_runs)
    async def search_runs(self, *args: Any, **kwargs: Any) -> Any:
        """The run of id `text`, runs whose id starts with it, runs waiting with it as a
        correlation value: up to `limit`, newest first, and no more than `max_bytes` of
        their stored payloads (one run at least)."""
        ...

    @verb_of(search.count_runs)
    async def count_runs(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.run_outlooks)
    async def run_outlooks(self, *args: Any, **kwargs: Any) -> Any:
        """The tasks and pending approvals of some of the tenant's runs, by run id."""
        ...

    # -- approvals, the directory and the outbox --------------------------------
    @verb_of(txn.get_approval)
    async def get_approval(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.list_approvals)
    async def list_approvals(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.get_credential)
    async def get_credential(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.approval_votes)
    async def approval_votes(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.look_up_credential)
    async def look_up_credential(self, *args: Any, **kwargs: Any) -> Any:
        """A credential by its id alone, whatever its tenant, with its approval; changes nothing.

        For the approval page, where a token is all the caller has: the secret
        check that follows is what authorises. One read: the credential, its
        approval and votes, whether the expiry timer fired, the database's clock.
        """
        ...

    async def decide_approval(self, request: DecideRequest) -> DecideResult:
        """Consume the credential and count the vote, or nothing if a condition fails."""
        ...

    async def record_refusal(self, refusal: Refusal) -> bool:
        """Count a refused decision; True if it also became an event of the run's history."""
        ...

    @verb_of(txn.approval_refusals)
    async def approval_refusals(self, *args: Any, **kwargs: Any) -> Any:
        """The refused decisions kept for an approval, with how often each happened."""
        ...

    async def change_approvers(self, change: ApproverChange) -> bool:
        """Revoke one approver of a pending approval and/or add one (who is notified).

        The new policy is made from the one locked in the transaction, so changes
        made at once are all kept; False if the approval is not pending.
        """
        ...

    @verb_of(txn.issue_credentials)
    async def issue_credentials(self, *args: Any, **kwargs: Any) -> Any:
        """Store credential hashes for a pending approval; None if it is not pending.

        The approver's credentials issued before on this approval stop working.
        """
        ...

    @verb_of(txn.add_outbox)
    async def add_outbox(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.claim_outbox)
    async def claim_outbox(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.finish_outbox)
    async def finish_outbox(self, *args: Any, **kwargs: Any) -> Any:
        """Sent (error None), to retry at `retry_at`, or given up (retry_at None)."""
        ...

    @verb_of(txn.group_members)
    async def group_members(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.list_groups)
    async def list_groups(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.add_group_members)
    async def add_group_members(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.remove_group_members)
    async def remove_group_members(self, *args: Any, **kwargs: Any) -> Any: ...

    # -- definitions -------------------------------------------------------------
    @verb_of(txn.publish_definition)
    async def publish_definition(self, *args: Any, **kwargs: Any) -> Any:
        """The version with this digest, created as the next version if new (and whether);
        a new version over the tenant's `max_definitions` raises `QuotaExceeded`."""
        ...

    @verb_of(txn.get_definition)
    async def get_definition(self, *args: Any, **kwargs: Any) -> Any:
        """A version of a definition; the newest without `version`."""
        ...

    @verb_of(txn.list_definitions)
    async def list_definitions(self, *args: Any, **kwargs: Any) -> Any: ...

    # -- tenants and API keys ----------------------------------------------------
    @verb_of(txn.create_tenant)
    async def create_tenant(self, *args: Any, **kwargs: Any) -> Any:
        """Create a tenant; False (and nothing written) if it exists already."""
        ...

    @verb_of(txn.list_tenants)
    async def list_tenants(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.create_api_key)
    async def create_api_key(self, *args: Any, **kwargs: Any) -> Any:
        """Store a key of a tenant that exists (nothing written unless CREATED). Under
        `quotas`, one over `max_api_keys` is `QuotaExceeded`. With `distinct`,
        `IdentityTaken` (nothing written) if the key's principal is already a user, a
        key's principal, a group member or a pending approval's approver."""
        ...

    @verb_of(txn.list_api_keys)
    async def list_api_keys(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.revoke_api_key)
    async def revoke_api_key(self, *args: Any, **kwargs: Any) -> Any:
        """Revoke a key of `tenant` (a revoked one stays as it was); False if it has none."""
        ...

    @verb_of(txn.api_key_to_authenticate)
    async def api_key_to_authenticate(self, *args: Any, **kwargs: Any) -> Any:
        """The key with this id, if its tenant exists, and the database's clock.

        The one read not scoped by a tenant: it is how a key's tenant is learnt.
        """
        ...

    @verb_of(txn.touch_api_key)
    async def touch_api_key(self, *args: Any, **kwargs: Any) -> Any:
        """Record that a key was used at `now`, unless it was in the last `every` seconds."""
        ...

    # -- signals from outside: signal-with-start, webhooks by correlation ------------
    @verb_of(txn.signal_with_start)
    async def signal_with_start(self, *args: Any, **kwargs: Any) -> Any:
        """Create the run with its signal, or commit `signal` to the run of its id (None: that
        run is of another workflow, and nothing was written), in one transaction."""
        ...

    async def deliver_correlated(self, delivery: CorrelatedDelivery) -> DeliveryResult:
        """Signal every run waiting with the delivery's (key, value), keeping its id; a kept
        id delivers nothing again. Nothing is written if no run waits or one refuses."""

    # -- quotas ---------------------------------------------------------------------
    @verb_of(txn.tenant_state)
    async def tenant_state(self, *args: Any, **kwargs: Any) -> Any:
        """The tenant's row (None if never created) and what it holds now: running_runs,
        activities_in_flight, pending_timers, definitions."""
        ...

    @verb_of(txn.tenant_quotas)
    async def tenant_quotas(self, *args: Any, **kwargs: Any) -> Any:
        """The tenant's stored quota overrides (none without a row)."""
        ...

    @verb_of(txn.set_quotas)
    async def set_quotas(self, *args: Any, **kwargs: Any) -> Any:
        """Apply checked quota changes to an existing tenant; None if there is none."""
        ...

    # -- retention: purged runs -------------------------------------------------------
    @verb_of(txn.purge_runs)
    async def purge_runs(self, *args: Any, **kwargs: Any) -> Any:
        """Purge up to `limit` of the tenant's runs that finished before `cutoff`, oldest
        first, in one transaction: each leaves its summary in `purged_runs`, and its
        events, tasks, timers, correlations, approvals (with their credentials, votes,
        refusals and outbox messages) and row are deleted."""
        ...

    @verb_of(txn.count_purgeable)
    async def count_purgeable(self, *args: Any, **kwargs: Any) -> Any:
        """How many runs (up to `limit`) and events `purge_runs` would purge; writes nothing."""
        ...

    @verb_of(txn.get_purged_run)
    async def get_purged_run(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.finished_run_tenants)
    async def finished_run_tenants(self, *args: Any, **kwargs: Any) -> Any:
        """Up to `limit` tenants after `after` (in order) that have finished runs."""
        ...

    @verb_of(txn.list_purged_runs)
    async def list_purged_runs(self, *args: Any, **kwargs: Any) -> Any:
        """The tenant's purged runs, most recently purged first."""
        ...

    # -- payload encryption -----------------------------------------------------------
    @verb_of(txn.run_ids_after)
    async def run_ids_after(self, *args: Any, **kwargs: Any) -> Any:
        """Up to `limit` of the tenant's run ids that sort after `after`, in order."""
        ...

    @verb_of(txn.reencrypt_run)
    async def reencrypt_run(self, *args: Any, **kwargs: Any) -> Any:
        """Re-encrypt the run's stored payloads under the current key, in one transaction
        (None: no such run); `dry_run` counts and writes nothing."""
        ...

    # -- gauges for metrics, across tenants (operators' counts, no run's data) ---------
    @verb_of(txn.run_counts)
    async def run_counts(self, *args: Any, **kwargs: Any) -> Any:
        """How many runs each tenant has of each workflow in each status."""
        ...

    @verb_of(txn.queue_gauges)
    async def queue_gauges(self, *args: Any, **kwargs: Any) -> Any:
        """Tasks due by `now` that nobody holds, by tenant, queue and kind."""
        ...

    # -- console users and sessions ---------------------------------------------------
    @verb_of(users.create_user)
    async def create_user(self, *args: Any, **kwargs: Any) -> Any:
        """Store a user of a tenant that exists; False (nothing written) if the tenant
        has a user of that name, or does not exist. Under `quotas`, one over `max_users`
        is `QuotaExceeded`. With `distinct`, `IdentityTaken` (nothing written) if the name
        is already a key's principal, a group member or a pending approval's approver."""
        ...

    @verb_of(users.get_user)
    async def get_user(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(users.list_users)
    async def list_users(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(users.disable_user)
    async def disable_user(self, *args: Any, **kwargs: Any) -> Any:
        """Disable a user (a disabled one stays as it was) and end its sessions; False if
        the tenant has no such user."""
        ...

    @verb_of(users.set_password)
    async def set_password(self, *args: Any, **kwargs: Any) -> Any:
        """Replace a user's password hash, clear its failures and end its sessions."""
        ...

    @verb_of(users.record_sign_in)
    async def record_sign_in(self, *args: Any, **kwargs: Any) -> Any:
        """Count a failed sign-in of a user (and hold it back until `locked_until`), or
        clear the count after a success."""
        ...

    @verb_of(users.reserve_sign_in)
    async def reserve_sign_in(self, *args: Any, **kwargs: Any) -> Any:
        """Count an attempt as a failure before its password is checked (None), or say
        what holds it back (nothing counted). Rows untouched for `limits.forget_after`
        are forgotten."""
        ...

    @verb_of(users.settle_sign_in)
    async def settle_sign_in(self, *args: Any, **kwargs: Any) -> Any:
        """An attempt reserved before succeeded: it is no failure of its address or user,
        and the user's failures in a row at that address are cleared."""
        ...

    @verb_of(users.create_session)
    async def create_session(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(users.get_session)
    async def get_session(self, *args: Any, **kwargs: Any) -> Any:
        """The live (not ended) session of this token hash, with its user's or key's row."""
        ...

    @verb_of(users.end_session)
    async def end_session(self, *args: Any, **kwargs: Any) -> Any: ...

    # -- a tenant's lifecycle ---------------------------------------------------------
    @verb_of(tenants.disable_tenant)
    async def disable_tenant(self, *args: Any, **kwargs: Any) -> Any:
        """Mark a tenant disabled (a disabled one keeps its first `disabled_at` and
        `disabled_by`); None if there is no such tenant."""
        ...

    @verb_of(tenants.enable_tenant)
    async def enable_tenant(self, *args: Any, **kwargs: Any) -> Any:
        """Clear a tenant's disabled mark; None if there is no such tenant."""
        ...

    @verb_of(tenants.delete_tenant_rows)
    async def delete_tenant_rows(self, *args: Any, **kwargs: Any) -> Any:
        """Delete at most `batch` rows of a disabled tenant, table by table, and its own
        row once every other is gone. Nothing is deleted of a tenant not disabled."""
        ...

    # -- schedules (decision 0017) ----------------------------------------------------
    @verb_of(schedules.create_schedule)
    async def create_schedule(self, *args: Any, **kwargs: Any) -> Any:
        """Insert a schedule; False if the tenant has one of that id. Under `quotas` (the
        engine's, with the tenant's overrides) one over `max_schedules` is `QuotaExceeded`."""
        ...

    @verb_of(schedules.get_schedule)
    async def get_schedule(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(schedules.list_schedules)
    async def list_schedules(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(schedules.delete_schedule)
    async def delete_schedule(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(schedules.set_schedule_paused)
    async def set_schedule_paused(self, *args: Any, **kwargs: Any) -> Any:
        """Pause or resume (then from `next_fire_at`), recording `by` and `now` as who
        changed it last; False if there is no such schedule."""
        ...

    @verb_of(schedules.due_schedules)
    async def due_schedules(self, *args: Any, **kwargs: Any) -> Any:
        """Unpaused schedules, of every tenant, due at `now` (or holding a buffered fire)."""
        ...

    @verb_of(schedules.advance_schedule)
    async def advance_schedule(self, *args: Any, **kwargs: Any) -> Any:
        """Apply `advance` if the schedule's `next_fire_at` is still `advance.seen`."""
        ...

    @verb_of(schedules.schedule_counts)
    async def schedule_counts(self, *args: Any, **kwargs: Any) -> Any:
        """How many schedules each tenant has in each state (for the metrics' gauges)."""
        ...

    @verb_of(schedules.reencrypt_schedules)
    async def reencrypt_schedules(self, *args: Any, **kwargs: Any) -> Any:
        """Re-seal the inputs of the tenant's schedules under the current encryption key
        (plaintext ones are encrypted), in one transaction; `dry_run` writes nothing."""
        ...

    # -- webhook sources --------------------------------------------------------------
    @verb_of(txn.create_webhook_source)
    async def create_webhook_source(self, *args: Any, **kwargs: Any) -> Any:
        """Store a webhook source of its tenant; False (nothing written) if the tenant has
        one of that id. Its secret is sealed when the store has keys. Under `quotas`, one
        over `max_webhook_sources` is `QuotaExceeded`; a `url_id` another source has is
        `StoreContention`."""
        ...

    @verb_of(txn.list_webhook_sources)
    async def list_webhook_sources(self, *args: Any, **kwargs: Any) -> Any: ...

    @verb_of(txn.delete_webhook_source)
    async def delete_webhook_source(self, *args: Any, **kwargs: Any) -> Any:
        """Delete a source of `tenant` and its delivery ids; False if the tenant has none."""
        ...

    @verb_of(txn.webhook_source)
    async def webhook_source(self, *args: Any, **kwargs: Any) -> Any:
        """A source by its URL id alone, whatever its tenant (how a webhook's tenant is
        learnt)."""
        ...

    @verb_of(txn.reencrypt_webhook_secrets)
    async def reencrypt_webhook_secrets(self, *args: Any, **kwargs: Any) -> Any:
        """Seal the tenant's webhook sources' secrets under the current key (plaintext ones
        too): (sources, re-sealed); `dry_run` counts and writes nothing."""
        ...

    # -- named queues -----------------------------------------------------------------
    @verb_of(txn.configure_queue)
    async def configure_queue(self, *args: Any, **kwargs: Any) -> Any:
        """Set checked limits of the tenant's queue `name` (`concurrency`, `rate`; None: no
        such limit; a limit not in `changes` stays as it was); the queue as it is now. Under
        `quotas`, a new queue over `max_queues` is `QuotaExceeded`."""
        ...

    @verb_of(txn.list_queues)
    async def list_queues(self, *args: Any, **kwargs: Any) -> Any:
        """The tenant's queues (configured, or holding attempts), by name; or just `only`."""
        ...

    @verb_of(txn.admit_enqueued)
    async def admit_enqueued(self, *args: Any, **kwargs: Any) -> Any:
        """Admit the enqueued runs that their workflow queues' limits allow now (a refilled
        rate bucket, a raised limit, a slot freed); how many were admitted."""
        ...

    @verb_of(txn.queue_loads)
    async def queue_loads(self, *args: Any, **kwargs: Any) -> Any:
        """For metrics, across tenants: the tasks each queue holds running (leased), and
        the named queues' depth, running count and oldest due task."""
        ...

    # -- child runs: a run's links both ways ------------------------------------------
    @verb_of(txn.run_links)
    async def run_links(self, *args: Any, **kwargs: Any) -> Any:
        """The run's `parent` (`run_id`, `step`, `close`; None if it has none) and its
        `children` (`run_id`, `step`, `workflow`, `version`, `status`, `close`), oldest
        first; None if there is no such run."""
        ...

    # -- audits: runs read whole, legacy runs sealed (decision 0030) ------------------
    @verb_of(txn.audit_run)
    async def audit_run(self, *args: Any, **kwargs: Any) -> Any:
        """The run's row and history as stored, and what fails the checks of its rows
        and its approvals' rows (None: no such run)."""
        ...

    @verb_of(txn.seal_legacy_run)
    async def seal_legacy_run(self, *args: Any, **kwargs: Any) -> Any:
        """Bind a run written before histories and rows were bound to their run: its
        history hashed again from its genesis under the current chain key, and a check
        on its row and its approvals' rows that have none; in one transaction, only if
        its history verifies as a legacy one and its rows agree with it (None: no such
        run). `dry_run` writes nothing."""
        ...

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` when another process has work for this one.

        Runs until cancelled; returns at once if the database cannot notify
        (then polling finds the work). Topics: "tasks", "timers", and
        "reconnected" after a lost connection came back.
        """
        ...
