"""The HTTP API (v1), a module per domain: each route parses, calls the one door, and
answers JSON (`common.py` holds what they share).

`ROUTERS` is the order the app includes them in, which is the order FastAPI matches
paths in and the OpenAPI document lists them in.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import (
    approvals,
    definitions,
    health,
    queues,
    runs,
    schedules,
    tenants,
    updates,
    users,
    webhooks,
)

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    definitions.router,
    runs.router,
    approvals.router,
    webhooks.router,
    tenants.router,
    schedules.router,
    updates.router,
    queues.router,
    users.router,
)
