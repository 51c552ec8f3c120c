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
import getpass
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from waypost.errors import (
    NondeterminismError,
    RunNotFound,
    StoreCorrupted,
    UnknownWorkflow,
)
from waypost.model import approvals as ap
from waypost.model.definitions import (
    Definition,
    DefinitionError,
    InputError,
    Limits,
    Problem,
    input_problems,
    parse_definition,
)
from waypost.model.definitions.migration import check_mapping, check_migration
from waypost.model.events import (
    Event,
    EventType,
    NewEvent,
    canonical_json,
    feeds_code,
)
from waypost.model.status import RunStatus
from waypost.store.base import (
    DefinitionRecord,
    RunCommit,
    RunRecord,
    Store,
    WorkflowTaskOp,
)

from .interpreter import DEFINITIONS_QUEUE, HTTP_ACTIVITY, Interpreter, definition_of
from .records import AsyncRunHandle, DefinitionInfo, MigrationReport
from .registry import WorkflowDefn

if TYPE_CHECKING:
    from .core import AsyncEngine

_E = EventType


def _definition_version(version: Any) -> int | None:
    if version is None:
        return None
    if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
        return version
    if isinstance(version, str) and version.isdigit() and int(version) >= 1:
        return int(version)
    raise ValueError(f"a definition version is a number from 1, not {version!r}")


def _os_user() -> str:
    """Who runs this process, for audit records that name no principal."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        return f"uid {os.getuid()}"


class Definitions:
    """The definition commands of one engine, and the parsed versions it has loaded."""

    def __init__(
        self,
        engine: AsyncEngine,
        limits: Limits | Mapping[str, Limits] | Callable[[str], Limits] | None,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self._parsed: OrderedDict[tuple[str, str, int], Definition] = OrderedDict()

    @property
    def store(self) -> Store:
        return self.engine.store

    async def start(
        self,
        name: str,
        input: Any,
        *,
        run_id: str | None,
        tenant: str,
        version: str | int | None,
        by: str | None,
    ) -> AsyncRunHandle:
        """Start a run of `tenant`'s published definition `name` (`AsyncEngine.start`)."""
        number = _definition_version(version)
        record = await self.store.get_definition(tenant, name, number)
        if record is None:
            if number is not None and await self.store.get_definition(tenant, name) is not None:
                raise UnknownWorkflow(
                    f"definition {name!r} has no version {number} in tenant {tenant!r}"
                )
            known = ", ".join(self.engine.registry.workflow_names()) or "none"
            raise UnknownWorkflow(
                f"no workflow named {name!r} is registered (registered: {known}) and tenant "
                f"{tenant!r} has published no definition of that name"
            )
        definition = self.parsed(record)
        problems = input_problems(definition, input)
        if problems:
            raise InputError(name, problems)
        payload = self.engine.codec.encode(input if input is not None else {})
        started_data: dict[str, Any] = {
            "workflow": name,
            "version": str(record.version),
            "input": payload,
            "definition": {"name": name, "version": record.version, "digest": record.digest},
        }
        return await self.engine._create_run(
            tenant, run_id, name, str(record.version), payload, started_data, DEFINITIONS_QUEUE, by
        )

    def parsed(self, record: DefinitionRecord) -> Definition:
        """A stored version, validated once and kept (versions never change)."""
        key = (record.tenant, record.name, record.version)
        cached = self._parsed.get(key)
        if cached is not None and cached.digest == record.digest:
            self._parsed.move_to_end(key)
            return cached
        definition = parse_definition(record.body)
        if definition.digest != record.digest:
            raise StoreCorrupted(
                f"definition {record.name!r} version {record.version} of tenant "
                f"{record.tenant!r} does not match its digest: the stored body was changed"
            )
        self._parsed[key] = definition
        while len(self._parsed) > 256:
            self._parsed.popitem(last=False)
        return definition

    async def workflow(self, run: RunRecord, history: Sequence[Event]) -> WorkflowDefn:
        """The interpreter for a definition run, with every version its history names."""
        started = history[0].data["definition"]
        pinned = {int(started["version"]): str(started["digest"])}
        for ev in history:
            if ev.type == _E.RUN_MIGRATED:
                pinned[int(ev.data["to_version"])] = str(ev.data["to_digest"])
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
        interpreter = Interpreter(definitions, int(started["version"]))
        return WorkflowDefn(
            name=str(started["name"]), version=str(started["version"]), fn=interpreter.run
        )

    async def publish(
        self,
        definition: str | bytes | dict[str, Any],
        *,
        tenant: str = "default",
        by: str | None = None,
        limits: Limits | None = None,
    ) -> DefinitionInfo:
        """Validate and store a definition of a checked `tenant` (`AsyncEngine.publish`)."""
        known = [name for name in self.engine.registry.activity_names() if name != HTTP_ACTIVITY]
        parsed = parse_definition(
            definition, limits=limits or self.limits_for(tenant), known_activities=known or None
        )
        if self.engine.registry.has_workflow(parsed.name):
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
            source = definition.decode("utf-8", errors="replace")
        else:
            source = definition
        record, created = await self.store.publish_definition(
            tenant, parsed.name, parsed.digest, parsed.data, source, by, self.engine.clock()
        )
        return DefinitionInfo.of(record, created)

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

    async def versions(self, *, tenant: str = "default") -> list[DefinitionInfo]:
        """Every published version of every definition of `tenant`."""
        return [DefinitionInfo.of(r) for r in await self.store.list_definitions(tenant)]

    async def get(
        self, name: str, version: int | None = None, *, tenant: str = "default"
    ) -> DefinitionInfo:
        """One version (the newest by default); `LookupError` if there is none."""
        record = await self.store.get_definition(tenant, name, version)
        if record is None:
            which = "any version" if version is None else f"version {version}"
            raise LookupError(f"no definition {name!r} ({which}) in tenant {tenant!r}")
        return DefinitionInfo.of(record)

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
        """Check one run and, unless `dry_run`, move it (`AsyncEngine.migrate`)."""
        number = _definition_version(to_version)
        assert number is not None
        given = dict(mapping or {})
        if not dry_run and (not isinstance(reason, str) or not reason.strip()):
            raise ValueError("migrate needs a reason (it is recorded in the run's history)")
        if by is None:
            by = _os_user()
        elif not isinstance(by, str) or not by.strip():
            raise ValueError("by names who moves the run; leave it out for the OS user")
        run, history = await self.store.load_run(tenant, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")

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

        started = history[0].data.get("definition") if history else None
        if not isinstance(started, dict):
            return report(
                [f"run {run_id!r} runs workflow code ({run.workflow!r}), not a definition"]
            )
        name = str(started["name"])
        current = int(run.version)
        known = {"definition": name, "from_version": current}
        target = await self.store.get_definition(tenant, name, number)
        if target is None:
            raise LookupError(f"definition {name!r} has no version {number} in tenant {tenant!r}")
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
        inst = self.engine._new_instance(defn, tenant, run_id)
        try:
            try:
                inst.replay(history, run.processed_seq)
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
                where = "in the branches of" if len(position) > 1 else "at"
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
                info = await self.engine._approvals.get(approval_id, tenant=tenant)
                votes += len(info.votes) if info is not None else 0
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
        now = self.engine.clock()
        event = NewEvent(
            _E.RUN_MIGRATED,
            {
                "definition": name,
                "from_version": current,
                "to_version": number,
                "to_digest": target.digest,
                "mapping": {check.from_step: check.to_step, **given},
                "from_step": check.from_step,
                "to_step": check.to_step,
                "by": by,
                "reason": reason,
                "revoked_approvals": open_approvals,
            },
            now,
        )
        res = await self.engine._commit(
            RunCommit(
                tenant=tenant,
                run_id=run_id,
                events=[event],
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                set_version=str(number),
                close_approvals=[(a, ap.REVOKED) for a in open_approvals],
                workflow_op=WorkflowTaskOp.CLAIM if self.engine.accepting else WorkflowTaskOp.WAKE,
                owner=self.engine.owner,
                lease=self.engine.lease,
                claim_queues=self.engine.scheduler.workflow_queues,
            )
        )
        if not res.ok:
            return dataclasses.replace(
                result,
                compatible=False,
                reasons=["the run moved on while it was being checked; try again"],
            )
        self.engine._evict((tenant, run_id))
        if res.workflow_fence is not None:
            self.engine.spawn(
                self.engine._process(tenant, run_id, res.workflow_fence, res.workflow_queue)
            )
        else:
            self.engine.scheduler.wake()
        return dataclasses.replace(result, migrated=True)

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
        source = _definition_version(from_version)
        number = _definition_version(to_version)
        records = {}
        for version in (source, number):
            record = await self.store.get_definition(tenant, definition, version)
            if record is None:
                raise LookupError(
                    f"definition {definition!r} has no version {version} in tenant {tenant!r}"
                )
            records[version] = record
        if mapping:
            problems = check_mapping(
                self.parsed(records[source]),
                self.parsed(records[number]),
                mapping,
            )
            if problems:
                raise ValueError("the mapping is invalid: " + "; ".join(problems))
        reports = []
        for run in await self.store.list_runs(tenant, None, definition, 1_000_000):
            if run.version != str(source) or RunStatus(run.status).finished:
                continue
            reports.append(
                await self.engine.migrate(
                    run.run_id,
                    number,  # type: ignore[arg-type]
                    mapping,
                    reason=reason,
                    by=by,
                    dry_run=dry_run,
                    tenant=tenant,
                )
            )
        return reports
