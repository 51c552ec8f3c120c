"""Workflows defined as data, the engine part: publishing, starting, loading, migrating.

A published version is frozen: its canonical body and digest never change, so a
parsed version is cached by (tenant, name, version) and checked against the
stored digest once, when first loaded. A definition run pins the version(s) its
history names (RunStarted, then each RunMigrated); replay loads exactly those,
and a stored body that no longer matches its pinned digest is corruption, not a
new version.

`migrate` moves a run waiting at a top-level approval or wait step to another
version: it replays the run, checks that the new version can go on from the
mapped step with the run's data, and commits one RunMigrated event conditioned
on the run's last sequence number, revoking the step's open approval.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from waypost.engine.ports import Machinery, StartSignal
from waypost.engine.scheduler import WORKER_TTL
from waypost.errors import (
    DefinitionNotFound,
    InvalidRequest,
    NondeterminismError,
    QuotaExceeded,
    RunNotFound,
    StoreCorrupted,
    UnknownWorkflow,
)
from waypost.model import approvals as ap, operations as ops
from waypost.model.definitions import (
    Definition,
    DefinitionError,
    InputError,
    Limits,
    Problem,
    input_problems,
    parse_definition,
)
from waypost.model.definitions.migration import (
    call_step_reason,
    check_mapping,
    check_migration,
)
from waypost.model.events import (
    Event,
    EventType,
    RunMigrated,
    RunStarted,
    canonical_json,
    feeds_code,
)
from waypost.model.identity import Principal, preview
from waypost.model.operations_runs import RUN_PAGE_BYTES
from waypost.model.records import DefinitionInfo, MigrationReport, Started
from waypost.model.requests import handles
from waypost.model.status import RunStatus
from waypost.runtime.interpreter import (
    DEFINITIONS_QUEUE,
    HTTP_ACTIVITY,
    Interpreter,
    definition_of,
)
from waypost.runtime.registry import WorkflowDefn
from waypost.store.base import DefinitionRecord, RunCommit, RunRecord
from waypost.store.effects import CloseApprovals, SetVersion

from .room import Room
from .stored import answer_of

_E = EventType
_MIGRATE_PAGE = 500  # runs `migrate_all` reads at a time


def _definition_version(version: Any, what: str = "a definition version") -> int | None:
    if version is None:
        return None
    if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
        return version
    if isinstance(version, str) and version.isdigit() and int(version) >= 1:
        return int(version)
    raise InvalidRequest(f"{what} is a number from 1, not {preview(version)}", field="version")


def definition_info(
    record: DefinitionRecord, created: bool = False, warnings: Sequence[str] = ()
) -> DefinitionInfo:
    return answer_of(
        DefinitionInfo,
        record,
        created=created,
        warnings=tuple(warnings),
    )


def _missing(name: str, version: int | None, tenant: str) -> DefinitionNotFound:
    if version is None:
        return DefinitionNotFound(f"no definition {preview(name)} in tenant {preview(tenant)}")
    return DefinitionNotFound(
        f"definition {preview(name)} has no version {version} in tenant {preview(tenant)}"
    )


class Definitions(Room):
    """The definition operations of one engine, and the parsed versions it has loaded."""

    def __init__(
        self,
        machinery: Machinery,
        limits: Limits | Mapping[str, Limits] | Callable[[str], Limits] | None,
    ) -> None:
        super().__init__(machinery)
        self.limits = limits
        self._parsed: OrderedDict[tuple[str, str, int], Definition] = OrderedDict()

    async def start(
        self,
        req: ops.Start | ops.StartRun | ops.SignalWithStart,
        principal: Principal,
        signal: StartSignal | None = None,
    ) -> Started | None:
        """Start a run of the tenant's published definition `req.workflow`; None if the
        tenant has published no definition of that name. With `signal`, a signal-with-start
        (see `Machinery.start_run`)."""
        tenant, name = principal.tenant, str(req.workflow)
        record = await self.store.get_definition(tenant, name)  # the newest
        if record is None:
            return None
        number = _definition_version(req.version)
        if number is not None and number != record.version:
            found = await self.store.get_definition(tenant, name, number)
            if found is None:
                raise UnknownWorkflow(
                    f"definition {preview(name)} has no version {number} in tenant "
                    f"{preview(tenant)}"
                )
            record = found
        if isinstance(req, ops.StartFields) and req.run_timeout is not None:
            raise InvalidRequest(
                f"run_timeout is for workflows written as code; a run of definition "
                f"{preview(name)} takes the definition's own `timeout`",
                field="run_timeout",
            )
        definition = self.parsed(record)
        limits = self.limits_for(tenant)
        problems = input_problems(definition, req.input, limits)
        if problems:
            raise InputError(name, problems)
        payload = self.machinery.codec.encode(req.input if req.input is not None else {})
        await self.bounded(tenant, "input", payload)
        started_data = RunStarted(
            workflow=name,
            version=str(record.version),
            input=payload,
            started_by=req.started_by,
            definition={
                "name": name,
                "version": record.version,
                "digest": record.digest,
                # What the run may use, kept for its whole life (see runtime/interpreter.py).
                "limits": {
                    "max_run_seconds": limits.max_total_timeout,
                    "max_expression_steps": limits.max_expression_steps,
                    "max_expression_size": limits.max_expression_size,
                    "max_run_expression_steps": limits.max_run_expression_steps,
                    "max_run_expression_size": limits.max_run_expression_size,
                    "max_map_items": limits.max_map_items,
                    "max_map_concurrency": limits.max_map_concurrency,
                },
            },
        )
        return await self.machinery.start_run(
            tenant=tenant,
            run_id=req.run_id,
            workflow=name,
            version=str(record.version),
            payload=payload,
            started_data=started_data,
            queue=DEFINITIONS_QUEUE,
            signal=signal,
            priority=req.priority,
            concurrency_key=req.concurrency_key if isinstance(req, ops.StartFields) else None,
            dedup_id=req.dedup_id if isinstance(req, ops.StartFields) else None,
            run_queue=req.queue if isinstance(req, ops.StartFields) else None,
        )

    async def bounded(self, tenant: str, what: str, value: Any) -> None:
        """Refuse a payload larger than the tenant's `max_payload_bytes` (as JSON text).

        One setting, two places to set it: the tenant's quota (`Quotas.max_payload_bytes`,
        from the engine's `quotas` or the tenant's row) wins when set; unset, the
        tenant's `Limits.max_payload_bytes` applies.
        """
        limit = await self.payload_limit(tenant)
        size = len(canonical_json(value).encode())
        if size > limit:
            raise QuotaExceeded(
                "max_payload_bytes",
                f"the {what} is {size} bytes of JSON; tenant {preview(tenant)} allows "
                f"at most {limit}",
            )

    async def payload_limit(self, tenant: str) -> int:
        """The tenant's `max_payload_bytes`: its quota if set, else its `Limits`'."""
        quota = (await self.machinery.quotas.get(tenant)).max_payload_bytes
        return quota if quota is not None else self.payload_default(tenant)

    def payload_default(self, tenant: str) -> int:
        """The tenant's `max_payload_bytes` when no quota sets it: its `Limits`'."""
        return self.limits_for(tenant).max_payload_bytes

    def parsed(self, record: DefinitionRecord) -> Definition:
        """A stored version, validated once and kept (versions never change)."""
        key = (record.tenant, record.name, record.version)
        cached = self._parsed.get(key)
        if cached is not None and cached.digest == record.digest:
            self._parsed.move_to_end(key)
            return cached
        definition = parse_definition(record.body, published=True)
        if definition.digest != record.digest:
            raise StoreCorrupted(
                f"definition {record.name!r} version {record.version} of tenant "
                f"{record.tenant!r} does not match its digest: the stored body was changed"
            )
        self._parsed[key] = definition
        while len(self._parsed) > 256:
            self._parsed.popitem(last=False)
        return definition

    async def workflow_for(self, run: RunRecord, history: Sequence[Event]) -> WorkflowDefn | None:
        """The interpreter for a definition run, with every version its history names."""
        if not history or "definition" not in history[0].data:
            return None
        return await self.workflow(run, history)

    async def workflow(self, run: RunRecord, history: Sequence[Event]) -> WorkflowDefn:
        """The interpreter for a definition run, with every version its history names."""
        started = RunStarted.parse(history[0]).definition or {}
        pinned = {int(started["version"]): str(started["digest"])}
        for ev in history:
            if ev.type == _E.RUN_MIGRATED:
                migrated = RunMigrated.parse(ev)
                pinned[int(migrated.to_version)] = str(migrated.to_digest)
        definitions: dict[int, Definition] = {}
        for number, digest in pinned.items():
            cached = self._parsed.get((run.tenant, str(started["name"]), number))
            if cached is not None and cached.digest == digest:
                definitions[number] = cached  # checked against the store when first loaded
                continue
            record = await self.store.get_definition(run.tenant, started["name"], number)
            if record is None:
                raise StoreCorrupted(
                    f"definition {started['name']!r} version {number} of run {run.run_id!r} "
                    "is missing from the store"
                )
            if record.digest != digest:
                raise StoreCorrupted(
                    f"definition {started['name']!r} version {number} has digest "
                    f"{record.digest[:12]}..., but run {run.run_id!r} was pinned to "
                    f"{digest[:12]}...: the stored version was changed"
                )
            definitions[number] = self.parsed(record)
        interpreter = Interpreter(definitions, int(started["version"]), started.get("limits"))
        return WorkflowDefn(
            name=str(started["name"]),
            version=str(started["version"]),
            fn=interpreter.run,
            tenant_defined=True,
        )

    @handles(ops.Publish)
    async def publish(self, req: ops.Publish, principal: Principal) -> DefinitionInfo:
        """Validate and store a definition (`AsyncEngine.publish`)."""
        tenant, definition = principal.tenant, req.definition
        registry = self.machinery.registry
        known = [name for name in registry.activity_names() if name != HTTP_ACTIVITY]
        parsed = parse_definition(
            definition,
            limits=req.limits or self.limits_for(tenant),
            known_activities=known or None,
        )
        if registry.has_workflow(parsed.name):
            raise DefinitionError(
                [
                    Problem(
                        "name",
                        f"{parsed.name!r} is the name of a code workflow this engine runs; "
                        "starting a run by that name would run the code, not this definition",
                    )
                ],
                parsed.name,
            )
        if isinstance(definition, dict):
            source = canonical_json(definition)
        elif isinstance(definition, bytes):
            source = definition.decode("utf-8-sig")  # parse_definition read it so
        else:
            source = definition
        record, created = await self.store.publish_definition(
            tenant,
            parsed.name,
            parsed.digest,
            parsed.data,
            source,
            req.by,
            self.machinery.settings.clock(),
            self.machinery.settings.quotas,
        )
        return definition_info(record, created, await self._unserved(parsed))

    async def _unserved(self, parsed: Definition) -> list[str]:
        """What no running worker (nor this engine) serves: runs would wait there."""
        m = self.machinery
        served: set[str] = set()
        for worker in await m.store.live_workers(m.settings.clock() - WORKER_TTL):
            served.update(worker.queues)
        warnings = [
            f"no running worker serves activity {name!r}: runs wait at its steps until one does"
            for name in sorted(parsed.activities - served)
        ]
        if HTTP_ACTIVITY not in served and any("http" in s for s in parsed.all_steps.values()):
            warnings.append(
                "no running worker runs http steps (start one with --http-allow): runs wait "
                "at them until one does"
            )
        return warnings

    def limits_for(self, tenant: str) -> Limits:
        """What `tenant`'s definitions may contain (the engine's `limits` option)."""
        chosen = self.limits
        if chosen is None:
            return Limits()
        if isinstance(chosen, Limits):
            return chosen
        if isinstance(chosen, Mapping):
            found = chosen.get(tenant, chosen.get("*"))
            return found if isinstance(found, Limits) else Limits()
        return chosen(tenant)

    @handles(ops.ListDefinitions)
    async def versions(
        self, req: ops.ListDefinitions, principal: Principal
    ) -> list[DefinitionInfo]:
        """The tenant's published versions: of every definition, or of `req.definition`."""
        found = await self.store.list_definitions(principal.tenant, req.definition)
        return [definition_info(r) for r in found]

    @handles(ops.GetDefinition)
    async def get(self, req: ops.GetDefinition, principal: Principal) -> DefinitionInfo:
        """One version (the newest by default); `DefinitionNotFound` if there is none."""
        version = _definition_version(req.version)
        record = await self.store.get_definition(principal.tenant, req.definition, version)
        if record is None:
            raise _missing(req.definition, version, principal.tenant)
        return definition_info(record)

    @handles(ops.Migrate)
    async def migrate(self, req: ops.Migrate, principal: Principal) -> MigrationReport:
        """Check one run and, unless `dry_run`, move it (`AsyncEngine.migrate`)."""
        tenant, run_id, dry_run, reason, by = (
            principal.tenant,
            req.run_id,
            req.dry_run,
            req.reason,
            req.by,
        )
        number = _definition_version(req.to_version)
        assert number is not None
        given = dict(req.mapping or {})
        run, history = await self.store.load_run(tenant, run_id)
        if run is None:
            raise RunNotFound(f"no run {preview(run_id)} in tenant {preview(tenant)}")

        def report(reasons: list[str], **fields: Any) -> MigrationReport:
            values: dict[str, Any] = {
                "run_id": run_id,
                "tenant": tenant,
                "definition": None,
                "from_version": None,
                "to_version": number,
                "from_step": None,
                "to_step": None,
                "compatible": not reasons,
                "migrated": False,
                "dry_run": dry_run,
                "reasons": reasons,
                "notes": [],
            }
            values.update(fields)
            return MigrationReport(**values)

        started = RunStarted.parse(history[0]).definition if history else None
        if not isinstance(started, dict):
            return report(
                [f"run {run_id!r} runs workflow code ({run.workflow!r}), not a definition"]
            )
        name = str(started["name"])
        current = int(run.version)
        known = {"definition": name, "from_version": current}
        target = await self.store.get_definition(tenant, name, number)
        if target is None:
            raise _missing(name, number, tenant)
        status = RunStatus(run.status)
        if status.finished:
            return report([f"the run has finished ({status.value})"], **known)
        if status is RunStatus.SUSPENDED:
            return report(["the run is suspended; resolve that first"], **known)
        if current == number:
            return report([f"the run is on version {number} already"], **known)
        if any(feeds_code(e) for e in history if e.seq > run.processed_seq):
            return report(
                ["the run has events it has not processed yet; try again in a moment"], **known
            )
        defn = await self.workflow(run, history)
        inst = self.machinery.new_instance(defn, tenant, run_id)
        replay = functools.partial(inst.replay, history, run.processed_seq)
        try:
            try:
                await self.machinery.compute.feed(
                    inst, replay, "its replay", events=len(history), asked=True
                )
            except NondeterminismError as exc:
                return report([f"replaying the run failed: {exc}"], **known)
            interpreter = definition_of(defn.fn)
            assert interpreter is not None
            position = dict(interpreter.position)
            at = position.get("")
            if at is None or inst.finished:
                return report(["the run is not at any step"], **known)
            if len(position) > 1 or not interpreter.waiting:
                kind = interpreter.definition.all_steps[at]["type"]
                if kind == "call" and len(position) == 1:
                    return report([call_step_reason(at, run.waiting_for)], **known, from_step=at)
                inside = "in the items of" if kind == "map" else "in the branches of"
                where = inside if len(position) > 1 else "at"
                return report(
                    [
                        f"only a run waiting at a top-level approval or wait step can be moved; "
                        f"this one is {where} {kind} step {at!r}"
                    ],
                    **known,
                    from_step=at,
                )
            open_approvals = [
                w["approval_id"] for w in run.waiting_for if w.get("kind") == "approval"
            ]
            votes = 0
            for approval_id in open_approvals:
                votes += len(await self.store.approval_votes(tenant, approval_id))
            check = check_migration(
                interpreter.definition,
                self.parsed(target),
                at=at,
                data=interpreter.data,
                run_input=run.input,
                mapping=given,
                votes=votes,
            )
        finally:
            inst.close()
        result = report(
            check.reasons,
            **known,
            from_step=check.from_step,
            to_step=check.to_step,
            notes=check.notes,
        )
        if dry_run or not check.compatible:
            return result
        now = self.machinery.settings.clock()
        event = RunMigrated(
            definition=name,
            from_version=current,
            to_version=number,
            to_digest=target.digest,
            mapping={check.from_step: check.to_step, **given},
            from_step=check.from_step,
            to_step=check.to_step,
            by=by,
            reason=reason,
            revoked_approvals=open_approvals,
        ).at(now)
        closed = [(a, ap.REVOKED) for a in open_approvals]
        revoked = (CloseApprovals(closed),) if closed else ()
        res = await self.machinery.commit_and_wake(
            RunCommit(
                tenant=tenant,
                run_id=run_id,
                events=[event],
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                effects=(SetVersion(str(number)), *revoked),
            )
        )
        if not res.ok:
            return dataclasses.replace(
                result,
                compatible=False,
                reasons=["the run moved on while it was being checked; try again"],
            )
        # The cached instance is stale: dropped before the spawned processing starts.
        self.machinery.forget(tenant, run_id)
        return dataclasses.replace(result, migrated=True)

    @handles(ops.MigrateAll)
    async def migrate_all(self, req: ops.MigrateAll, principal: Principal) -> list[MigrationReport]:
        """`migrate` every unfinished run of one version of a definition; a report per run."""
        tenant, definition, mapping = principal.tenant, req.definition, req.mapping
        source = _definition_version(req.from_version)
        number = _definition_version(req.to_version)
        assert number is not None
        records = {}
        for version in (source, number):
            record = await self.store.get_definition(tenant, definition, version)
            if record is None:
                raise _missing(definition, version, tenant)
            records[version] = record
        if mapping:
            problems = check_mapping(
                self.parsed(records[source]),
                self.parsed(records[number]),
                mapping,
            )
            if problems:
                raise InvalidRequest(
                    "the mapping is invalid: " + "; ".join(problems), field="mapping"
                )
        reports = []
        # The version's runs a page at a time (bounded in bytes as every page of runs),
        # never all at once: a keyset on (created_at, run_id), which migrating leaves be.
        after: tuple[float, str] | None = None
        more = True
        while more:
            runs, more = await self.store.page_runs(
                tenant, None, definition, after, _MIGRATE_PAGE, RUN_PAGE_BYTES, str(source)
            )
            if runs:
                after = (runs[-1].created_at, runs[-1].run_id)
            for run in runs:
                if run.version != str(source) or RunStatus(run.status).finished:
                    continue
                one = ops.Migrate(
                    run_id=run.run_id,
                    to_version=number,
                    mapping=mapping,
                    reason=req.reason,
                    dry_run=req.dry_run,
                    by=req.by,
                )
                reports.append(await self.migrate(one, principal))
        return reports
