"""What the tests of `http` steps share: a one-step definition and an engine that may call
the local servers with secrets."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import waypost as wp
from waypost.features.http import HTTP_ACTIVITY
from waypost.runtime.context import ActivityContext


def push_definition(url: str, headers: dict[str, Any], retry: dict[str, Any]) -> str:
    """`crm_sync`: one `http` step `push` that POSTs `{"id": id}` to `url` with `headers`
    and ends with the answer as `$.answer`."""
    return json.dumps(
        {
            "name": "crm_sync",
            "start": "push",
            "steps": {
                "push": {
                    "type": "activity",
                    "http": {
                        "url": url,
                        "method": "POST",
                        "headers": headers,
                        "body": {"id": "id"},
                    },
                    "retry": retry,
                    "output": "$.answer",
                }
            },
        }
    )


@contextmanager
def secret_engine(db_url: str, secrets: Callable[[str, str], Any]) -> Iterator[wp.Engine]:
    """A running engine that may call 127.0.0.1 and resolves secrets with `secrets`."""
    eng = wp.Engine(
        db_url,
        lease=2.0,
        poll_interval=0.05,
        shutdown_grace=2.0,
        http_allow=["127.0.0.1"],
        http_secrets=secrets,
    )
    with eng.running():
        yield eng
    eng.close()


def http_attempt(tenant: str = "default", key: str = "r1:1") -> ActivityContext:
    """The context of attempt 1 of an `http` activity in run `r1`, a minute to go."""
    return ActivityContext(
        tenant=tenant,
        run_id="r1",
        step_id="1",
        activity=HTTP_ACTIVITY,
        attempt=1,
        idempotency_key=key,
        deadline=time.time() + 60,
        clock=time.time,
    )
