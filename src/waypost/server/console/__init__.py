"""The web console, served by `waypost server` at `/`: sign-in, runs, a run, suspended
runs, the approver's inbox, definitions, schedules.

Server-rendered HTML (Jinja2 templates in `server/templates/console/`), a stylesheet
and one small script served by waypost itself, nothing from another site. Every page
reads through the one door as the principal of the browser's session
(`session.py`), so the roles of that principal decide what it sees and may do, and
the door's refusals show as messages. Each area of the console is a module with its
own router; `router()` gathers them.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import approvals, assets, definitions, run, runs, schedules, signin, suspended


def router() -> APIRouter:
    """Every console page's route."""
    gathered = APIRouter(include_in_schema=False)
    for area in (assets, signin, runs, run, suspended, approvals, definitions, schedules):
        gathered.include_router(area.router)
    return gathered
