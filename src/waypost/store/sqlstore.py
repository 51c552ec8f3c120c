"""The Store verbs, once for every SQL dialect.

A dialect supplies how a transaction function runs (`_write`: in a write
transaction; `_read`: in a read-only snapshot), the `Tx` subclass it runs it
with, and its own lifecycle. Each verb of the `Store` Protocol is then its
transaction function of `transactions/`, run by `write(...)` or `read(...)`:
the verb takes the function's parameters (after the `Tx`) and its docstring,
and mypy checks that the result still satisfies the Protocol.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Concatenate, TypeVar

from waypost.errors import ConfigurationError
from waypost.model.chain import PLAIN, Chain
from waypost.model.encryption import Keys

from . import transactions as txn
from .transactions import schedules, search, tenants, users
from .tx import Tx
from .verbs import P, Verb

T = TypeVar("T")


def _verb(fn: Callable[Concatenate[Tx, P], T], writes: bool) -> Verb[P, T]:
    """The store verb that runs the transaction function `fn` in a write transaction
    (`writes`) or in a read-only snapshot."""

    async def verb(self: SqlStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        run = self._write if writes else self._read
        if kwargs:
            return await run(functools.partial(fn, **kwargs), *args)
        return await run(fn, *args)

    functools.update_wrapper(verb, fn)
    return verb


def write(fn: Callable[Concatenate[Tx, P], T]) -> Verb[P, T]:
    """The store verb that runs the transaction function `fn` in a write transaction."""
    return _verb(fn, writes=True)


def read(fn: Callable[Concatenate[Tx, P], T]) -> Verb[P, T]:
    """The store verb that runs the transaction function `fn` in a read-only snapshot."""
    return _verb(fn, writes=False)


class SqlStore(ABC):
    """Implements the `Store` verbs with the shared transactions of `transactions/`;
    a dialect provides how a transaction function runs (`_write`, `_read`)."""

    chain: Chain = PLAIN
    keys: Keys | None = None
    # True when the engine is nearly idle: a write with nothing to be grouped
    # with may run at once (the dialect that groups writes asks it).
    inline_probe: Callable[[], bool] | None = None

    @property
    def reachable(self) -> bool:
        """A file on this machine is always reachable; a server's store says otherwise."""
        return True

    @property
    @abstractmethod
    def opened(self) -> bool:
        """Whether the store is open."""

    def use_chain(self, chain: Chain) -> None:
        """Hash the events this store appends with `chain` (before the store opens)."""
        if self.opened:
            raise ConfigurationError("a store's chain is set before it opens")
        self.chain = chain

    def use_keys(self, keys: Keys | None) -> None:
        """Encrypt the payloads this store writes with `keys` (before the store opens)."""
        if self.opened:
            raise ConfigurationError("a store's encryption keys are set before it opens")
        self.keys = keys

    def use_idle_probe(self, nearly_idle: Callable[[], bool]) -> None:
        """Ask `nearly_idle()` before grouping a write (see `Store.use_idle_probe`)."""
        self.inline_probe = nearly_idle

    @abstractmethod
    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the transaction function `fn(tx, *args)` in a write transaction."""

    @abstractmethod
    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the transaction function `fn(tx, *args)` in a read-only snapshot."""

    # -- runs, tasks, timers and workers ------------------------------------------
    create_run = write(txn.create_run)
    commit_run = write(txn.commit_run)
    claim_tasks = write(txn.claim_tasks)
    renew_leases = write(txn.renew_leases)
    release_tasks = write(txn.release_tasks)
    retime_activity = write(txn.retime_activity)
    expired_activities = read(txn.expired_activities)
    fire_due_timers = write(txn.fire_due_timers)
    next_timer_at = read(txn.next_timer_at)
    get_run = read(txn.get_run)
    load_history = read(txn.load_history)
    history_page = read(txn.history_page)
    list_runs = read(txn.list_runs)
    load_run = read(txn.load_run)
    load_idle_run = read(txn.load_idle_run)
    run_links = read(txn.run_links)
    run_tasks = read(txn.run_tasks)
    beat_worker = write(txn.beat_worker)
    remove_worker = write(txn.remove_worker)
    release_owner = write(txn.release_owner)
    live_workers = read(txn.live_workers)

    # -- pages of runs and what is in motion for them ---------------------------------
    page_runs = read(txn.page_runs)
    search_runs = read(search.search_runs)
    count_runs = read(search.count_runs)
    run_outlooks = read(txn.run_outlooks)

    # -- approvals, the directory and the outbox --------------------------------
    get_approval = read(txn.get_approval)
    list_approvals = read(txn.list_approvals)
    get_credential = read(txn.get_credential)
    approval_votes = read(txn.approval_votes)
    look_up_credential = read(txn.look_up_credential)
    decide_approval = write(txn.decide_approval)
    record_refusal = write(txn.record_refusal)
    approval_refusals = read(txn.approval_refusals)
    change_approvers = write(txn.change_approvers)
    issue_credentials = write(txn.issue_credentials)
    add_outbox = write(txn.add_outbox)
    claim_outbox = write(txn.claim_outbox)
    finish_outbox = write(txn.finish_outbox)
    group_members = read(txn.group_members)
    list_groups = read(txn.list_groups)
    add_group_members = write(txn.add_group_members)
    remove_group_members = write(txn.remove_group_members)

    # -- definitions -------------------------------------------------------------
    publish_definition = write(txn.publish_definition)
    get_definition = read(txn.get_definition)
    list_definitions = read(txn.list_definitions)

    # -- tenants and API keys ----------------------------------------------------
    create_tenant = write(txn.create_tenant)
    list_tenants = read(txn.list_tenants)
    create_api_key = write(txn.create_api_key)
    list_api_keys = read(txn.list_api_keys)
    revoke_api_key = write(txn.revoke_api_key)
    api_key_to_authenticate = read(txn.api_key_to_authenticate)
    touch_api_key = write(txn.touch_api_key)

    # -- console users and sessions ------------------------------------------------
    create_user = write(users.create_user)
    get_user = read(users.get_user)
    list_users = read(users.list_users)
    disable_user = write(users.disable_user)
    set_password = write(users.set_password)
    record_sign_in = write(users.record_sign_in)
    reserve_sign_in = write(users.reserve_sign_in)
    # -- a tenant's lifecycle ------------------------------------------------------
    disable_tenant = write(tenants.disable_tenant)
    enable_tenant = write(tenants.enable_tenant)
    delete_tenant_rows = write(tenants.delete_tenant_rows)
    settle_sign_in = write(users.settle_sign_in)
    create_session = write(users.create_session)
    get_session = read(users.get_session)
    end_session = write(users.end_session)

    # -- schedules ---------------------------------------------------------------------
    create_schedule = write(schedules.create_schedule)
    get_schedule = read(schedules.get_schedule)
    list_schedules = read(schedules.list_schedules)
    delete_schedule = write(schedules.delete_schedule)
    set_schedule_paused = write(schedules.set_schedule_paused)
    due_schedules = read(schedules.due_schedules)
    advance_schedule = write(schedules.advance_schedule)
    schedule_counts = read(schedules.schedule_counts)
    reencrypt_schedules = write(schedules.reencrypt_schedules)

    # -- signals from outside: signal-with-start, webhooks by correlation ------------
    signal_with_start = write(txn.signal_with_start)
    create_webhook_source = write(txn.create_webhook_source)
    list_webhook_sources = read(txn.list_webhook_sources)
    delete_webhook_source = write(txn.delete_webhook_source)
    webhook_source = read(txn.webhook_source)
    reencrypt_webhook_secrets = write(txn.reencrypt_webhook_secrets)
    deliver_correlated = write(txn.deliver_correlated)

    # -- quotas ---------------------------------------------------------------------
    tenant_state = read(txn.tenant_state)
    tenant_quotas = read(txn.tenant_quotas)
    set_quotas = write(txn.set_quotas)

    # -- named queues ---------------------------------------------------------------
    configure_queue = write(txn.configure_queue)
    list_queues = read(txn.list_queues)
    admit_enqueued = write(txn.admit_enqueued)

    # -- retention: purged runs -------------------------------------------------------
    purge_runs = write(txn.purge_runs)
    count_purgeable = read(txn.count_purgeable)
    get_purged_run = read(txn.get_purged_run)
    list_purged_runs = read(txn.list_purged_runs)
    finished_run_tenants = read(txn.finished_run_tenants)

    # -- payload encryption -----------------------------------------------------------
    run_ids_after = read(txn.run_ids_after)
    reencrypt_run = write(txn.reencrypt_run)

    # -- audits: runs judged whole, legacy runs bound to their id ----------------------
    audit_run = read(txn.audit_run)
    seal_legacy_run = write(txn.seal_legacy_run)

    # -- gauges for metrics, across tenants -----------------------------------------
    run_counts = read(txn.run_counts)
    queue_gauges = read(txn.queue_gauges)
    queue_loads = read(txn.queue_loads)
