"""Property-based fuzzing of the whole API from its OpenAPI document (schemathesis).

Every operation the document lists is called with generated requests, valid and
invalid, as an admin of a tenant that has a published definition and runs: no
answer may be a server error, and every answer (status, content type, body) must
be one the document declares.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

import waypost as wp

from .server_fixtures import make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(300)

KEY: dict[str, str] = {}

DEFINITION = """
name: spend
input: {type: object, properties: {amount: {type: number}}}
start: ask
steps:
  ask:
    type: approval
    approvers: {users: [ann], quorum: 1}
    input: {amount: amount}
    on_reject: refused
    next: granted
  granted: {type: succeed}
  refused: {type: fail, error: refused, message: No.}
"""


@wp.workflow(name="fuzz_wait")
async def fuzz_wait(ctx: wp.WorkflowContext, name: Any = None) -> Any:
    return await ctx.wait_signal("go")


@pytest.fixture
def fuzz_engine(db_url: str) -> Iterator[wp.Engine]:
    engine = wp.Engine(db_url, lease=2.0, poll_interval=0.05, shutdown_grace=2.0)
    engine.register(fuzz_wait)
    with engine.running():
        yield engine
    engine.close()


@pytest.fixture
def api_schema(fuzz_engine: wp.Engine, serve: Any) -> Any:
    """The document of a server whose tenant has a definition, runs and an approval
    (the server stops before the engine: `serve` is set up after `fuzz_engine`)."""
    base = serve(fuzz_engine)
    KEY["admin"] = make_key(fuzz_engine, "acme", "root", "admin")
    fuzz_engine.publish(DEFINITION, tenant="acme")
    fuzz_engine.start("fuzz_wait", "x", run_id="run-1", tenant="acme")
    fuzz_engine.start("spend", {"amount": 3}, run_id="run-2", tenant="acme")
    return schemathesis.openapi.from_url(f"{base}/openapi.json")


# schemathesis's strategies draw from the `random` module, which Hypothesis reports (once per
# process, so the first example "fails" and its replay passes) as a deprecation: not ours.
@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)
def test_no_server_error_and_every_answer_as_documented(api_schema: Any) -> None:
    failures: dict[str, str] = {}
    session = requests.Session()  # closed at the end: no connection is left to the collector
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=100,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            # Every default check but "a schema-valid request is accepted": a definition
            # or an input can be well-formed JSON and still be refused, with 422, for what
            # it says.
            case.call_and_validate(
                session=session,
                headers={"Authorization": f"Bearer {KEY['admin']}"},
                excluded_checks=[positive_data_acceptance],
            )

        try:
            check()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            inner = getattr(exc, "exceptions", ())  # a flaky failure carries the first one
            failures[operation.label] = "\n".join([str(exc), *map(repr, inner)])[:4000]
    session.close()
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
